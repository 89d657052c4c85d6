"""google-research BERT / ALBERT TF1 checkpoints, written here with the original names."""

import os

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ctx.convert import CheckpointError
from keras_ctx.convert.tensorflow import from_tf_checkpoint, to_tf_checkpoint
from tests.convert import numpy_refs
from tests.convert.tf_checkpoint_files import (
    BERT_CONFIG,
    bert_tf_variables,
    electra_tf_variables,
    save_tf1_checkpoint,
)


def hf_view_of_bert(variables):
    """HF names for the numpy reference: TF kernels are (in, out), torch weights (out, in)."""
    t = {}
    for name, value in variables.items():
        if not name.startswith("bert/") or name.endswith("adam_m"):
            continue
        parts = name[len("bert/"):].split("/")
        leaf = parts.pop()
        parts = [p.replace("layer_", "layer.") if p.startswith("layer_") else p for p in parts]
        base = ".".join(parts)
        if leaf.endswith("_embeddings"):
            t[f"{base}.{leaf}.weight"] = value
        elif leaf == "kernel":
            t[base + ".weight"] = value.T
        else:
            t[base + "." + {"gamma": "weight", "beta": "bias", "bias": "bias"}[leaf]] = value
    return t


def _fixed_pair_inputs():
    ids = np.array([[2, 7, 11, 29, 3, 0], [2, 9, 3, 0, 0, 0]], "int32")
    return {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"),
            "segment_ids": np.array([[0, 0, 0, 1, 1, 0], [0] * 6], "int32")}


def test_google_bert_checkpoint_matches_numpy_and_round_trips(tmp_path):
    variables = bert_tf_variables()
    directory = save_tf1_checkpoint(tmp_path / "bert", variables, BERT_CONFIG,
                                    "bert_config.json", "bert_model.ckpt")
    with open(os.path.join(directory, "vocab.txt"), "w") as handle:
        handle.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world"]) + "\n")
    backbone = from_tf_checkpoint(directory)
    inputs = _fixed_pair_inputs()
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    config = dict(BERT_CONFIG, layer_norm_eps=1e-12)
    want = numpy_refs.numpy_bert(hf_view_of_bert(variables), config, inputs["token_ids"],
                                 inputs["padding_mask"], inputs["segment_ids"])
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)
    assert backbone.tokenizer("hello world").tolist() == [4, 5]

    out = to_tf_checkpoint(backbone, tmp_path / "out")
    written = dict(tf.train.list_variables(os.path.join(out, "bert_model.ckpt")))
    expected = {n for n in variables if n.startswith("bert/") and not n.endswith("adam_m")}
    assert set(written) == expected
    reader = tf.train.load_checkpoint(os.path.join(out, "bert_model.ckpt"))
    for name in expected:
        np.testing.assert_array_equal(reader.get_tensor(name), variables[name])
    again = from_tf_checkpoint(out)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)


ALBERT_CONFIG = {"vocab_size": 30, "embedding_size": 8, "hidden_size": 16,
                 "num_hidden_layers": 3, "num_hidden_groups": 1, "inner_group_num": 1,
                 "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
                 "max_position_embeddings": 12, "type_vocab_size": 2,
                 "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def albert_tf_variables(seed=1):
    """The variables of google-research/albert's modeling.py."""
    c = ALBERT_CONFIG
    v, e, h, f = c["vocab_size"], c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    g = "bert/encoder/transformer/group_0/inner_group_0/"
    shapes = {"bert/embeddings/word_embeddings": (v, e),
              "bert/embeddings/token_type_embeddings": (2, e),
              "bert/embeddings/position_embeddings": (c["max_position_embeddings"], e),
              "bert/embeddings/LayerNorm/gamma": (e,), "bert/embeddings/LayerNorm/beta": (e,),
              "bert/encoder/embedding_hidden_mapping_in/kernel": (e, h),
              "bert/encoder/embedding_hidden_mapping_in/bias": (h,),
              g + "attention_1/output/dense/kernel": (h, h),
              g + "attention_1/output/dense/bias": (h,),
              g + "LayerNorm/gamma": (h,), g + "LayerNorm/beta": (h,),
              g + "ffn_1/intermediate/dense/kernel": (h, f),
              g + "ffn_1/intermediate/dense/bias": (f,),
              g + "ffn_1/intermediate/output/dense/kernel": (f, h),
              g + "ffn_1/intermediate/output/dense/bias": (h,),
              g + "LayerNorm_1/gamma": (h,), g + "LayerNorm_1/beta": (h,),
              "bert/pooler/dense/kernel": (h, h), "bert/pooler/dense/bias": (h,),
              "cls/predictions/output_bias": (v,)}
    for n in ("query", "key", "value"):
        shapes[f"{g}attention_1/self/{n}/kernel"] = (h, h)
        shapes[f"{g}attention_1/self/{n}/bias"] = (h,)
    rng = np.random.default_rng(seed)
    return {name: rng.normal(0, 0.3, shape).astype("float32") for name, shape in shapes.items()}


def test_google_albert_checkpoint_matches_numpy_and_round_trips(tmp_path):
    variables = albert_tf_variables()
    directory = save_tf1_checkpoint(tmp_path / "albert", variables, ALBERT_CONFIG,
                                    "albert_config.json", "model.ckpt-best")
    backbone = from_tf_checkpoint(directory)
    # The numpy reference reads the TF names through HF's documented correspondence
    # (transformers' convert_albert_original_tf_checkpoint_to_pytorch).
    g = "bert/encoder/transformer/group_0/inner_group_0/"
    a = "albert.encoder.albert_layer_groups.0.albert_layers.0."
    rename = {g + "attention_1/self/query": a + "attention.query",
              g + "attention_1/self/key": a + "attention.key",
              g + "attention_1/self/value": a + "attention.value",
              g + "attention_1/output/dense": a + "attention.dense",
              g + "LayerNorm": a + "attention.LayerNorm",
              g + "ffn_1/intermediate/dense": a + "ffn",
              g + "ffn_1/intermediate/output/dense": a + "ffn_output",
              g + "LayerNorm_1": a + "full_layer_layer_norm",
              "bert/encoder/embedding_hidden_mapping_in":
                  "albert.encoder.embedding_hidden_mapping_in",
              "bert/embeddings/LayerNorm": "albert.embeddings.LayerNorm"}
    t = {}
    for name, value in variables.items():
        path, leaf = name.rsplit("/", 1)
        if leaf.endswith("_embeddings"):
            t[f"albert.embeddings.{leaf}.weight"] = value
        elif path in rename:
            leaf = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}[leaf]
            t[f"{rename[path]}.{leaf}"] = value.T if name.endswith("kernel") else value
    inputs = _fixed_pair_inputs()
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_refs.numpy_albert(t, dict(ALBERT_CONFIG, layer_norm_eps=1e-12),
                                   inputs["token_ids"], inputs["padding_mask"],
                                   inputs["segment_ids"])
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)

    out = to_tf_checkpoint(backbone, tmp_path / "out")
    reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt"))
    written = reader.get_variable_to_shape_map()
    assert set(written) == {n for n in variables if n.startswith("bert/")}
    for name in written:
        np.testing.assert_array_equal(reader.get_tensor(name), variables[name])
    again = from_tf_checkpoint(out)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)


def test_broken_tf_checkpoints_fail_clearly(tmp_path):
    variables = bert_tf_variables()
    del variables["bert/encoder/layer_1/output/dense/bias"]
    variables["bert/encoder/layer_0/unexpected/kernel"] = np.zeros((2, 2), "float32")
    directory = save_tf1_checkpoint(tmp_path / "a", variables, BERT_CONFIG,
                                    "bert_config.json", "bert_model.ckpt")
    with pytest.raises(CheckpointError, match="encoder.layer.1.output.dense.bias"):
        from_tf_checkpoint(directory)
    variables["bert/encoder/layer_1/output/dense/bias"] = np.zeros(16, "float32")
    directory = save_tf1_checkpoint(tmp_path / "b", variables, BERT_CONFIG,
                                    "bert_config.json", "bert_model.ckpt")
    with pytest.raises(CheckpointError, match="unexpected"):
        from_tf_checkpoint(directory)
    # A truncated data file.
    data = next(p for p in os.listdir(directory) if ".data-" in p)
    path = os.path.join(directory, data)
    payload = open(path, "rb").read()
    with open(path, "wb") as handle:
        handle.write(payload[:100])
    with pytest.raises(CheckpointError, match="not a readable TensorFlow checkpoint"):
        from_tf_checkpoint(directory)
    with pytest.raises(CheckpointError, match="bert_config.json"):
        from_tf_checkpoint(tmp_path)


def _hf_view(variables, root, prefix):
    """HF names (with `prefix`) of BERT-style TF variables under `root` (+ shared embeddings)."""
    t = {}
    for name, value in variables.items():
        for r in (root, "electra/embeddings/"):
            if name.startswith(r):
                rest = name[len(root):] if r == root else name[len("electra/"):]
                view = hf_view_of_bert({"bert/" + rest: value})
                t.update({prefix + k: v for k, v in view.items()})
    return t


def test_google_electra_checkpoint_discriminator_and_generator(tmp_path):
    variables = electra_tf_variables()
    directory = save_tf1_checkpoint(tmp_path / "electra", variables, {}, "unused.json",
                                    "electra_small")
    os.remove(os.path.join(directory, "unused.json"))  # ELECTRA ships no config
    inputs = _fixed_pair_inputs()
    real = inputs["padding_mask"].astype(bool)
    for generator, root, heads in ((False, "electra/", 2), (True, "generator/", 1)):
        backbone = from_tf_checkpoint(directory, generator=generator)
        assert backbone.num_heads == heads and backbone.embedding_size == 32
        got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
        want = numpy_refs.numpy_electra(_hf_view(variables, root, "electra."),
                                        inputs["token_ids"], inputs["padding_mask"],
                                        inputs["segment_ids"], heads, 2)
        np.testing.assert_allclose(got[real], want[real], atol=1e-4)
    discriminator = from_tf_checkpoint(directory)
    out = to_tf_checkpoint(discriminator, tmp_path / "out")
    reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt"))
    written = reader.get_variable_to_shape_map()
    assert set(written) == {n for n in variables if n.startswith("electra/")}
    for name in written:
        np.testing.assert_array_equal(reader.get_tensor(name), variables[name])
    again = from_tf_checkpoint(out)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]),
                                  ops.convert_to_numpy(discriminator(inputs)["sequence_output"]))


XLNET_CONFIG = {"d_head": 8, "d_inner": 24, "d_model": 16, "ff_activation": "gelu",
                "n_head": 2, "n_layer": 2, "n_token": 32, "untie_r": True}


def xlnet_tf_variables(seed=5):
    """zihangdai/xlnet's variables: biases stacked over layers (untie_r)."""
    c = XLNET_CONFIG
    L, n, s, d, f = c["n_layer"], c["n_head"], c["d_head"], c["d_model"], c["d_inner"]
    t = "model/transformer/"
    shapes = {t + "word_embedding/lookup_table": (c["n_token"], d),
              t + "mask_emb/mask_emb": (1, 1, d), t + "r_w_bias": (L, n, s),
              t + "r_r_bias": (L, n, s), t + "r_s_bias": (L, n, s),
              t + "seg_embed": (L, 2, n, s), "model/lm_loss/bias": (c["n_token"],)}
    for i in range(L):
        p = f"{t}layer_{i}/"
        for k in "qkvor":
            shapes[f"{p}rel_attn/{k}/kernel"] = (d, n, s)
        shapes.update({p + "rel_attn/LayerNorm/gamma": (d,), p + "rel_attn/LayerNorm/beta": (d,),
                       p + "ff/layer_1/kernel": (d, f), p + "ff/layer_1/bias": (f,),
                       p + "ff/layer_2/kernel": (f, d), p + "ff/layer_2/bias": (d,),
                       p + "ff/LayerNorm/gamma": (d,), p + "ff/LayerNorm/beta": (d,)})
    rng = np.random.default_rng(seed)
    return {n_: rng.normal(0, 0.3, sh).astype("float32") for n_, sh in shapes.items()}


def test_original_xlnet_checkpoint_matches_numpy_and_round_trips(tmp_path):
    variables = xlnet_tf_variables()
    directory = save_tf1_checkpoint(tmp_path / "xlnet", variables, XLNET_CONFIG,
                                    "xlnet_config.json", "xlnet_model.ckpt")
    backbone = from_tf_checkpoint(directory)
    # HF's names for the reference (transformers' convert_xlnet_original_tf_checkpoint).
    t, root = {}, "model/transformer/"
    t["transformer.word_embedding.weight"] = variables[root + "word_embedding/lookup_table"]
    for i in range(2):
        a, p = f"transformer.layer.{i}.rel_attn.", f"{root}layer_{i}/"
        for k in ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed"):
            t[a + k] = variables[root + k][i]
        for k in "qkvor":
            t[a + k] = variables[f"{p}rel_attn/{k}/kernel"]
        t[a + "layer_norm.weight"] = variables[p + "rel_attn/LayerNorm/gamma"]
        t[a + "layer_norm.bias"] = variables[p + "rel_attn/LayerNorm/beta"]
        f = f"transformer.layer.{i}.ff."
        for k in ("layer_1", "layer_2"):
            t[f + k + ".weight"] = variables[f"{p}ff/{k}/kernel"].T
            t[f + k + ".bias"] = variables[f"{p}ff/{k}/bias"]
        t[f + "layer_norm.weight"] = variables[p + "ff/LayerNorm/gamma"]
        t[f + "layer_norm.bias"] = variables[p + "ff/LayerNorm/beta"]
    ids = np.array([[5, 9, 17, 4, 3, 30], [7, 22, 13, 1, 0, 0]], "int32")
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2], "int32")
    segments = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]], "int32")
    inputs = {"token_ids": ids, "padding_mask": mask, "segment_ids": segments}
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    config = {"d_model": 16, "n_head": 2, "n_layer": 2, "ff_activation": "gelu",
              "layer_norm_eps": 1e-12}
    want = numpy_refs.numpy_xlnet(t, config, ids, mask, segments)
    np.testing.assert_allclose(got[mask.astype(bool)], want[mask.astype(bool)], atol=1e-4)

    out = to_tf_checkpoint(backbone, tmp_path / "out")
    reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt"))
    written = reader.get_variable_to_shape_map()
    assert set(written) == {n for n in variables if n.startswith("model/transformer/")}
    for name in written:
        np.testing.assert_array_equal(reader.get_tensor(name), variables[name])
    again = from_tf_checkpoint(out)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)


def test_cased_vocabulary_keeps_case(tmp_path):
    directory = save_tf1_checkpoint(tmp_path / "cased", bert_tf_variables(), BERT_CONFIG,
                                    "bert_config.json", "bert_model.ckpt")
    with open(os.path.join(directory, "vocab.txt"), "w") as handle:
        handle.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\nHello\nhello\nWorld\n")
    backbone = from_tf_checkpoint(directory)
    # A cased release (capitals in its vocabulary) is not lowercased.
    assert backbone.tokenizer("Hello hello World").tolist() == [4, 5, 6]

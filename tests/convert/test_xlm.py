"""HF XLM checkpoints (XLMWithLMHeadModel layout) -> XLMBackbone -> HF, against numpy."""

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from tests import references
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import random_tensors, write_checkpoint

XLM = {"model_type": "xlm", "architectures": ["XLMWithLMHeadModel"], "vocab_size": 40,
       "emb_dim": 16, "n_layers": 2, "n_heads": 2, "n_langs": 3, "use_lang_emb": True,
       "causal": False, "dropout": 0.1, "attention_dropout": 0.1,
       "max_position_embeddings": 20, "layer_norm_eps": 1e-12, "gelu_activation": True,
       "sinusoidal_embeddings": False, "asm": False}


def xlm_tensors(config=XLM, seed=0):
    h, v, p = config["emb_dim"], config["vocab_size"], config["max_position_embeddings"]
    t = "transformer."
    shapes = {t + "position_ids": (1, p), t + "position_embeddings.weight": (p, h),
              t + "embeddings.weight": (v, h), t + "layer_norm_emb.weight": (h,),
              t + "layer_norm_emb.bias": (h,),
              "pred_layer.proj.weight": (v, h), "pred_layer.proj.bias": (v,)}
    if config["use_lang_emb"]:
        shapes[t + "lang_embeddings.weight"] = (config["n_langs"], h)
    for i in range(config["n_layers"]):
        for lin in ("q_lin", "k_lin", "v_lin", "out_lin"):
            shapes[f"{t}attentions.{i}.{lin}.weight"] = (h, h)
            shapes[f"{t}attentions.{i}.{lin}.bias"] = (h,)
        shapes[f"{t}ffns.{i}.lin1.weight"] = (4 * h, h)
        shapes[f"{t}ffns.{i}.lin1.bias"] = (4 * h,)
        shapes[f"{t}ffns.{i}.lin2.weight"] = (h, 4 * h)
        shapes[f"{t}ffns.{i}.lin2.bias"] = (h,)
        for norm in ("layer_norm1", "layer_norm2"):
            shapes[f"{t}{norm}.{i}.weight"] = (h,)
            shapes[f"{t}{norm}.{i}.bias"] = (h,)
    tensors = random_tensors(shapes, seed)
    for name in tensors:  # norms near one
        if "norm" in name and name.endswith(".weight"):
            tensors[name] = (1 + 0.1 * np.random.default_rng(1).normal(size=tensors[name].shape)
                             ).astype("float32")
    return tensors


def numpy_xlm(tensors, config, ids, mask, positions, languages, prefix="transformer."):
    """HF XLMModel's forward (no dropout), read from the tensors."""
    t = {k[len(prefix):]: np.asarray(v, "float64") for k, v in tensors.items()
         if k.startswith(prefix)}
    eps = config["layer_norm_eps"]
    x = t["embeddings.weight"][ids] + t["position_embeddings.weight"][positions]
    if config["use_lang_emb"] and config["n_langs"] > 1:
        x = x + t["lang_embeddings.weight"][languages]
    x = references.layer_norm(x, t["layer_norm_emb.weight"], t["layer_norm_emb.bias"], eps)
    x = x * mask[..., None]
    for i in range(config["n_layers"]):
        names = {"query": f"attentions.{i}.q_lin", "key": f"attentions.{i}.k_lin",
                 "value": f"attentions.{i}.v_lin", "attention_output": f"attentions.{i}.out_lin",
                 "attention_norm": f"layer_norm1.{i}", "intermediate": f"ffns.{i}.lin1",
                 "output": f"ffns.{i}.lin2", "output_norm": f"layer_norm2.{i}"}
        x = numpy_refs.post_ln_layer(x, mask, t, names, config["n_heads"], eps,
                                     references.gelu)
    return x


def _tlm_pair_inputs():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 40, (2, 7)).astype("int32")
    mask = np.ones((2, 7), "int32")
    mask[1, 5:] = 0
    # A TLM pair: positions restart at 4, languages 0 then 2.
    positions = np.array([[0, 1, 2, 3, 0, 1, 2]] * 2, "int32")
    languages = np.array([[0, 0, 0, 0, 2, 2, 2]] * 2, "int32")
    return {"token_ids": ids, "padding_mask": mask, "position_ids": positions,
            "language_ids": languages}


@pytest.mark.parametrize("use_lang_emb", [True, False])
def test_xlm_matches_numpy_and_round_trips(tmp_path, use_lang_emb):
    config = dict(XLM, use_lang_emb=use_lang_emb)
    tensors = xlm_tensors(config)
    backbone = from_huggingface(write_checkpoint(tmp_path / "xlm", config, tensors))
    assert type(backbone).__name__ == "XLMBackbone"
    inputs = _tlm_pair_inputs()
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_xlm(tensors, config, inputs["token_ids"], inputs["padding_mask"],
                     inputs["position_ids"], inputs["language_ids"])
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=2e-4)
    # Language embeddings matter exactly when the checkpoint has them.
    other = dict(inputs, language_ids=np.ones_like(inputs["language_ids"]))
    changed = not np.allclose(ops.convert_to_numpy(backbone(other)["sequence_output"]), got)
    assert changed == use_lang_emb

    out = to_huggingface(backbone, tmp_path / "out")
    written = load_file(f"{out}/model.safetensors")
    expected = {k[len("transformer."):] for k in tensors
                if k.startswith("transformer.") and not k.endswith("position_ids")}
    assert set(written) == expected
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors["transformer." + name])
    again = from_huggingface(out)
    np.testing.assert_allclose(ops.convert_to_numpy(again(inputs)["sequence_output"]), got,
                               atol=1e-6)


def test_xlm_checkpoint_errors(tmp_path):
    tensors = xlm_tensors()
    bad = dict(XLM, sinusoidal_embeddings=True)
    with pytest.raises(CheckpointError, match="sinusoidal"):
        from_huggingface(write_checkpoint(tmp_path / "a", bad, tensors))
    extra = dict(tensors, **{"transformer.mystery.weight": np.zeros(3, "float32")})
    with pytest.raises(CheckpointError, match="mystery"):
        from_huggingface(write_checkpoint(tmp_path / "b", XLM, extra))
    missing = {k: v for k, v in tensors.items() if "lang_embeddings" not in k}
    with pytest.raises(CheckpointError, match="lang_embeddings"):
        from_huggingface(write_checkpoint(tmp_path / "c", XLM, missing))


def test_xlm_masked_lm_head_matches_numpy_pred_layer(tmp_path):
    """XLMWithLMHeadModel's pred_layer: proj (tied to the embeddings) + bias, no transform."""
    from keras_ctx.convert.heads import masked_lm_from_huggingface

    tensors = xlm_tensors()
    tensors["pred_layer.proj.weight"] = tensors["transformer.embeddings.weight"].copy()
    backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path / "x", XLM, tensors))
    assert head.transform is False
    assert head.token_embedding.embeddings is backbone.token_embedding.embeddings
    inputs = _tlm_pair_inputs()
    got = ops.convert_to_numpy(head(backbone(inputs)["sequence_output"]))
    hidden = numpy_xlm(tensors, XLM, inputs["token_ids"], inputs["padding_mask"],
                       inputs["position_ids"], inputs["language_ids"])
    want = hidden @ tensors["pred_layer.proj.weight"].T + tensors["pred_layer.proj.bias"]
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=5e-4)
    untied = dict(tensors, **{"pred_layer.proj.weight": tensors["pred_layer.proj.weight"] + 1})
    with pytest.raises(CheckpointError, match="not tied"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "u", XLM, untied))
    with pytest.raises(CheckpointError, match="adaptive softmax"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "a", dict(XLM, asm=True),
                                                    tensors))


@pytest.mark.parametrize("lowercase", [True, False])
def test_an_xlm_checkpoint_loads_with_xlms_tokenizer(tmp_path, lowercase):
    """config.json + vocab.json + merges.txt (fastBPE's "a b count" lines, as XLM's
    checkpoints): the tokenizer is XLM's, with transformers' XLMTokenizer's ids."""
    import json

    from transformers import XLMTokenizer

    from keras_ctx.data import tokenizers
    from tests.data.unicode_texts import TEXTS
    from tests.data.xlm_vocabulary import LINES, write_xlm_vocabulary

    trained = tokenizers.train_xlm_bpe(LINES, 200, lowercase_and_remove_accent=lowercase)
    config = dict(XLM, vocab_size=trained.vocabulary_size())
    directory = write_checkpoint(tmp_path / "xlm", config, xlm_tensors(config))
    files = write_xlm_vocabulary(trained, directory)
    if not lowercase:  # the cased XLM-17 / XLM-100 say so in tokenizer_config.json
        with open(tmp_path / "xlm" / "tokenizer_config.json", "w") as handle:
            json.dump({"do_lowercase_and_remove_accent": False}, handle)
    tokenizer = from_huggingface(directory).tokenizer
    assert type(tokenizer).__name__ == "XLMBPETokenizer"
    assert tokenizer.lowercase_and_remove_accent is lowercase
    reference = XLMTokenizer(*files, do_lowercase_and_remove_accent=lowercase)
    texts = LINES[:7] + TEXTS
    for text, row in zip(texts, tokenizer.tokenize(texts).to_list()):
        assert row == reference(text, add_special_tokens=False)["input_ids"], text
    # Written back beside the checkpoint (no "#version" line: XLMTokenizer would read it).
    out = to_huggingface(from_huggingface(directory), tmp_path / "out")
    with open(f"{out}/merges.txt", encoding="utf-8") as handle:
        assert handle.readline() == " ".join(trained.merges[0]) + "\n"
    again = from_huggingface(out).tokenizer
    assert again.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    assert again.lowercase_and_remove_accent is lowercase
    with open(files[1], "a", encoding="utf-8") as handle:
        handle.write("a b c\n")
    with pytest.raises(CheckpointError, match=r"'a b c' is not a merge of two pieces with its"):
        from_huggingface(directory)

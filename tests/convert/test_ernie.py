"""HF ERNIE checkpoints (model_type "ernie"), written here in ErnieForMaskedLM's layout.

ERNIE 1.0's port (nghuyong/ernie-1.0-base-zh) is BERT's network under the
prefix "ernie." with a relu FFN; checkpoints saved with use_task_id carry a
task-type table. Ground truth: numpy_refs.numpy_bert read straight from the
tensors with the config's relu.
"""

import json
import os

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx import runs
from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from keras_ctx.convert.formats import convert
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import bert_layer_shapes, random_tensors, write_checkpoint

# ERNIE 1.0's settings (relu, an odd position count as its 513, eps 1e-5) at toy sizes.
ERNIE = {"model_type": "ernie", "architectures": ["ErnieForMaskedLM"], "vocab_size": 12,
         "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 64, "hidden_act": "relu", "max_position_embeddings": 13,
         "type_vocab_size": 2, "layer_norm_eps": 1e-5, "pad_token_id": 0,
         "use_task_id": True, "task_type_vocab_size": 3, "hidden_dropout_prob": 0.1}
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "你", "好", "世", "界", "百",
              "度", "hello"]


def ernie_tensors(seed=7):
    c = ERNIE
    v, h = c["vocab_size"], c["hidden_size"]
    shapes = {"ernie.embeddings.word_embeddings.weight": (v, h),
              "ernie.embeddings.position_embeddings.weight": (c["max_position_embeddings"], h),
              "ernie.embeddings.token_type_embeddings.weight": (2, h),
              "ernie.embeddings.LayerNorm.weight": (h,), "ernie.embeddings.LayerNorm.bias": (h,),
              # ErnieForMaskedLM: the MLM head, no pooler.
              "cls.predictions.transform.dense.weight": (h, h),
              "cls.predictions.transform.dense.bias": (h,),
              "cls.predictions.transform.LayerNorm.weight": (h,),
              "cls.predictions.transform.LayerNorm.bias": (h,), "cls.predictions.bias": (v,)}
    shapes.update(bert_layer_shapes("ernie.", c["num_hidden_layers"], h, c["intermediate_size"]))
    tensors = random_tensors(shapes, seed)
    tensors["ernie.embeddings.task_type_embeddings.weight"] = np.zeros((3, h), "float32")
    return tensors


def write_ernie(directory, tensors):
    directory = write_checkpoint(directory, ERNIE, tensors)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(VOCABULARY) + "\n")
    return directory


def ernie_inputs():
    ids = np.array([[2, 5, 6, 3, 7, 8, 3, 0], [2, 9, 10, 11, 3, 0, 0, 0]], "int32")
    mask = (ids != 0).astype("int32")
    segments = np.array([[0, 0, 0, 0, 1, 1, 1, 0], [0] * 8], "int32")
    return {"token_ids": ids, "padding_mask": mask, "segment_ids": segments}


def test_ernie_matches_numpy_relu_bert_and_round_trips(tmp_path):
    tensors = ernie_tensors()
    directory = write_ernie(tmp_path / "ernie", tensors)
    with pytest.warns(UserWarning, match="pooler"):
        backbone = from_huggingface(directory)
    assert backbone.family == "ernie" and backbone.activation == "relu"
    assert backbone.max_sequence_length == 13 and backbone.layer_norm_epsilon == 1e-5
    inputs = ernie_inputs()
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_refs.numpy_bert(tensors, ERNIE, inputs["token_ids"], inputs["padding_mask"],
                                 inputs["segment_ids"], prefix="ernie.")
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)
    # relu is what makes it ERNIE's network: a GELU reading differs.
    gelu = numpy_refs.numpy_bert(tensors, dict(ERNIE, hidden_act="gelu"), inputs["token_ids"],
                                 inputs["padding_mask"], inputs["segment_ids"], prefix="ernie.")
    assert np.abs(gelu[real] - want[real]).max() > 1e-2
    assert backbone.tokenizer("你好 hello").tolist() == [5, 6, 11]

    # ours -> HF (the family's model_type, "ernie") -> ours is exact.
    exported = to_huggingface(backbone, tmp_path / "out")
    with open(os.path.join(exported, "config.json")) as handle:
        config = json.load(handle)
    assert config["model_type"] == "ernie" and config["hidden_act"] == "relu"
    assert config["max_position_embeddings"] == 13 and config["use_task_id"] is False
    written = load_file(os.path.join(exported, "model.safetensors"))
    encoder = {k[len("ernie."):]: v for k, v in tensors.items()
               if k.startswith("ernie.") and "task_type" not in k}
    assert set(written) == set(encoder) | {"pooler.dense.weight", "pooler.dense.bias"}
    for name, value in encoder.items():
        np.testing.assert_array_equal(written[name], value)
    again = from_huggingface(exported)
    assert again.family == "ernie"
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)


def test_ernie_task_type_embeddings_are_refused_unless_zero(tmp_path):
    tensors = ernie_tensors()
    tensors["ernie.embeddings.task_type_embeddings.weight"][1, 3] = 0.5
    directory = write_ernie(tmp_path / "ernie3", tensors)
    with pytest.raises(CheckpointError, match="task_type_embeddings.weight is not zero"):
        from_huggingface(directory)


@pytest.mark.filterwarnings("ignore:.*pooler")
def test_convert_cli_makes_an_ernie_run_that_embed_reads(tmp_path):
    from keras_ctx.commands.embed import embed

    tensors = ernie_tensors()
    directory = write_ernie(tmp_path / "ernie", tensors)
    info = convert(directory, tmp_path / "run")
    assert info["family"] == "ernie" and info["sequence_length"] == 13
    _, backbone, tokenizer = runs.load_run(str(tmp_path / "run"))
    assert tokenizer("世界").tolist() == [7, 8]
    vectors = embed(str(tmp_path / "run"), ["你好", "世界 hello"])
    # [CLS] 世 界 hello [SEP]: the numpy reference's vectors at those positions.
    ids = np.array([[2, 7, 8, 11, 3]], "int32")
    want = numpy_refs.numpy_bert(tensors, ERNIE, ids, np.ones_like(ids), np.zeros_like(ids),
                                 prefix="ernie.")
    np.testing.assert_allclose(vectors[1][:5], want[0], atol=1e-4)


def test_ernie_masked_lm_head_matches_numpy_and_round_trips(tmp_path):
    from keras_ctx.convert.heads import masked_lm_from_huggingface, masked_lm_to_huggingface
    from tests import references

    tensors = ernie_tensors()
    # ErnieForMaskedLM's decoder is the tied word embedding.
    tensors["cls.predictions.decoder.weight"] = tensors["ernie.embeddings.word_embeddings.weight"]
    with pytest.warns(UserWarning, match="pooler"):
        backbone, head = masked_lm_from_huggingface(write_ernie(tmp_path / "mlm", tensors))
    inputs = ernie_inputs()
    sequence = numpy_refs.numpy_bert(tensors, ERNIE, inputs["token_ids"],
                                     inputs["padding_mask"], inputs["segment_ids"],
                                     prefix="ernie.")
    # BERT's transform with config.json's hidden_act (relu), then the tied table.
    t = {k: v.astype("float64") for k, v in tensors.items()}
    p = "cls.predictions.transform."
    y = np.maximum(sequence @ t[p + "dense.weight"].T + t[p + "dense.bias"], 0)
    y = references.layer_norm(y, t[p + "LayerNorm.weight"], t[p + "LayerNorm.bias"], 1e-5)
    want = y @ t["ernie.embeddings.word_embeddings.weight"].T + t["cls.predictions.bias"]
    got = ops.convert_to_numpy(head(backbone(inputs)["sequence_output"]))
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=2e-4)

    out = masked_lm_to_huggingface(backbone, head, tmp_path / "out")
    with open(os.path.join(out, "config.json")) as handle:
        assert json.load(handle)["architectures"] == ["ErnieForMaskedLM"]
    written = load_file(os.path.join(out, "model.safetensors"))
    for name in (p + "dense.weight", "cls.predictions.bias",
                 "ernie.encoder.layer.1.output.dense.weight"):
        np.testing.assert_array_equal(written[name], tensors[name])

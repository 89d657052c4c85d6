"""Masked-LM heads of HF checkpoints: logits match numpy from the checkpoint's tensors."""

import os

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx import run_files
from keras_ctx.convert import CheckpointError
from keras_ctx.convert.formats import convert
from keras_ctx.convert.heads import masked_lm_from_huggingface, masked_lm_to_huggingface
from tests import references
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import (
    ALBERT,
    albert_tensors,
    write_checkpoint,
)
from tests.convert.head_checkpoints import BERT, _mlm_reference, bert_mlm_tensors, electra_generator_checkpoint



def test_bert_and_albert_masked_lm_heads(tmp_path):
    tensors = bert_mlm_tensors()
    with pytest.warns(UserWarning, match="pooler"):
        backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path / "b", BERT,
                                                                     tensors))
    ids = np.array([[2, 7, 11, 29, 3]], "int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
    sequence = numpy_refs.numpy_bert(tensors, BERT, ids, inputs["padding_mask"],
                                     inputs["segment_ids"], prefix="bert.")
    want = _mlm_reference(tensors, sequence, "cls.predictions.transform.dense",
                          "cls.predictions.transform.LayerNorm", "cls.predictions.bias",
                          "bert.embeddings.word_embeddings.weight", references.gelu, 1e-12)
    got = ops.convert_to_numpy(head(backbone(inputs)["sequence_output"]))
    np.testing.assert_allclose(got, want, atol=2e-4)
    written = load_file(os.path.join(masked_lm_to_huggingface(backbone, head, tmp_path / "bo"),
                                     "model.safetensors"))
    for name in ("cls.predictions.bias", "cls.predictions.transform.dense.weight",
                 "cls.predictions.transform.LayerNorm.bias",
                 "bert.encoder.layer.0.output.dense.weight"):
        np.testing.assert_array_equal(written[name], tensors[name])

    tensors = albert_tensors()
    tensors["predictions.decoder.weight"] = tensors["albert.embeddings.word_embeddings.weight"]
    backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path / "a", ALBERT,
                                                                 tensors))
    sequence = numpy_refs.numpy_albert(tensors, ALBERT, ids, inputs["padding_mask"],
                                       inputs["segment_ids"])
    want = _mlm_reference(tensors, sequence, "predictions.dense", "predictions.LayerNorm",
                          "predictions.bias", "albert.embeddings.word_embeddings.weight",
                          numpy_refs.gelu_new, 1e-12)
    got = ops.convert_to_numpy(head(backbone(inputs)["sequence_output"]))
    np.testing.assert_allclose(got, want, atol=2e-4)


@pytest.mark.filterwarnings("ignore:.*pooler")
def test_a_converted_run_keeps_the_checkpoints_masked_lm_head(tmp_path):
    """keras-ctx convert keeps a BertForMaskedLM's head with the run (`pretrain --from RUN`
    continues it); a checkpoint without one keeps none."""
    tensors = bert_mlm_tensors()
    convert(write_checkpoint(tmp_path / "b", BERT, tensors), tmp_path / "run")
    kept = run_files.load_head_weights(tmp_path / "run")
    head = ("cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
            "cls.predictions.transform.LayerNorm.weight",
            "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias")
    assert kept is not None and len(kept) == len(head)
    for name in head:  # torch's Linear weight is the transposed kernel
        value = tensors[name].T
        assert sum(w.shape == value.shape and np.array_equal(w, value) for w in kept) == 1, name
    bare = {k: v for k, v in tensors.items() if not k.startswith("cls.")}
    convert(write_checkpoint(tmp_path / "bare", dict(BERT, architectures=["BertModel"]),
                             {k.removeprefix("bert."): v for k, v in bare.items()}),
            tmp_path / "bare-run")
    assert run_files.load_head_weights(tmp_path / "bare-run") is None


@pytest.mark.filterwarnings("ignore:The checkpoint has no")
def test_heads_that_are_missing_or_untied_fail(tmp_path):
    tensors = bert_mlm_tensors()
    tensors["cls.predictions.decoder.weight"] = tensors["cls.predictions.decoder.weight"] + 1
    with pytest.raises(CheckpointError, match="not tied"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "untied", BERT, tensors))
    tensors = {k: v for k, v in bert_mlm_tensors().items() if not k.startswith("cls.")}
    with pytest.raises(CheckpointError, match="no masked-LM head"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "none", BERT, tensors))


def test_electra_generator_masked_lm_head(tmp_path):
    config, tensors = electra_generator_checkpoint()
    backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path, config, tensors))
    ids = np.array([[2, 7, 11, 29, 3]], "int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
    sequence = numpy_refs.numpy_electra(tensors, ids, inputs["padding_mask"],
                                        inputs["segment_ids"], 4, 2)
    want = _mlm_reference(tensors, sequence, "generator_predictions.dense",
                          "generator_predictions.LayerNorm", "generator_lm_head.bias",
                          "electra.embeddings.word_embeddings.weight", references.gelu, 1e-12)
    np.testing.assert_allclose(
        ops.convert_to_numpy(head(backbone(inputs)["sequence_output"])), want,
                               atol=2e-4)


def test_xlnet_lm_head_matches_numpy(tmp_path):
    from tests.convert.hf_checkpoints import XLNET, xlnet_tensors

    tensors = xlnet_tensors(seed=5)
    tensors["lm_loss.weight"] = tensors["transformer.word_embedding.weight"]  # tied
    backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path / "x", XLNET, tensors))
    ids = np.array([[5, 9, 17, 4, 3, 30, 2]], "int32")
    mask, segments = np.ones_like(ids), np.zeros_like(ids)
    hidden = backbone({"token_ids": ids, "padding_mask": mask,
                       "segment_ids": segments})["sequence_output"]
    # XLNetLMHeadModel: logits = lm_loss(h) = h E^T + lm_loss.bias, E the word embedding.
    table = tensors["transformer.word_embedding.weight"].astype("float64")
    want = (numpy_refs.numpy_xlnet(tensors, XLNET, ids, mask, segments) @ table.T
            + tensors["lm_loss.bias"])
    np.testing.assert_allclose(ops.convert_to_numpy(head(hidden)), want, atol=1e-4)
    assert head.token_embedding is backbone.token_embedding and not head.transform

    # Back to XLNetLMHeadModel's layout: every tensor as it was, the tied copy left out.
    directory = masked_lm_to_huggingface(backbone, head, tmp_path / "out")
    written = load_file(os.path.join(directory, "model.safetensors"))
    assert set(written) == set(tensors) - {"lm_loss.weight"}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors[name])
    backbone, head = masked_lm_from_huggingface(directory)
    np.testing.assert_allclose(ops.convert_to_numpy(head(hidden)), want, atol=1e-4)

    tensors["lm_loss.weight"] = tensors["lm_loss.weight"] * 2
    with pytest.raises(CheckpointError, match="lm_loss.weight is not tied"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "untied", XLNET, tensors))

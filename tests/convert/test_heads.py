"""Masked-LM heads of HF checkpoints: logits match numpy from the checkpoint's tensors."""

import os

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx.convert import CheckpointError
from keras_ctx.convert.heads import masked_lm_from_huggingface, masked_lm_to_huggingface
from keras_ctx.tasks import classifier_from_huggingface
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


@pytest.mark.filterwarnings("ignore:The checkpoint has no")
def test_heads_that_are_missing_or_untied_fail(tmp_path):
    tensors = bert_mlm_tensors()
    tensors["cls.predictions.decoder.weight"] = tensors["cls.predictions.decoder.weight"] + 1
    with pytest.raises(CheckpointError, match="not tied"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "untied", BERT, tensors))
    tensors = {k: v for k, v in bert_mlm_tensors().items() if not k.startswith("cls.")}
    with pytest.raises(CheckpointError, match="no masked-LM head"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "none", BERT, tensors))


def test_sequence_and_token_classifiers(tmp_path):
    from tests.convert.hf_checkpoints import ROBERTA, roberta_tensors

    tensors = {k: v for k, v in bert_mlm_tensors().items() if not k.startswith("cls.")}
    rng = np.random.default_rng(11)
    tensors.update({"bert.pooler.dense.weight": rng.normal(0, .3, (16, 16)).astype("float32"),
                    "bert.pooler.dense.bias": rng.normal(0, .3, 16).astype("float32"),
                    "classifier.weight": rng.normal(0, .3, (3, 16)).astype("float32"),
                    "classifier.bias": rng.normal(0, .3, 3).astype("float32")})
    config = dict(BERT, architectures=["BertForSequenceClassification"])
    model = classifier_from_huggingface(write_checkpoint(tmp_path / "seq", config, tensors))
    ids = np.array([[2, 7, 11, 29, 3, 0]], "int32")
    inputs = {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"),
              "segment_ids": np.zeros_like(ids)}
    x = numpy_refs.numpy_bert(tensors, BERT, ids, inputs["padding_mask"],
                              inputs["segment_ids"], prefix="bert.")
    t = {k: v.astype("float64") for k, v in tensors.items()}
    pooled = np.tanh(x[:, 0] @ t["bert.pooler.dense.weight"].T + t["bert.pooler.dense.bias"])
    want = pooled @ t["classifier.weight"].T + t["classifier.bias"]
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs)), want, atol=1e-4)

    tensors = {k: v for k, v in roberta_tensors().items() if not k.startswith("lm_head")}
    tensors.update({"classifier.weight": rng.normal(0, .3, (5, 16)).astype("float32"),
                    "classifier.bias": rng.normal(0, .3, 5).astype("float32")})
    config = dict(ROBERTA, architectures=["RobertaForTokenClassification"])
    with pytest.warns(UserWarning, match="pooler"):
        model = classifier_from_huggingface(write_checkpoint(tmp_path / "tok", config, tensors))
    ids = np.array([[0, 5, 9, 17, 2, 1]], "int32")
    inputs = {"token_ids": ids, "padding_mask": (ids != 1).astype("int32"),
              "segment_ids": np.zeros_like(ids)}
    x = numpy_refs.numpy_bert(tensors, ROBERTA, ids, inputs["padding_mask"],
                              inputs["segment_ids"], prefix="roberta.", roberta=True)
    t = {k: v.astype("float64") for k, v in tensors.items()}
    want = x @ t["classifier.weight"].T + t["classifier.bias"]
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs))[real], want[real], atol=1e-4)

    config = dict(ROBERTA, architectures=["RobertaForSequenceClassification"])
    with pytest.raises(CheckpointError, match="'roberta' head is not supported"):
        classifier_from_huggingface(write_checkpoint(tmp_path / "rs", config, tensors))


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


def test_bart_eos_classification_head_matches_numpy(tmp_path):
    from tests.convert.hf_generative_checkpoints import BART, bart_tensors

    rng = np.random.default_rng(12)
    tensors = {k: v for k, v in bart_tensors(seed=8).items()
               if k not in ("lm_head.weight", "final_logits_bias")}
    tensors.update({
        "classification_head.dense.weight": rng.normal(0, .3, (16, 16)).astype("float32"),
        "classification_head.dense.bias": rng.normal(0, .3, 16).astype("float32"),
        "classification_head.out_proj.weight": rng.normal(0, .3, (3, 16)).astype("float32"),
        "classification_head.out_proj.bias": rng.normal(0, .3, 3).astype("float32")})
    config = dict(BART, architectures=["BartForSequenceClassification"], classifier_dropout=0.0)
    model = classifier_from_huggingface(write_checkpoint(tmp_path / "bart", config, tensors))
    ids = np.array([[0, 5, 9, 17, 4, 2], [0, 22, 13, 2, 1, 1]], "int32")  # </s> = 2, pad = 1
    # HF: decoder_input_ids = shift_tokens_right(input_ids, pad, decoder_start=</s>); the
    # head reads the decoder output at the last </s> of input_ids.
    decoder_ids = np.concatenate([np.full((2, 1), 2, "int32"), ids[:, :-1]], 1)
    t = {k: v.astype("float64") for k, v in tensors.items()}
    _, y = numpy_refs.numpy_bart(tensors, BART, ids, (ids != 1).astype("int32"), decoder_ids,
                                 np.ones_like(ids))
    last_eos = [np.flatnonzero(row == 2)[-1] for row in ids]
    hidden = np.tanh(y[[0, 1], last_eos] @ t["classification_head.dense.weight"].T
                     + t["classification_head.dense.bias"])
    want = (hidden @ t["classification_head.out_proj.weight"].T
            + t["classification_head.out_proj.bias"])
    # Our text path's encoder-decoder inputs (keras_ctx.preprocessing): the decoder reads
    # the text shifted right under the encoder's padding mask.
    mask = (ids != 1).astype("int32")
    inputs = {"encoder_token_ids": ids, "encoder_padding_mask": mask,
              "decoder_token_ids": decoder_ids, "decoder_padding_mask": mask}
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs)), want, atol=1e-4)
    assert model.get_config()["transform_activation"] == "tanh"

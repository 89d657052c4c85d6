"""Classifier heads of HF checkpoints (`keras_ctx.tasks.classifier_from_huggingface`):
sequence, token and BART's eos classification heads match numpy from the checkpoint's
tensors."""

import numpy as np
import pytest
from keras import ops

from keras_ctx.convert import CheckpointError
from keras_ctx.tasks import classifier_from_huggingface
from tests.convert import numpy_refs
from tests.convert.head_checkpoints import BERT, bert_mlm_tensors
from tests.convert.hf_checkpoints import write_checkpoint


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

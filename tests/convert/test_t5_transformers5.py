"""T5 / mT5 checkpoints as transformers 5 writes them: tying and rescaling read apart.

transformers 5's T5Config always writes `tie_word_embeddings: true` and records v1.1's
unscaled output as `scale_decoder_outputs: false`; MT5Config forces the tie although mT5
never rescales; loading unties the head when a stored `lm_head.weight` differs from
`shared.weight`. Reference logits: numpy, `y * d_model^-0.5 if rescaled`, times the stored
head if distinct, else the shared table.
"""

import json
import os

import numpy as np
import pytest
from keras import ops

from keras_ctx.convert import CheckpointError
from keras_ctx.convert.huggingface import from_huggingface
from keras_ctx.convert.huggingface_export import to_huggingface
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import write_checkpoint
from tests.convert.hf_generative_checkpoints import MT5, T5, _t5_inputs, t5_tensors

V5 = {"transformers_version": "5.0.0", "tie_word_embeddings": True}
V11 = dict(MT5, model_type="t5", architectures=["T5ForConditionalGeneration"])

# name -> (config as transformers 5 writes it, stores a distinct lm_head, rescaled)
CASES = {
    "t5_v1_0": (dict(T5, **V5, scale_decoder_outputs=True), False, True),
    "t5_v1_1": (dict(V11, **V5, scale_decoder_outputs=False), True, False),
    "mt5_untied": (dict(MT5, **V5), True, False),
    "mt5_tied": (dict(MT5, **V5), False, False),          # tied but not rescaled
    "mt5_untied_recorded": (dict(MT5, **V5, scale_decoder_outputs=False), True, False),
    # transformers 5 read a T5 v1.0 checkpoint whose stored head differs: untied, rescaled.
    "t5_untied_rescaled": (dict(T5, **V5), True, True),
}


def _tensors(config, distinct):
    tensors = t5_tensors(seed=11, c=dict(config, tie_word_embeddings=False))
    if not distinct:
        del tensors["lm_head.weight"]  # a tied model stores no head
    return tensors


def _numpy_logits(tensors, config, rescaled, decoder_output):
    table = tensors.get("lm_head.weight", tensors["shared.weight"]).astype("float64")
    scale = config["d_model"] ** -0.5 if rescaled else 1.0
    return decoder_output * scale @ table.T


@pytest.mark.parametrize("name", sorted(CASES))
def test_transformers5_t5_checkpoints_give_the_reference_logits(tmp_path, name):
    config, distinct, rescaled = CASES[name]
    tensors = _tensors(config, distinct)
    backbone = from_huggingface(write_checkpoint(tmp_path / "in", config, tensors))
    assert (backbone.lm_head is not None, backbone.scale_decoder_outputs) == (distinct, rescaled)
    inputs = _t5_inputs()
    _, decoder = numpy_refs.numpy_t5(tensors, config, *inputs.values())
    real = inputs["decoder_padding_mask"].astype(bool)
    got = backbone(inputs)["decoder_sequence_output"]
    np.testing.assert_allclose(ops.convert_to_numpy(backbone.logits(got))[real],
                               _numpy_logits(tensors, config, rescaled, decoder)[real],
                               atol=2e-4)

    # Written back so that transformers (4 and 5) reads the same head and scale.
    exported = to_huggingface(backbone, tmp_path / "out", model_type=config["model_type"])
    with open(os.path.join(exported, "config.json")) as handle:
        written = json.load(handle)
    assert written["scale_decoder_outputs"] is rescaled
    assert written["tie_word_embeddings"] is (not distinct)
    again = from_huggingface(exported)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again.logits(again(inputs)["decoder_sequence_output"])),
        ops.convert_to_numpy(backbone.logits(got)))


def test_a_stored_head_equal_to_the_table_is_tied():
    config = dict(T5, **V5)
    tensors = _tensors(config, distinct=True)
    tensors["lm_head.weight"] = tensors["shared.weight"]
    from keras_ctx.models.t5.convert import output_layer

    assert output_layer(config, tensors)["tie_word_embeddings"] is True


def test_untied_config_without_a_stored_head_is_refused(tmp_path):
    config = dict(MT5)  # tie_word_embeddings: false, as transformers 4 wrote mT5
    tensors = _tensors(config, distinct=False)
    with pytest.raises(CheckpointError, match="no lm_head.weight"):
        from_huggingface(write_checkpoint(tmp_path, config, tensors))

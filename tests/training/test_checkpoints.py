"""training.Checkpointer and fit_resumable under faults: a checkpoint is written whole or
not at all, a NaN update keeps none, and a damaged one refuses to load (issue 22)."""

import os

import h5py
import keras
import numpy as np
import pytest

from keras_ctx.training import Checkpointer, TrainingDiverged, fit_resumable

from tests.cli_helpers import regression


def test_checkpointer_clear_deletes_only_its_step_directories(tmp_path):
    (tmp_path / "step-000000004").mkdir()
    (tmp_path / "step-000000006.partial").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    Checkpointer(str(tmp_path)).clear()
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


class NanFrom(keras.optimizers.schedules.LearningRateSchedule):
    """1e-2, then NaN from optimizer step `first_bad` on (a `--learning-rate nan`)."""

    def __init__(self, first_bad):
        self.first_bad = first_bad

    def __call__(self, step):
        return keras.ops.where(step < self.first_bad, 1e-2, float("nan"))

    def get_config(self):
        return {"first_bad": self.first_bad}


def test_update_to_non_finite_weights_keeps_no_checkpoint_and_resume_works(tmp_path):
    # The third update is NaN; the loss before it (what the loss guard sees) is finite.
    model, data = regression(NanFrom(2))
    with pytest.raises(TrainingDiverged, match="last good checkpoint \\(step 2\\)"):
        fit_resumable(model, data, steps=6, out_dir=str(tmp_path), checkpoint_every=1,
                      verbose=0)
    assert Checkpointer(str(tmp_path / "checkpoints")).steps() == [1, 2]
    model, data = regression(NanFrom(10**9))
    result = fit_resumable(model, data, steps=4, out_dir=str(tmp_path), checkpoint_every=1,
                           verbose=0)
    assert result["step"] == 4
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)


def test_nan_checkpoint_tensor_and_truncated_optimizer_state_refuse_to_load(tmp_path):
    model, data = regression()
    fit_resumable(model, data, steps=2, out_dir=str(tmp_path / "a"), checkpoint_every=2,
                  verbose=0)
    weights = tmp_path / "a" / "checkpoints" / "step-000000002" / "model.weights.h5"
    with h5py.File(weights, "r+") as handle:
        names = []
        handle.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset)
                          else None)
        handle[names[0]][...] = np.nan
    model, data = regression()
    with pytest.raises(ValueError, match="cannot be restored.*NaN"):
        fit_resumable(model, data, steps=4, out_dir=str(tmp_path / "a"), checkpoint_every=2,
                      verbose=0)

    model, data = regression()
    fit_resumable(model, data, steps=2, out_dir=str(tmp_path / "b"), checkpoint_every=2,
                  verbose=0)
    npz = tmp_path / "b" / "checkpoints" / "step-000000002" / "optimizer.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    model, data = regression()
    with pytest.raises(ValueError, match="cannot be restored"):
        fit_resumable(model, data, steps=4, out_dir=str(tmp_path / "b"), checkpoint_every=2,
                      verbose=0)

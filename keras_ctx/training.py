"""Resumable, distributable `fit` for pretrainers: checkpoints, NaN guard, logs.

`fit_resumable` runs `model.fit` in chunks of `checkpoint_every` steps over
an endless, deterministic dataset. After each chunk it writes a checkpoint
(weights, optimizer state, step) atomically; a killed run started again with
the same arguments resumes at the saved step with the same optimizer state,
and skips the batches it already consumed, so it sees the same data as a run
that was never interrupted. A chunk whose loss is NaN or infinite, or that
leaves a non-finite weight or optimizer variable, stops the run with
`TrainingDiverged`, keeping the last good checkpoint: a checkpoint is only
written after its tensors were checked finite, and one that holds a
non-finite tensor is refused on restore.

A `StagedInput` trains stages in order in the one run (one model, optimizer and
schedule): each stage's dataset from its first step, each chunk inside one stage;
a run resumed in a stage reads that stage's data from its own position.
"""

import contextlib
import dataclasses
import json
import math
import os
import shutil
import zipfile

import keras
import numpy as np

from keras_ctx.backend import build_from_spec
from keras_ctx.common import files, keras_files
from keras_ctx.models.checked_input import checked_token_ids


class TrainingDiverged(RuntimeError):
    """The loss, a weight or an optimizer variable became NaN or infinite."""


def _non_finite(named_arrays):
    """Names of the float arrays holding a NaN or an infinity."""
    return [name for name, array in named_arrays
            if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all()]


def _rng_state(model):
    """Variables that are neither weights nor optimizer state: the dropout seeds.

    Restoring them makes a resumed run draw the same dropout masks as one
    that was never interrupted.
    """
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def check_backend(path):
    """Raises where the checkpoint in `path` was written on another Keras backend.

    The weights file is backend-neutral, but the optimizer's and the random
    generators' saved variables are read in the order and meaning of the
    backend that wrote them. Checkpoints from before the record are TensorFlow's.
    """
    state = os.path.join(path, "state.json")
    if not os.path.isfile(state):
        return
    try:
        with open(state) as handle:
            written = json.load(handle).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return  # damaged: `check` and `restore` refuse it, naming the checkpoint
    if written != keras.backend.backend():
        raise ValueError(
            f"The checkpoint {path} was written on Keras' {written} backend and this run is "
            f"on {keras.backend.backend()}: resume with KERAS_BACKEND={written}, or start "
            "a new run in another --out directory.")


class Checkpointer:
    """Atomic checkpoints of weights + optimizer variables + step in one directory."""

    def __init__(self, directory, keep=2):
        self.directory = directory
        self.keep = keep

    def _path(self, step):
        return os.path.join(self.directory, f"step-{step:09d}")

    def steps(self):
        if not os.path.isdir(self.directory):
            return []
        return sorted(int(name[5:]) for name in os.listdir(self.directory)
                      if name.startswith("step-") and name[5:].isdigit())

    def latest_step(self):
        steps = self.steps()
        return steps[-1] if steps else 0

    def clear(self):
        """Deletes this run's checkpoints (only the step-N directories it wrote)."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            stem = name[:-len(".partial")] if name.endswith(".partial") else name
            if stem.startswith("step-") and stem[5:].isdigit():
                shutil.rmtree(os.path.join(self.directory, name))
        if not os.listdir(self.directory):
            os.rmdir(self.directory)

    def save(self, model, step, extra=None):
        """Writes the checkpoint of `step`; raises TrainingDiverged on a non-finite tensor."""
        optimizer = {f"v{i}": v.numpy() for i, v in enumerate(model.optimizer.variables)}
        bad = _non_finite([(w.path, w.numpy()) for w in model.weights]) + _non_finite(
            [(v.path, optimizer[f"v{i}"]) for i, v in enumerate(model.optimizer.variables)])
        if bad:
            raise TrainingDiverged(
                f"{len(bad)} weight or optimizer tensors became NaN or infinite at step "
                f"{step} (first: {bad[0]}); no checkpoint was written for it.")
        os.makedirs(self.directory, exist_ok=True)
        staging = self._path(step) + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        rng = {f"v{i}": v.numpy() for i, v in enumerate(_rng_state(model))}
        # HDF5 meeting a full disk mid-write leaves a file object that crashes the
        # interpreter at exit (exit 139): a checkpoint that cannot fit is refused first.
        size = sum(w.numpy().nbytes for w in model.weights) + sum(
            a.nbytes for a in (*optimizer.values(), *rng.values()))
        files.check_free_space(self.directory, size + (1 << 20) + size // 10)
        os.makedirs(staging)
        try:
            model.save_weights(os.path.join(staging, "model.weights.h5"))
            np.savez(os.path.join(staging, "optimizer.npz"), **optimizer)
            np.savez(os.path.join(staging, "rng.npz"), **rng)
            with open(os.path.join(staging, "state.json"), "w") as handle:
                json.dump(dict(extra or {}, step=step, backend=keras.backend.backend()),
                          handle)
        except BaseException:
            # A full disk (or a kill signal) mid-save: no half checkpoint stays behind.
            shutil.rmtree(staging, ignore_errors=True)
            raise
        os.replace(staging, self._path(step))
        for old in self.steps()[:-self.keep]:
            shutil.rmtree(self._path(old), ignore_errors=True)

    def check(self, step):
        """Raises ValueError (the message `restore` gives) when checkpoint `step` is
        unreadable, holds NaN/infinity or was written on another Keras backend: call it
        before changing anything to resume."""
        import h5py

        path = self._path(step)
        check_backend(path)
        try:
            with h5py.File(os.path.join(path, "model.weights.h5"), "r") as handle:
                tensors = []
                handle.visititems(lambda name, item: tensors.append((name, item[()])) if (
                    isinstance(item, h5py.Dataset)) else None)
            for name in ("optimizer.npz", "rng.npz"):
                with np.load(os.path.join(path, name)) as saved:
                    tensors += [(f"{name} {key}", saved[key]) for key in saved.files]
            bad = _non_finite([(n, t) for n, t in tensors if np.issubdtype(
                np.asarray(t).dtype, np.floating)])
            if bad:
                raise ValueError(f"{len(bad)} tensors hold NaN or infinity, first {bad[0]}")
            with open(os.path.join(path, "state.json")) as handle:
                json.load(handle)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise _unrestorable(path, error) from None

    def restore(self, model, step):
        """Loads a checkpoint into a compiled, built model; returns its state dict."""
        path = self._path(step)
        check_backend(path)
        try:
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
            keras_files.load_weights(model, os.path.join(path, "model.weights.h5"))
            saved = np.load(os.path.join(path, "optimizer.npz"))
            variables = model.optimizer.variables
            if len(saved.files) != len(variables):
                raise ValueError(f"{len(saved.files)} optimizer variables saved, "
                                 f"{len(variables)} in the model")
            for i, variable in enumerate(variables):
                variable.assign(saved[f"v{i}"])
            rng = np.load(os.path.join(path, "rng.npz"))
            for i, variable in enumerate(_rng_state(model)):
                variable.assign(rng[f"v{i}"])
            bad = _non_finite([(w.path, w.numpy()) for w in model.weights]) + _non_finite(
                [(f"optimizer {v.path}", v.numpy()) for v in variables])
            if bad:
                raise ValueError(f"{len(bad)} tensors hold NaN or infinity, first {bad[0]}")
            with open(os.path.join(path, "state.json")) as handle:
                return json.load(handle)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise _unrestorable(path, error) from None


def _unrestorable(path, error):
    return ValueError(
        f"The checkpoint {path} cannot be restored ({error}). It was written "
        "by a different model configuration or is corrupt; start a new run "
        "in another --out directory, or delete it to start over.")


def _strategy_scope(model):
    """The tf.distribute scope `model` was made in; none on JAX (keras.distribution)."""
    strategy = getattr(model, "distribute_strategy", None)
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


class _Guard(keras.callbacks.Callback):
    """Stops at the first non-finite batch loss (or non-finite checkpoint) and remembers it."""

    def __init__(self):
        super().__init__()
        self.bad_loss = None
        self.problem = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.bad_loss = float(loss)
            self.model.stop_training = True


class _CheckpointEachEpoch(keras.callbacks.Callback):
    """An "epoch" is one chunk of steps: checkpoint after each good one."""

    def __init__(self, checkpointer, guard, first_step, steps_per_epoch, history,
                 position=lambda step: {"step": step}):
        super().__init__()
        self.position = position
        self.checkpointer, self.guard = checkpointer, guard
        self.step, self.steps_per_epoch, self.history = first_step, steps_per_epoch, history

    def on_epoch_end(self, epoch, logs=None):
        if self.guard.bad_loss is not None:
            return
        step = self.step + self.steps_per_epoch
        try:
            # The loss was finite, but the update after it may not have been.
            self.checkpointer.save(self.model, step,
                                   {"input_position": self.position(step)})
        except TrainingDiverged as error:
            self.guard.bad_loss, self.guard.problem = float("nan"), str(error)
            self.model.stop_training = True
            return
        self.step = step
        self.history.append(dict({k: float(v) for k, v in (logs or {}).items()},
                                 step=self.step))


@dataclasses.dataclass(frozen=True)
class StagedInput:
    """The inputs of a run in stages, trained in order by `fit_resumable`.

    Args:
        stages: ((first step, endless dataset), ...), the first from step 0, the first
            steps increasing (BERT's 128-token examples, then its 512-token ones from 90%
            of the steps: Devlin et al. 2019, A.2).
    """

    stages: tuple

    def __post_init__(self):
        firsts = [first for first, _ in self.stages]
        if not firsts or firsts[0] != 0 or firsts != sorted(set(firsts)):
            raise ValueError(f"StagedInput's stages start at step 0 and at increasing "
                             f"steps, got first steps {firsts}.")

    @property
    def element_spec(self):
        """The first stage's (what the model is built from)."""
        return self.stages[0][1].element_spec

    def spans(self, steps):
        """[(first, end, dataset)] of the stages a run of `steps` steps trains."""
        ends = [first for first, _ in self.stages[1:]] + [steps]
        return [(first, min(end, steps), data) for (first, data), end in zip(self.stages, ends)
                if first < steps]


def positioned_input(dataset, step):
    """(the input from the first batch `step` steps did not consume, its position to save).

    A `keras_ctx.data.prepared_input.PreparedInput` starts there itself
    (`at_step`, no re-reading); a plain endless tf.data skips `step` batches.
    """
    if hasattr(dataset, "at_step"):
        return dataset.at_step(step), dataset.position
    return dataset.skip(step), lambda at: {"step": at}


def fit_resumable(
    model,
    dataset,
    steps,
    out_dir,
    checkpoint_every=100,
    resume=True,
    callbacks=(),
    verbose=1,
    start=None,
):
    """Trains a compiled model for `steps` steps in total, resuming from `out_dir`.

    Args:
        model: a compiled keras.Model (a pretrainer).
        dataset: an endless (repeated) deterministic tf.data.Dataset of batches, a
            `PreparedInput` (its position is saved in each checkpoint), or a
            `StagedInput` of such datasets (each stage's steps from its own first batch;
            a checkpoint inside a stage resumes there, at that stage's position).
        steps: total optimizer steps of the whole run (a positive int, as
            `checkpoint_every`: the command's request checked both).
        out_dir: holds checkpoints/ and logs/.
        checkpoint_every: steps between checkpoints.
        resume: continue from the latest checkpoint in out_dir if there is one.
        start: that checkpoint's step, when the caller listed them already (0: none).

    Returns:
        A dict with `step` (steps done) and `history` (logs after each chunk).
    """
    source = dataset
    checkpointer = Checkpointer(os.path.join(out_dir, "checkpoints"))
    step = (checkpointer.latest_step() if start is None else start) if resume else 0
    if step > steps:
        raise ValueError(f"{out_dir} already holds a checkpoint at step {step}, past "
                         f"--steps {steps}; raise --steps or use another --out.")
    # Built from the dataset's element spec, not from a batch: random ops in
    # a tf.data pipeline share their state between iterators, so an extra
    # read would shift every later random draw of a resumed run.
    # Variables made here must live under the strategy the model was made in.
    with _strategy_scope(model):
        if not model.built:
            build_from_spec(model, source.element_spec)
        if step:
            checkpointer.restore(model, step)
            if verbose:
                print(f"Resuming from step {step} ({checkpointer.directory}).")
    history = []
    tensorboard = keras.callbacks.TensorBoard(os.path.join(out_dir, "logs"))
    spans = (source.spans(steps) if isinstance(source, StagedInput)
             else [(0, steps, source)])
    for first, end, stage_input in spans:
        if step >= end:
            continue
        # Whole chunks in one fit call (one iterator), then the remainder: each inside
        # the stage, its data read from the stage's own position.
        remainder = (end - step) % checkpoint_every
        plan = ((checkpoint_every, (end - step) // checkpoint_every), (remainder, 1))
        for chunk, epochs in plan:
            if chunk == 0 or epochs == 0:
                continue
            step = _fit_chunks(model, stage_input, first, step, chunk, epochs, checkpointer,
                               history, [tensorboard, *callbacks], verbose)
    return {"step": step, "history": history}


def _fit_chunks(model, source, first, step, chunk, epochs, checkpointer, history, callbacks,
                verbose):
    """`epochs` chunks of `chunk` steps from `step` on `source` (a stage whose first step is
    `first`); returns the step reached. Raises TrainingDiverged on a non-finite loss."""
    guard = _Guard()
    data, position = positioned_input(source, step - first)
    saver = _CheckpointEachEpoch(checkpointer, guard, step, chunk, history,
                                 position if not first else lambda at: position(at - first))
    model.fit(checked_token_ids(data, model), steps_per_epoch=chunk, epochs=epochs,
              shuffle=False, callbacks=[guard, saver, *callbacks], verbose=verbose)
    if guard.bad_loss is not None:
        what = guard.problem or f"The loss became {guard.bad_loss} after step {saver.step}."
        raise TrainingDiverged(
            f"{what} The last good checkpoint (step {checkpointer.latest_step()}) is kept in "
            f"{checkpointer.directory}; lower the learning rate or check the data, then run "
            "again to resume from it.")
    return saver.step

"""Every objective's first step on JAX and on PyTorch equals TensorFlow's from the same weights.

The objectives are the TensorFlow matrix's (`matrix_cases.CASES`); each runs
one SGD step on TensorFlow here and on the other backend in ONE subprocess
(Keras reads its backend once per process), from the same starting weights,
dropout off. The other step is a different program (JAX: a stateless step with
`jax.value_and_grad`; torch: autograd), so agreement to float32 rounding checks
the whole contract: loss scaling, summed rows, step_variables, total_loss,
step_batches and carried state (XLNet's memory, AWD-LSTM's states after two
steps).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from keras_ctx.pretraining import Pretrainer
from tests.pretraining.backend_cases import CARRIED, POLICIES, RANDOM, first_step
from tests.pretraining.matrix_cases import CASES
from tests.session_once import arrays_once, listed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = [name for name in CASES if name not in RANDOM]
# By default (~50 s of CPU, both processes): masked LM, ELECTRA's two networks and
# weighted total, XLNet's carried memory.
DEFAULT = ("bert", "electra", "xlnet")
SLOW = [name for name in NAMES if name not in DEFAULT]
# Float32 reorderings between two compilers: <= 1e-6 relative measured. Half
# precision rounds activations to 2^-8 relative (bfloat16: up to ~2e-2 measured
# against float32, as testing.PRETRAINER_TOLERANCES).
FLOAT32, BFLOAT16 = 1e-5, 0.05
_TENSORFLOW = {}


def _error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _tensorflow(names):
    """TensorFlow's first step of each case (from its own weights), computed once."""
    for name in names:
        if name not in _TENSORFLOW:
            step = first_step(name)
            if name in CARRIED:
                carried = first_step(name, learning_rate=0.0, steps=2)
                step.update(carried_initial=carried["initial"], carried=carried["carried"])
            _TENSORFLOW[name] = step
    return {name: _TENSORFLOW[name] for name in names}


def _on_backend(backend, tmp_path, steps, *flags, devices=1):
    """{f"{name}/{key}": array} of backend_cases run on `backend` from `steps`' weights."""
    source, target = tmp_path / "tensorflow.npz", tmp_path / f"{backend}.npz"
    np.savez(source, **{f"{name}/{kind}/{i}": w for name, step in steps.items()
                        for kind in ("initial", "carried_initial") if kind in step
                        for i, w in enumerate(step[kind])})
    # XLA:CPU's compile time is most of a tiny step on JAX: LLVM's cheap passes only, as
    # tests/backends.py's jobs (the JAX leg's conftest sets the same).
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               TF_CPP_MIN_LOG_LEVEL="3",
               XLA_FLAGS="--xla_backend_optimization_level=0 "
                         "--xla_llvm_disable_expensive_passes=true "
                         f"--xla_force_host_platform_device_count={devices}")
    if devices > 1:
        flags += ("--devices", str(devices))
    done = subprocess.run([sys.executable, "-m", "tests.pretraining.backend_cases",
                           str(source), str(target), *steps, *flags],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(np.load(target))


def _shared_tensorflow(tmp_path_factory, names):
    """`_tensorflow(names)` computed once per session for the JAX and the torch test
    (tests/session_once.py), read back as arrays."""
    def compute():
        arrays = {}
        for name, step in _tensorflow(names).items():
            arrays[f"{name}/update"] = step["update"]
            if name in CARRIED:
                arrays[f"{name}/carried"] = step["carried"]
            for kind in ("initial", "carried_initial"):
                arrays.update({f"{name}/{kind}/{i}": w for i, w in enumerate(step.get(kind, []))})
        return arrays

    arrays = arrays_once(tmp_path_factory, "steps_tensorflow_" + "_".join(names), compute)
    steps = {name: {"initial": listed(arrays, f"{name}/initial"),
                    "update": arrays[f"{name}/update"]} for name in names}
    for name in set(CARRIED) & set(names):
        steps[name].update(carried_initial=listed(arrays, f"{name}/carried_initial"),
                           carried=arrays[f"{name}/carried"])
    return steps


def _assert_equal_steps(tmp_path, names, backend="jax", steps=None):
    steps = steps or _tensorflow(names)
    other = _on_backend(backend, tmp_path, steps)
    errors = {name: _error(other[f"{name}/float32"], step["update"])
              for name, step in steps.items()}
    assert not {n: e for n, e in errors.items() if not e < FLOAT32}, errors
    for name in set(CARRIED) & set(names):
        want = steps[name]["carried"]
        assert np.abs(want).max() > 0.01, name  # the state really moved on
        assert _error(other[f"{name}/carried"], want) < FLOAT32, name
    return steps


OTHER_BACKENDS = ("jax", "torch")
# The reference is TensorFlow's step in this process; the other backend runs in a subprocess.
tensorflow_reference = pytest.mark.tensorflow_only(
    "TensorFlow's first step, computed in this process, is the reference")


@tensorflow_reference
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_one_step_equals_tensorflow(backend, tmp_path_factory, tmp_path):
    _assert_equal_steps(tmp_path, DEFAULT, backend, _shared_tensorflow(tmp_path_factory, DEFAULT))


@tensorflow_reference
@pytest.mark.slow  # ~4 min (all < 5e-7 measured); DEFAULT's cases run by default above
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_every_objective_equals_tensorflow_and_the_matrix_covers_every_objective(
        backend, tmp_path):
    steps = _assert_equal_steps(tmp_path, SLOW, backend)

    def subclasses(cls):
        return [cls] + [s for c in cls.__subclasses__() for s in subclasses(c)]

    # Every Pretrainer subclass keras_ctx defines is a case's model or an ancestor of one.
    tested = {step["type"] for step in _tensorflow(NAMES).values()}
    missing = [c.__name__ for c in subclasses(Pretrainer)[1:]
               if c.__module__.startswith("keras_ctx.")
               and not tested & {s.__name__ for s in subclasses(c)}]
    assert not missing, f"add a case to tests/pretraining/matrix_cases.py for {missing}"
    assert steps


@tensorflow_reference
@pytest.mark.slow  # ~6 min; float32 runs by default above, both half precisions learn by
# default in test_jax_training.py
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_half_precision_and_data_parallel(backend, tmp_path):
    """mixed_bfloat16 and mixed_float16 (loss scaling) within half precision of
    TensorFlow's float32 step, as TensorFlow's own; on JAX, DataParallel over two
    virtual CPU devices equals one device (torch trains one device)."""
    steps = _tensorflow(NAMES)
    devices = 2 if backend == "jax" else 1
    jax_steps = _on_backend(backend, tmp_path, steps, "--policies", ",".join(POLICIES),
                            devices=devices)
    skipped = set()
    for name, step in steps.items():
        for policy in POLICIES[1:]:
            tensorflow = first_step(name, step["initial"], dtype_policy=policy)["update"]
            jax = jax_steps[f"{name}/{policy}"]
            if not tensorflow.any():
                # Dynamic loss scaling skips a step whose float16 gradients overflow at
                # the initial scale (2^15), and halves the scale: JAX must skip it too.
                assert not jax.any(), (name, policy)
                skipped.add((name, policy))
                continue
            assert _error(tensorflow, step["update"]) < BFLOAT16, (name, policy)
            assert _error(jax, step["update"]) < BFLOAT16, (name, policy)
    # ELECTRA's (its discriminator loss weighs 50, Clark et al. 2020) overflows float16 at
    # that scale; every other objective takes its first step.
    assert skipped == {("electra", "mixed_float16"),
                       ("electra_discriminator_stage", "mixed_float16")}, skipped
    for name, step in steps.items():
        if devices > 1:
            assert _error(jax_steps[f"{name}/data_parallel"],
                          jax_steps[f"{name}/float32"]) < FLOAT32, name


def test_a_checkpoint_from_another_backend_is_refused_in_one_line(tmp_path):
    """A run directory records the backend of each checkpoint (state.json)."""
    import json

    import keras

    from keras_ctx.training import Checkpointer, check_backend

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    checkpointer = Checkpointer(str(tmp_path))
    checkpointer.save(model, 1)
    state = tmp_path / "step-000000001" / "state.json"
    this = keras.backend.backend()
    other = "tensorflow" if this != "tensorflow" else "jax"
    assert json.loads(state.read_text())["backend"] == this
    checkpointer.restore(model, 1)
    state.write_text(json.dumps({"step": 1, "backend": other}))
    with pytest.raises(ValueError, match=f"written on Keras' {other} backend and this run is "
                                         f"on {this}: resume with KERAS_BACKEND={other}"):
        checkpointer.restore(model, 1)
    check_backend(str(tmp_path / "absent"))  # nothing written yet: nothing to refuse


def test_the_command_backend_flag_chooses_keras_backend_before_keras_starts():
    import keras

    # The flag names another backend than the environment's (this run's).
    wanted = "jax" if keras.backend.backend() != "jax" else "torch"
    code = (f"import sys; sys.argv = ['keras-ctx', '--backend', '{wanted}', 'pretrain']; "
            "import keras_ctx, keras; print(keras.backend.backend())")
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == wanted


def test_a_resume_refused_for_its_backend_leaves_the_run_directory_as_it_was(tmp_path):
    """The refusal comes before the run's settings record the new --steps (it came after:
    the directory then claimed a run it never trained)."""
    import json

    import keras

    from keras_ctx import runs
    from keras_ctx.training import Checkpointer

    out = tmp_path / "run"
    settings = {"model": "bert-tiny", "steps": 10, "seed": 0}
    runs.claim(str(out), settings)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    Checkpointer(str(out / "checkpoints")).save(model, 5)
    state = out / "checkpoints" / "step-000000005" / "state.json"
    other = "tensorflow" if keras.backend.backend() != "tensorflow" else "jax"
    state.write_text(json.dumps({"step": 5, "backend": other}))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=f"written on Keras' {other} backend"):
        runs.claim(str(out), dict(settings, steps=20))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

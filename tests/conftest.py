"""The suite's one backend switch: the caller's KERAS_BACKEND (tensorflow when unset)
runs every test on that backend, e.g. `KERAS_BACKEND=torch pytest -q tests/layers`.

Markers that skip a test (or a whole module, through `pytestmark`) elsewhere, with a reason
(pytest.ini lists them):

- `@pytest.mark.tensorflow_only("why")`: only TensorFlow can run it (tf.data, SavedModel, TF
  checkpoints, tf.distribute, a reference computed on TensorFlow in the test process);
- `@pytest.mark.runs_on("tensorflow", "jax", reason="why")`: the backends named only;
- `@pytest.mark.backend_neutral("why")`: its subject involves no Keras backend (docs, the
  repository's layout, lint, argparse): TensorFlow's run covers it, JAX and PyTorch skip it,
  so that CI can run the whole default suite on each backend without paying for it thrice.
"""

import gc
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ["KERAS_BACKEND"] == "torch":
    # Keras' jit_compile=True is torch.compile on torch: the harnesses' compiled fit then
    # took 270 s instead of 10 s for three tiny backbones on 2 cores. The tests run that
    # fit eagerly; TORCH_COMPILE_DISABLE=0 asks for torch.compile.
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
if os.environ["KERAS_BACKEND"] == "jax":
    # XLA:CPU's compile time is most of a tiny model's test on JAX: LLVM's cheap passes
    # only (set before JAX starts; a flag the caller's XLA_FLAGS sets holds, e.g.
    # --xla_backend_optimization_level=3 --xla_llvm_disable_expensive_passes=false, XLA's).
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = " ".join([flags] + [
        f"--{name}={value}" for name, value in (("xla_backend_optimization_level", 0),
                                                ("xla_llvm_disable_expensive_passes", "true"))
        if f"--{name}=" not in flags]).strip()

import keras_ctx  # noqa: E402,F401  (before keras: it hides TensorFlow's load-time lines)
import keras  # noqa: E402
import pytest  # noqa: E402

# Keras runs gc.collect() when a layer's variable is deleted (quantize, clear_session): each
# scanned the whole TensorFlow/JAX heap. The objects of the imports are kept out of it
# (TF 28.1 -> 26.5 s, JAX 87.6 -> 84.2 s CPU on three model test files).
gc.freeze()

BACKEND = keras.backend.backend()
BACKENDS = ("tensorflow", "jax", "torch")


def pytest_report_header(config):
    return f"keras backend: {BACKEND}"


if BACKEND == "jax":
    @pytest.fixture(scope="session", autouse=True)
    def _jax_compilation_cache(tmp_path_factory):
        """One persistent XLA compilation cache per test session, shared by pytest-xdist's
        workers and the CLI subprocesses tests start (they inherit the environment): the
        workers compile the same programs for the same tiny models. It starts empty in the
        session's own temporary directory, so no earlier checkout's programs answer; every
        program is kept, however fast it compiled (JAX keeps those over 1 s only)."""
        import jax

        from tests.session_once import session_root

        settings = {"jax_compilation_cache_dir":
                    str(session_root(tmp_path_factory) / "jax-compilation-cache"),
                    "jax_persistent_cache_min_compile_time_secs": 0}
        for name, value in settings.items():
            jax.config.update(name, value)
            os.environ[name.upper()] = str(value)


# marker -> (the backends it runs on, or None: runs_on names them, what the skip says)
SKIPPING = {"tensorflow_only": (("tensorflow",), "TensorFlow only"),
            "backend_neutral": (("tensorflow",), "backend-neutral, TensorFlow's run covers it"),
            "runs_on": (None, None)}


def skip_reason(item, backend=BACKEND):
    """Why `item` does not run on `backend`, or None where it does; a marker without its
    reason (or naming no known backend) stops the run on every backend."""
    # The closest of each kind: a test's runs_on("torch") overrides its module's.
    for marker in filter(None, map(item.get_closest_marker, SKIPPING)):
        backends, said = SKIPPING[marker.name]
        if backends is None:  # runs_on("tensorflow", "jax", reason="...")
            backends, reason = marker.args, marker.kwargs.get("reason")
            said = " and ".join(backends) + " only"
            if not backends or not set(backends) <= set(BACKENDS):
                raise pytest.UsageError(
                    f"{item.nodeid}: runs_on names backends among {BACKENDS}, not {backends}")
        else:
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason")
        if not isinstance(reason, str) or not reason:
            raise pytest.UsageError(
                f"{item.nodeid}: {marker.name} needs a reason, e.g. "
                f"@pytest.mark.{marker.name}('tf.data pipeline')")
        if backend not in backends:
            return f"{said}: {reason}"
    return None


def pytest_collection_modifyitems(config, items):
    """Skips the tests marked for other backends (or backend-neutral), showing their reason."""
    for item in items:
        reason = skip_reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts in float32 with a fixed seed."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A saved run of a one-layer BERT and its tokenizer (`tests.cli_helpers.make_run`)."""
    from tests.cli_helpers import make_run

    directory = tmp_path_factory.mktemp("run") / "run"
    make_run(directory)
    return directory


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache in tmp, read offline (fill it with
    `tests.hub_caches.add_hf_repo`)."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return str(cache)

"""The suite's one backend switch: the caller's KERAS_BACKEND (tensorflow when unset)
runs every test on that backend, e.g. `KERAS_BACKEND=torch pytest -q tests/layers`.

A test (or a whole module, through `pytestmark`) that only TensorFlow can run carries
`@pytest.mark.tensorflow_only("why")`; on JAX and PyTorch it is skipped with that reason.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ["KERAS_BACKEND"] == "torch":
    # Keras' jit_compile=True is torch.compile on torch: the harnesses' compiled fit then
    # took 270 s instead of 10 s for three tiny backbones on 2 cores. The tests run that
    # fit eagerly; TORCH_COMPILE_DISABLE=0 asks for torch.compile.
    os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

import keras_ctx  # noqa: E402,F401  (before keras: it hides TensorFlow's load-time lines)
import keras  # noqa: E402
import pytest  # noqa: E402

BACKEND = keras.backend.backend()


def pytest_report_header(config):
    return f"keras backend: {BACKEND}"


def pytest_collection_modifyitems(config, items):
    """Skips `tensorflow_only` tests on another backend, showing their reason."""
    if BACKEND == "tensorflow":
        return
    for item in items:
        marker = item.get_closest_marker("tensorflow_only")
        if marker is None:
            continue
        reason = marker.args[0] if marker.args else marker.kwargs.get("reason")
        if not reason:
            raise pytest.UsageError(
                f"{item.nodeid}: tensorflow_only needs a reason, "
                "e.g. @pytest.mark.tensorflow_only('tf.data pipeline')")
        item.add_marker(pytest.mark.skip(reason=f"TensorFlow only: {reason}"))


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

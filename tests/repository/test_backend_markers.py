"""tests/conftest.py's markers decide, per backend, which tests run: `tensorflow_only` and
`backend_neutral` run on TensorFlow only, `runs_on` on the backends it names; each skip
says its reason, and a marker without one stops the run."""

import pytest

from tests.conftest import skip_reason


class Item:
    """What `skip_reason` reads of a collected test: its id and its markers."""

    nodeid = "tests/test_x.py::test_y"

    def __init__(self, *markers):
        self.markers = markers

    def get_closest_marker(self, name):
        return next((m for m in self.markers if m.name == name), None)


def _decisions(marker):
    return {backend: skip_reason(Item(marker), backend)
            for backend in ("tensorflow", "jax", "torch")}


pytestmark = pytest.mark.backend_neutral("checks the switch's decision for all three backends")


def test_tensorflow_only_skips_elsewhere_with_its_reason():
    assert _decisions(pytest.mark.tensorflow_only("tf.data pipeline").mark) == {
        "tensorflow": None, "jax": "TensorFlow only: tf.data pipeline",
        "torch": "TensorFlow only: tf.data pipeline"}


def test_backend_neutral_runs_once_on_tensorflow():
    said = "backend-neutral, TensorFlow's run covers it: README's links"
    assert _decisions(pytest.mark.backend_neutral(reason="README's links").mark) == {
        "tensorflow": None, "jax": said, "torch": said}


def test_runs_on_runs_on_the_backends_it_names():
    marker = pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export").mark
    assert _decisions(marker) == {"tensorflow": None, "jax": None,
                                  "torch": "tensorflow and jax only: SavedModel export"}


def test_an_unmarked_test_runs_everywhere():
    assert set(_decisions(pytest.mark.slow.mark).values()) == {None}


@pytest.mark.parametrize("marker, message", [
    (pytest.mark.tensorflow_only.mark, "tensorflow_only needs a reason"),
    (pytest.mark.backend_neutral("").mark, "backend_neutral needs a reason"),
    (pytest.mark.runs_on("jax").mark, "runs_on needs a reason"),
    (pytest.mark.runs_on(reason="x").mark, "runs_on names backends among"),
    (pytest.mark.runs_on("tf", reason="x").mark, r"runs_on names backends among .*\('tf',\)"),
])
def test_a_marker_without_its_reason_or_backends_stops_the_run(marker, message):
    # On TensorFlow too, where nothing is skipped: the mistake shows in every run.
    with pytest.raises(pytest.UsageError, match=message):
        skip_reason(Item(marker), "tensorflow")


def test_a_tests_own_runs_on_overrides_its_modules():
    test, module = (pytest.mark.runs_on("torch", reason="its refusal").mark,
                    pytest.mark.runs_on("tensorflow", "jax", reason="export").mark)
    assert {backend: skip_reason(Item(test, module), backend)
            for backend in ("tensorflow", "jax", "torch")} == {
        "tensorflow": "torch only: its refusal", "jax": "torch only: its refusal", "torch": None}

"""Every private upstream API keras_ctx uses resolves in the installed releases."""

import pytest

from keras_ctx import compat


@pytest.mark.parametrize("key", sorted(compat.SYMBOLS))
def test_every_private_upstream_symbol_resolves(key):
    # On an upgrade that drops one, this fails with compat's own message:
    # the symbol, the version it was written for and the installed one.
    assert compat.resolve(key) is not None


def test_the_pins_named_are_setup_pys():
    import re
    from pathlib import Path

    setup = (Path(__file__).parents[1] / "setup.py").read_text()
    for distribution, version in compat.WRITTEN_FOR.items():
        assert re.search(rf'"{distribution}=={re.escape(version)}"', setup), distribution


def test_a_missing_symbol_names_itself_and_the_pinned_version(monkeypatch):
    monkeypatch.setitem(compat.SYMBOLS, "gone", ("tensorflow", "tensorflow.python.ops.nowhere",
                                                  "Function"))
    with pytest.raises(compat.UpstreamAPIError) as error:
        compat.resolve("gone")
    message = str(error.value)
    assert "`tensorflow.python.ops.nowhere.Function`" in message
    assert "written for tensorflow 2.21.0" in message and "tensorflow==2.21.0" in message
    monkeypatch.setitem(compat.SYMBOLS, "gone too", ("keras", "keras", "Layer._no_such_method"))
    with pytest.raises(compat.UpstreamAPIError, match=r"`keras.Layer._no_such_method`.*keras 3.15.1"):
        compat.resolve("gone too")


def test_wrappers_behave_as_upstream():
    import keras

    byte_values, characters = compat.bytes_to_unicode()
    assert dict(zip(byte_values, characters))[b" "] == "Ġ"  # GPT-2's space marker
    inner = keras.layers.Dense(2)
    model = keras.Sequential([keras.Input((3,)), inner])
    assert inner in compat.flatten_layers(model, include_self=False)
    assert model not in compat.flatten_layers(model, include_self=False)

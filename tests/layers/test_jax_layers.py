"""On Keras' JAX backend: the attention core (`keras.ops.dot_product_attention` for
plain attention) and text turned into inputs give TensorFlow's numbers (one JAX
subprocess, `tests.layers.jax_cases`, compared with this TensorFlow process)."""

import os

import numpy as np
import pytest

from tests.backends import run_on_backend
from tests.layers import jax_cases

pytestmark = pytest.mark.tensorflow_only(
    "compares a JAX subprocess with TensorFlow's numbers computed in this process")


@pytest.fixture(scope="module")
def on_jax(tmp_path_factory):
    out = os.path.join(tmp_path_factory.mktemp("jax"), "layers.npz")
    run_on_backend("jax", "layer_outputs", {"out": out}, timeout=300)
    return np.load(out)


def test_jax_fused_attention_equals_tensorflows_einsums(on_jax):
    for name, (plain, _, _) in jax_cases.CASES.items():
        assert bool(on_jax[f"{name}/fused"]) == plain, name
        np.testing.assert_allclose(on_jax[name], jax_cases.run(name), atol=1e-5, rtol=1e-5,
                                   err_msg=name)


def test_text_becomes_tensorflows_ids_on_jax(on_jax):
    expected = jax_cases.texts_as_inputs()
    assert sorted(k for k in on_jax.files if k.startswith(("text/", "pair/"))) == sorted(expected)
    for name, ids in expected.items():
        assert on_jax[name].dtype == ids.dtype, name
        np.testing.assert_array_equal(on_jax[name], ids, err_msg=name)
    assert on_jax["text/bert/token_ids"].shape[1] > 8  # the long text's row grew

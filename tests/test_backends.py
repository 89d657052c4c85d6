"""The same weights give the same outputs on Keras' TensorFlow and JAX backends.

Every registered family's backbone (the registry's list) is built here on
TensorFlow from its tiny config, its weights and inputs written to an .npz;
one JAX subprocess loads them into the same backbone and writes its outputs
back (tests/backends.py).
"""

import numpy as np
import pytest

from keras_ctx import families
from tests.backends import float_outputs, run_on_backend, tiny_backbone
from tests.models.test_backbones import _inputs

# float32 on both backends; XLA (JAX) and TensorFlow's kernels sum in other orders.
ATOL = 1e-5


def test_every_family_backbone_gives_tensorflows_outputs_on_jax(tmp_path):
    stored, expected = {}, {}
    for family in families.names():
        _, _, backbone = tiny_backbone(family)
        inputs = _inputs(backbone, np.random.default_rng(0))
        for name, value in float_outputs(backbone(inputs)).items():
            expected[f"{family}/{name}"] = value
        for i, weight in enumerate(backbone.get_weights()):
            stored[f"{family}/{i}"] = weight
        for name, value in inputs.items():
            stored[f"{family}/input/{name}"] = value
    np.savez(tmp_path / "weights.npz", **stored)

    run_on_backend("jax", "backbone_outputs", {"weights": str(tmp_path / "weights.npz"),
                                               "out": str(tmp_path / "jax.npz")})
    got = np.load(tmp_path / "jax.npz")
    assert sorted(got.files) == sorted(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, atol=ATOL, rtol=0, err_msg=key)

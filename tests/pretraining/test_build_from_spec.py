"""An unbuilt pretrainer is built from a tf.data input's spec, not from a batch read off it.

Keras' JAX and PyTorch trainers build an unbuilt model from one batch they read, then
start the epoch on a fresh iterator: the data's first pass is spent on the build, and
training sees its second (another shuffle, other masks, a generator's next epoch).
A generator counts its passes; one `fit` must make exactly one.
"""

import pytest

from tests.backends import run_script


_FIT = """
import json
import keras, numpy as np, tensorflow as tf
from tests.pretraining.matrix_cases import CASES
make, make_batch = CASES["bert"]
keras.utils.set_random_seed(0)
model, batch = make(), make_batch()
model.compile(optimizer=keras.optimizers.SGD(0.1))
passes = []
def rows():
    passes.append(1)
    for _ in range(2):
        yield batch
signature = {k: tf.TensorSpec(v.shape, tf.as_dtype(v.dtype)) for k, v in batch.items()}
data = tf.data.Dataset.from_generator(rows, output_signature=signature)
model.fit(data, epochs=1, verbose=0)
model.evaluate(data, verbose=0)
print(json.dumps({"passes": len(passes)}))
"""


@pytest.mark.parametrize("backend", [  # the others with -m slow (a process each)
    pytest.param("tensorflow", marks=pytest.mark.slow),
    pytest.param("jax", marks=pytest.mark.slow), pytest.param("torch")])
def test_fit_and_evaluate_read_the_data_once_each(backend):
    assert run_script(backend, _FIT) == {"passes": 2}

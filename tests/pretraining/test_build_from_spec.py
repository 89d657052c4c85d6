"""An unbuilt pretrainer is built from a tf.data input's spec, not from a batch read off it
(the suite's backend switch runs this on each backend).

Keras' JAX and PyTorch trainers build an unbuilt model from one batch they read, then
start the epoch on a fresh iterator: the data's first pass is spent on the build, and
training sees its second (another shuffle, other masks, a generator's next epoch).
A generator counts its passes; one `fit` must make exactly one.
"""

import keras
import tensorflow as tf

from tests.pretraining.matrix_cases import CASES


def test_fit_and_evaluate_read_the_data_once_each():
    make, make_batch = CASES["bert"]
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
    assert len(passes) == 1
    model.evaluate(data, verbose=0)
    assert len(passes) == 2

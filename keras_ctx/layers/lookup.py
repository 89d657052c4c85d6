"""Row lookups whose gradients every Keras optimizer applies correctly.

The gradient of a gather (`ops.take`) is a `tf.IndexedSlices` with one row per
lookup: a row read k times appears k times. Keras 3 (seen with 3.15.1 on
TensorFlow 2.21) applies such a gradient wrongly in every optimizer that
squares it (Adam, AdamW, Adamax, Nadam, RMSprop, Adagrad, ...): it squares each
occurrence before the duplicates are summed, so Adam's second moment becomes a
sum of squares instead of the square of the sum. The bug, as reported upstream:

    Adam squares IndexedSlices occurrences separately: wrong update for
    embedding rows repeated in a batch.

        import numpy as np, tensorflow as tf, keras
        variable = keras.Variable(np.zeros((3, 1), "float32"))
        gradient = tf.IndexedSlices(tf.fill([4, 1], 0.25),    # row 0 read 4 times,
                                    tf.constant([0, 0, 0, 0]), # total gradient 1.0
                                    tf.constant([3, 1]))
        keras.optimizers.Adam(0.1).apply([gradient], [variable])
        print(variable.numpy()[0])   # [-0.2]; the dense gradient [[1], [0], [0]]
                                     # gives [-0.1], as PyTorch's Adam does

    Adam.update_step computes `ops.square(gradient)` on the IndexedSlices
    (squaring each slice's values) and only then densifies (summing slices):
    v = (1-b2) * sum_i g_i^2 instead of (1-b2) * (sum_i g_i)^2. Summing
    duplicate indices first (tf.unique + unsorted_segment_sum) fixes it.

Every lookup of a trainable table in keras_ctx goes through `take_rows`, whose
gradient is `summed_rows`' form; the Pretrainer step passes every gradient
through `summed_rows` as well, which also covers tables read by layers that are
not ours (keras.layers.Embedding) and duplicates that MirroredStrategy's
all-reduce creates by concatenating the replicas' slices.

Rows absent from a batch: Keras' Adam updates its moments densely (a row not
looked up still decays m and v and moves by its momentum), which is PyTorch's
`torch.optim.Adam` on a dense gradient, the reference we follow; a lazy Adam
(PyTorch's SparseAdam, TF1's LazyAdam) would leave such rows untouched.

On backends other than TensorFlow, gradients are dense arrays: `take_rows` is
`ops.take` and `summed_rows` the identity (backend/keras_ops.py).
"""

from keras_ctx.backend import summed_rows, take_rows  # noqa: F401  (their home)

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data.permutation import permutation_masks
from keras_ctx.data.xlnet_stream import text_stream
from keras_ctx.models import XLNetBackbone
from keras_ctx.pretraining import XLNetPretrainer

VOCAB = 24


def _numpy_tree(structure):
    """`structure`'s tensors as NumPy, whatever backend made them."""
    return keras.tree.map_structure(keras.ops.convert_to_numpy, structure)


def _language(num_docs, seed=0):
    """Arithmetic progressions mod VOCAB with step 1..3: x_{i+1} = x_i + d."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, VOCAB, (num_docs, 1))
    step = rng.integers(1, 4, (num_docs, 1))
    lengths = rng.integers(10, 40, num_docs).astype("int32")
    docs = ((start + step * np.arange(40)) % VOCAB).astype("int32")
    return tf.data.Dataset.from_tensor_slices((docs, lengths)).map(lambda d, n: d[:n])


def _xlnet(mem_len):
    return XLNetBackbone(VOCAB, 2, 2, 32, 64, dropout=0.0, attention_dropout=0.0,
                         mem_len=mem_len)


@pytest.mark.slow  # a long XLA fit; one step of each precision/strategy runs in test_matrix.py
def test_tiny_xlnet_learns_a_tiny_language_under_xla():
    batch, length = 16, 24
    data = permutation_masks(text_stream(_language(1200), length, batch), seed=1)
    data = data.take(60).cache()
    pretrainer = XLNetPretrainer(_xlnet(mem_len=8), batch_size=batch)
    pretrainer.compile(keras.optimizers.Adam(5e-3), jit_compile=True)
    assert pretrainer.jit_compile
    history = pretrainer.fit(data, epochs=10, verbose=0).history
    # Chance is 1 / 24 ~ 0.04; predicting x from its context is easy here.
    assert history["plm_accuracy"][-1] > 0.5, history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history
    assert np.abs(_numpy_tree(pretrainer.memory)).max() > 0  # memory was carried
    result = pretrainer.evaluate(data.take(5), verbose=0, return_dict=True)
    assert result["plm_accuracy"] > 0.5


def test_memory_carried_between_batches():
    batch, length, mem_len = 2, 12, 5
    data = permutation_masks(text_stream(_language(40, seed=1), length, batch), seed=2)
    first, second = _numpy_tree(list(data.take(2)))
    backbone = _xlnet(mem_len)
    pretrainer = XLNetPretrainer(backbone, batch_size=batch)
    # "auto": a TF graph on a CPU (the XLA run is the learning test), jax.jit on JAX.
    pretrainer.compile(keras.optimizers.SGD(0.0))  # weights stay
    memory = _numpy_tree(backbone.forward_pass(first, memory=backbone.initial_memory(batch))["memory"])
    # Memory after the first batch = its layer inputs, last mem_len positions.
    outputs = _numpy_tree(backbone.forward_pass(first, memory=backbone.initial_memory(batch)))
    np.testing.assert_allclose(memory[1], outputs["hidden_states"][1][:, -mem_len:])
    expected = _numpy_tree(backbone.forward_pass(second, memory=memory)["memory"])
    without = _numpy_tree(backbone.forward_pass(second, memory=backbone.initial_memory(batch))[
        "memory"])
    assert np.abs(np.stack(expected) - np.stack(without)).max() > 1e-3
    pretrainer.fit(tf.data.Dataset.from_tensor_slices(
        {k: np.stack([first[k], second[k]]) for k in first}), verbose=0)
    np.testing.assert_allclose(_numpy_tree(pretrainer.memory), np.stack(expected), atol=1e-5)
    pretrainer.reset_memory()
    assert not _numpy_tree(pretrainer.memory).any()


def test_bad_uses():
    # Twice refused in a row: on JAX the first refusal, before any step, left the Adam
    # slots that fit had just built empty, and the second fit died in a Variable.
    with pytest.raises(ValueError, match="batch_size"):
        XLNetPretrainer(_xlnet(mem_len=4))
    with pytest.raises(ValueError, match="two-stream"):
        XLNetPretrainer(keras.Sequential([keras.layers.Dense(2)]))
    no_memory = XLNetPretrainer(_xlnet(mem_len=0))
    assert no_memory.memory is None
    revived = XLNetPretrainer.from_config(no_memory.get_config())
    assert revived.backbone.get_config() == no_memory.backbone.get_config()
    pretrainer = XLNetPretrainer(_xlnet(mem_len=4), batch_size=3)
    pretrainer.compile(keras.optimizers.Adam(), jit_compile=True)
    data = permutation_masks(text_stream(_language(40), 12, 2))
    with pytest.raises(ValueError, match="batch_size=3"):
        pretrainer.fit(data.take(1), verbose=0)
    with pytest.raises(ValueError, match="permutation_masks"):
        pretrainer.fit(text_stream(_language(40), 12, 3).take(1), verbose=0)


def test_released_layout_carries_the_reuse_part_of_each_row():
    """two_segment_stream -> permutation_masks -> XLNetPretrainer(reuse_len): XLNet's run."""
    from keras_ctx.data.xlnet_stream import two_segment_stream

    rng = np.random.default_rng(3)
    docs = [[list(rng.integers(8, VOCAB, rng.integers(3, 8))) for _ in range(5)]
            for _ in range(20)]
    documents = tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in docs),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, 1))
    batch, length, reuse, mem_len = 4, 16, 8, 12
    data = permutation_masks(two_segment_stream(documents, length, batch, sep_id=4, cls_id=3,
                                                reuse_len=reuse, seed=0),
                             num_predict=3, functional_ids=(4, 3), reuse_len=reuse, seed=0)
    first, second = _numpy_tree(list(data.take(2)))
    assert first["is_backward"].tolist() == [0, 0, 1, 1]
    backbone = _xlnet(mem_len)
    pretrainer = XLNetPretrainer(backbone, batch_size=batch, reuse_len=reuse)
    pretrainer.compile(keras.optimizers.SGD(0.0))  # weights stay; "auto" as above
    memory = backbone.initial_memory(batch)
    for step, element in enumerate((first, second)):
        memory = _numpy_tree(backbone.forward_pass(element, memory=memory, reuse_len=reuse)["memory"])
        pretrainer.fit(tf.data.Dataset.from_tensors(element), verbose=0)
        np.testing.assert_allclose(_numpy_tree(pretrainer.memory), np.stack(memory), atol=1e-5)
        if step == 0:  # only the 8 reused states went in: 4 of the 12 slots are still zero
            carried = _numpy_tree(pretrainer.memory)
            assert not carried[:, :, :4].any() and np.abs(carried[:, :, 4:]).min() > 0
    assert XLNetPretrainer.from_config(pretrainer.get_config()).reuse_len == reuse


@pytest.mark.slow  # ~2 min on 2 CPU cores
def test_tiny_xlnet_learns_from_the_released_layout():
    """Two-segment rows, reuse_len, span targets, bi_data rows: the PLM loss falls."""
    from keras_ctx.data.xlnet_stream import two_segment_stream

    rng = np.random.default_rng(4)
    docs = []
    for _ in range(300):  # progressions mod 24 (see _language), cut into sentences
        start, step = rng.integers(0, VOCAB), rng.integers(1, 4)
        text = ((start + step * np.arange(40)) % VOCAB).tolist()
        cuts = np.sort(rng.choice(np.arange(4, 36), 4, replace=False))
        docs.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, 40])])
    documents = tf.data.Dataset.from_generator(
        lambda: (tf.ragged.constant(d, dtype=tf.int32) for d in docs),
        output_signature=tf.RaggedTensorSpec((None, None), tf.int32, 1))
    batch, length, reuse = 8, 32, 16
    sep, cls = VOCAB, VOCAB + 1
    data = permutation_masks(two_segment_stream(documents, length, batch, sep, cls, seed=1),
                             num_predict=5, functional_ids=(sep, cls), reuse_len=reuse, seed=1)
    data = data.take(40).cache()
    backbone = XLNetBackbone(VOCAB + 2, 2, 2, 32, 64, dropout=0.0, attention_dropout=0.0,
                             mem_len=16)
    pretrainer = XLNetPretrainer(backbone, batch_size=batch, reuse_len=reuse)
    pretrainer.compile(keras.optimizers.Adam(5e-3), jit_compile=True)
    history = pretrainer.fit(data, epochs=14, verbose=0).history
    # Chance is 1 / 26; the spans' neighbours give the token away.
    assert history["plm_accuracy"][-1] > 0.4, history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history

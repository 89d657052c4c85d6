import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data import noise
from keras_ctx.models.bart.backbone import BartBackbone
from keras_ctx.models.t5.backbone import T5Backbone
from keras_ctx.data.task_inputs import add_task_prefix
from keras_ctx.pretraining.seq2seq import Seq2SeqPretrainer
from tests.backends import slow_on
from tests.pretraining.callbacks import FirstBatchLoss

VOCAB = 32  # 0 pad, 1 eos, 2 bos, 3 mask, 4..23 words, 24..31 sentinels
SIZE = dict(vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_size=32,
            intermediate_size=64, dropout=0.0)


def counting_documents(n, length, seed):
    """Tokens 4..23 counting up by 1 or 2 (mod 20): a tiny learnable language."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 20, size=(n, 1))
    step = rng.integers(1, 3, size=(n, 1))
    return (4 + (start + step * np.arange(length)) % 20).astype("int32")


def fit(backbone, dataset, epochs):
    model = Seq2SeqPretrainer(backbone)
    model.compile(optimizer=keras.optimizers.Adam(5e-3), jit_compile=True)
    first = FirstBatchLoss()
    history = model.fit(dataset, epochs=epochs, verbose=0, callbacks=[first]).history
    return model, first.loss, history


@slow_on("jax", "torch")  # torch: eager, minutes. Both: one step in test_matrix.py, equal to
# TensorFlow's (test_backends.py), and learning in test_jax_training.py
def test_tiny_t5_learns_span_corruption_under_xla():
    keras.utils.set_random_seed(0)
    tf.random.set_seed(0)
    encoder_length, decoder_length = noise.span_corruption_lengths(30)
    docs = tf.data.Dataset.from_tensor_slices(counting_documents(256, 30, 0))
    ds = docs.map(lambda ids: noise.span_corruption(ids, first_sentinel_id=VOCAB - 1, eos_id=1))
    ds = ds.map(lambda e: noise.seq2seq_features(e, encoder_length, decoder_length,
                                                 decoder_start_id=0))
    ds = ds.cache().batch(32, drop_remainder=True)
    _, first_loss, history = fit(T5Backbone(**SIZE), ds, epochs=10)
    assert first_loss > 2.5  # ~ log(32) untrained
    assert history["loss"][-1] < 0.4 * first_loss
    assert history["accuracy"][-1] > 0.5  # chance is ~1/20


@pytest.mark.slow  # ~25 s; T5's learning test and BART's one step per precision/strategy run by default
def test_tiny_bart_learns_text_infilling_denoising_under_xla():
    keras.utils.set_random_seed(1)
    tf.random.set_seed(1)
    noise_fn = noise.compose(lambda ids: noise.text_infilling(ids, mask_id=3, rate=0.3))
    docs = tf.data.Dataset.from_tensor_slices(counting_documents(256, 24, 1))
    ds = docs.map(noise.bart_noise(noise_fn)).map(
        lambda e: noise.seq2seq_features(e, 32, 24, decoder_start_id=2))
    ds = ds.cache().batch(32, drop_remainder=True)
    _, first_loss, history = fit(BartBackbone(**SIZE, max_sequence_length=32), ds, epochs=10)
    assert first_loss > 2.5
    assert history["loss"][-1] < 0.4 * first_loss
    assert history["accuracy"][-1] > 0.7


def test_add_task_prefix_and_errors():
    ds = tf.data.Dataset.from_tensors({"inputs": "Das Haus.", "targets": "The house."})
    out = next(iter(ds.map(add_task_prefix("translate German to English: "))))
    assert out["inputs"].numpy() == b"translate German to English: Das Haus."
    assert out["targets"].numpy() == b"The house."
    with pytest.raises(ValueError, match="prefix"):
        add_task_prefix("")
    model = Seq2SeqPretrainer(T5Backbone(**SIZE))
    model.compile(optimizer="adam")
    x = {k: np.ones((2, 4), "int32") for k in (
        "encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
        "decoder_padding_mask")}
    with pytest.raises(ValueError, match="seq2seq_features"):
        model.train_on_batch(x)


def labelled_batch(rows, encoder_length, decoder_length, seed):
    """(x, labels) as a caller without weights gives them: padded decoder rows."""
    rng = np.random.default_rng(seed)
    encoder = rng.integers(4, 24, size=(rows, encoder_length)).astype("int32")
    decoder = rng.integers(4, 24, size=(rows, decoder_length)).astype("int32")
    lengths = rng.integers(2, decoder_length + 1, size=(rows, 1))
    mask = (np.arange(decoder_length) < lengths).astype("int32")
    decoder[mask == 0] = 0
    labels = np.concatenate([decoder[:, 1:], np.ones((rows, 1), "int32")], axis=1) * mask
    x = {"encoder_token_ids": encoder, "encoder_padding_mask": np.ones_like(encoder),
         "decoder_token_ids": decoder, "decoder_padding_mask": mask}
    return x, labels, mask


@pytest.mark.parametrize("make", [lambda: T5Backbone(**SIZE),
                                  lambda: BartBackbone(**SIZE, max_sequence_length=16)],
                         ids=["t5", "bart"])
def test_labels_without_weights_weigh_the_decoder_padding_mask(make):
    """`(x, labels)`, as the docstring allows: the weights are the decoder's padding mask
    (the same loss as passing that mask), and the model trains on such batches."""
    x, labels, mask = labelled_batch(8, 12, 10, seed=0)
    model = Seq2SeqPretrainer(make())
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    implicit = model.test_on_batch(x, labels, return_dict=True)["loss"]
    explicit = model.test_on_batch(x, labels, mask.astype("float32"), return_dict=True)["loss"]
    uniform = model.test_on_batch(x, labels, np.ones_like(mask, "float32"),
                                  return_dict=True)["loss"]
    np.testing.assert_allclose(implicit, explicit, rtol=1e-6)
    assert abs(implicit - uniform) > 1e-3  # the padded positions really are left out
    losses = [model.train_on_batch(x, labels, return_dict=True)["loss"] for _ in range(8)]
    assert losses[-1] < 0.8 * losses[0]

"""Token ids checked where the data enters a compiled step, once per input, on every backend.

XLA compiles asserts away and clamps an out-of-range gather to the last row
(a traced JAX step has no values to check at all): an id past the vocabulary
would train on the wrong vector silently. So the ids are checked where the
data enters `fit` (and every other entry point, generation's prompts too), outside
the compiled step: a tf.data.Dataset is mapped through TensorFlow asserts (as it
streams), a Python iterator or a keras.utils.PyDataset is wrapped (each batch
checked as it is read, in numpy), arrays are checked at once; float ids too (NaN
and fractions refused). The
result is marked: `keras_ctx.training.fit_resumable` and `Pretrainer.fit`
both call `checked_token_ids`, and an input is checked once.
"""

import sys
import weakref

import keras
import numpy as np

from keras_ctx import backend
from keras_ctx.layers.embeddings import vocabulary_size_of

_CHECKED = weakref.WeakSet()  # the datasets and iterators made here


def _message(name, size):
    return (f"The input's {name} must be in [0, {size}) (the vocabulary size), whole "
            "numbers; an id outside it was given. Check the tokenizer matches the model.")


def _check_array(value, name, size):
    ids = np.asarray(keras.ops.convert_to_numpy(value))
    if not ids.size:
        return value
    # NaN compares False with everything: it would pass a range test (float ids cast to
    # an arbitrary row inside the model), so whole numbers are asked for first.
    if np.issubdtype(ids.dtype, np.floating) and not np.all(np.floor(ids) == ids):
        raise ValueError(_message(name, size))
    if ids.min() < 0 or ids.max() >= size:
        raise ValueError(_message(name, size))
    return value


def _check_tensor(tf, value, name, size):
    checks = [tf.debugging.assert_non_negative(value, message=_message(name, size)),
              tf.debugging.assert_less(value, tf.cast(size, value.dtype),
                                       message=_message(name, size))]
    if value.dtype.is_floating:  # NaN fails both range asserts; 2.5 is refused here
        checks.append(tf.debugging.assert_equal(tf.floor(value), value,
                                                message=_message(name, size)))
    with tf.control_dependencies(checks):
        return tf.identity(value)


def _numeric(value):
    """Whether a leaf holds numbers (ids may arrive as floats: they are checked too)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    try:
        dtype = keras.backend.standardize_dtype(dtype)
    except ValueError:  # strings and other non-numeric types
        return False
    return dtype.startswith(("int", "uint", "float", "bfloat"))


def _checker(model, check):
    """`check(value, name, size)` applied to every numeric `*token_ids` leaf; None if no
    table."""
    vocabulary_size = vocabulary_size_of(model)
    # A model whose inputs index several tables names them (CoVe's target words).
    own = dict(getattr(model, "token_id_vocabularies", None) or {})
    if vocabulary_size is None and not own:
        return None

    def walk(value, name=""):
        if isinstance(value, dict):
            return {k: walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(walk(v) for v in value)
        size = own.get(name, vocabulary_size)
        return check(value, name, size) if name.endswith("token_ids") and size and \
            _numeric(value) else value

    return walk


def _checked_batches(iterator, walk):
    for batch in iterator:
        yield walk(batch)


def checked_token_ids(data, model):
    """`data` with every `*token_ids` feature checked against `model`'s vocabulary.

    Each `*token_ids` feature is checked against `vocabulary_size_of(model)`,
    or against the size `model.token_id_vocabularies` gives for its name (a
    model with several tables). Returns a tf.data.Dataset mapped through the
    check, a generator checking each batch, or `data` itself (arrays, checked
    now; an input this function already returned).
    """
    if _is_checked(data):
        return data
    tf = sys.modules.get("tensorflow")  # a tf.data.Dataset exists only once it is imported
    dataset = tf is not None and isinstance(data, tf.data.Dataset)
    walk = _checker(model, (lambda value, name, size: _check_tensor(tf, value, name, size))
                    if dataset else _check_array)
    if walk is None:
        return data
    if dataset:
        checked = data.map(lambda *batch: walk(batch[0]) if len(batch) == 1 else walk(batch))
    elif isinstance(data, keras.utils.PyDataset):  # each batch checked as it is read
        checked = _CheckedPyDataset(data, walk)
    elif hasattr(data, "__next__"):  # a generator or iterator: checked as it is read
        checked = _checked_batches(data, walk)
    else:
        if isinstance(data, (dict, tuple, list, np.ndarray)):
            walk(data)  # raises on an id outside the vocabulary
        return data
    _CHECKED.add(checked)
    return checked


class _CheckedPyDataset(keras.utils.PyDataset):
    """A keras.utils.PyDataset whose batches are checked as they are read (its length,
    workers and epoch hooks are the wrapped one's)."""

    def __init__(self, dataset, walk):
        super().__init__(workers=dataset.workers,
                         use_multiprocessing=dataset.use_multiprocessing,
                         max_queue_size=dataset.max_queue_size)
        self.dataset, self.walk = dataset, walk

    def __len__(self):
        return len(self.dataset)

    @property
    def num_batches(self):
        return self.dataset.num_batches

    def __getitem__(self, index):
        return self.walk(self.dataset[index])

    def on_epoch_begin(self):
        self.dataset.on_epoch_begin()

    def on_epoch_end(self):
        self.dataset.on_epoch_end()


def _is_checked(data):
    try:
        return data in _CHECKED
    except TypeError:  # not weakly referenceable: arrays and structures of them
        return False


class CheckedTokenIds:
    """Mixin for a keras.Model: `fit`, `evaluate`, `predict` and their `*_on_batch` twins
    check the token ids of their data (and of `validation_data`) where it enters a step:
    arrays, tensors, tf.data, generators and keras.utils.PyDataset; integer or float ids.

    A compiled step cannot check in its layers (JAX's gathers fill an out-of-range row
    with NaN, XLA's clamp it), and where the layers do check, Keras' wrapper of a
    layer's error can cut the message (PyTorch): the input is checked here, on every
    backend, compiled or not.
    """

    def _checked(self, data):
        return checked_token_ids(data, self) if data is not None else data

    # Each door checks its data, and a refusal mid-stream leaves the model as it was
    # (on JAX the values live in the step's state during the call: keras_ctx.backend).

    def fit(self, x=None, *args, validation_data=None, **kwargs):
        with backend.state_kept(self):
            return super().fit(self._checked(x), *args,
                               validation_data=self._checked(validation_data), **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        with backend.state_kept(self):
            return super().evaluate(self._checked(x), *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        with backend.state_kept(self):
            return super().predict(self._checked(x), *args, **kwargs)

    def train_on_batch(self, x, *args, **kwargs):
        with backend.state_kept(self):
            return super().train_on_batch(self._checked(x), *args, **kwargs)

    def test_on_batch(self, x, *args, **kwargs):
        with backend.state_kept(self):
            return super().test_on_batch(self._checked(x), *args, **kwargs)

    def predict_on_batch(self, x):
        with backend.state_kept(self):
            return super().predict_on_batch(self._checked(x))

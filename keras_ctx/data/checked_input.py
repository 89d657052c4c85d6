"""Token ids checked where the data enters a compiled step, once per input, on every backend.

XLA compiles asserts away and clamps an out-of-range gather to the last row
(a traced JAX step has no values to check at all): an id past the vocabulary
would train on the wrong vector silently. So the ids are checked where the
data enters `fit`, outside the compiled step: a tf.data.Dataset is mapped
through TensorFlow asserts (as it streams), a Python iterator is wrapped (each
batch checked as it is read, in numpy), arrays are checked at once. The
result is marked: `keras_ctx.training.fit_resumable` and `Pretrainer.fit`
both call `checked_token_ids`, and an input is checked once.
"""

import sys
import weakref

import numpy as np

from keras_ctx.layers.embeddings import vocabulary_size_of

_CHECKED = weakref.WeakSet()  # the datasets and iterators made here


def _message(name, size):
    return (f"The dataset's {name} must be in [0, {size}) (the vocabulary size); an id "
            "outside it was given. Check the tokenizer matches the model.")


def _check_array(value, name, size):
    ids = np.asarray(value)
    if ids.size and (ids.min() < 0 or ids.max() >= size):
        raise ValueError(_message(name, size))
    return value


def _check_tensor(tf, value, name, size):
    checks = [tf.debugging.assert_non_negative(value, message=_message(name, size)),
              tf.debugging.assert_less(value, tf.cast(size, value.dtype),
                                       message=_message(name, size))]
    with tf.control_dependencies(checks):
        return tf.identity(value)


def _checker(model, check):
    """`check(value, name, size)` applied to every integer `*token_ids` leaf; None if no table."""
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
        integer = np.issubdtype(np.dtype(getattr(value.dtype, "as_numpy_dtype", value.dtype)),
                                np.integer)
        return check(value, name, size) if name.endswith("token_ids") and integer and size \
            else value

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
    if tf is not None and isinstance(data, tf.data.Dataset):
        walk = _checker(model, lambda value, name, size: _check_tensor(tf, value, name, size))
        if walk is None:
            return data
        checked = data.map(lambda *batch: walk(batch[0]) if len(batch) == 1 else walk(batch))
    elif hasattr(data, "__next__"):  # a generator or iterator: checked as it is read
        walk = _checker(model, _check_array)
        if walk is None:
            return data
        checked = _checked_batches(data, walk)
    else:
        walk = _checker(model, _check_array)
        if walk is not None and isinstance(data, (dict, tuple, list, np.ndarray)):
            walk(data)  # raises on an id outside the vocabulary
        return data
    _CHECKED.add(checked)
    return checked


def _is_checked(data):
    try:
        return data in _CHECKED
    except TypeError:  # not weakly referenceable: arrays and structures of them
        return False


class CheckedTokenIds:
    """Mixin for a keras.Model: `fit`, `evaluate` and `predict` check the token ids of
    their data (and of `validation_data`) where it enters a compiled step.

    A compiled step cannot check in its layers (JAX's gathers fill an out-of-range row
    with NaN, XLA's clamp it), and where the layers do check, Keras' wrapper of a
    layer's error can cut the message (PyTorch): the input is checked here, on every
    backend, compiled or not.
    """

    def _checked(self, data):
        return checked_token_ids(data, self) if data is not None else data

    def fit(self, x=None, *args, validation_data=None, **kwargs):
        return super().fit(self._checked(x), *args,
                           validation_data=self._checked(validation_data), **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return super().evaluate(self._checked(x), *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        return super().predict(self._checked(x), *args, **kwargs)

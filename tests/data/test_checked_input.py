"""Token ids checked once per input where the data enters a compiled step, on every input kind."""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.data.checked_input import checked_token_ids
from keras_ctx.models import BertBackbone


@pytest.fixture(scope="module")
def backbone():
    return BertBackbone(vocabulary_size=10, num_layers=1, num_heads=1, hidden_size=4,
                        intermediate_size=4, max_sequence_length=4)


def _batch(last_id):
    return {"token_ids": np.array([[1, last_id]], "int32"),
            "padding_mask": np.ones((1, 2), "int32")}


def test_an_iterator_is_checked_as_it_is_read(backbone):
    """A generator (what a JAX fit takes without TensorFlow) raises at the bad batch."""
    checked = checked_token_ids((b for b in (_batch(9), _batch(10))), backbone)
    assert next(checked)["token_ids"][0, 1] == 9
    with pytest.raises(ValueError, match=r"token_ids must be in \[0, 10\)"):
        next(checked)
    with pytest.raises(ValueError, match=r"must be in \[0, 10\)"):
        checked_token_ids(_batch(-1), backbone)


def test_an_input_is_checked_once(backbone):
    """fit_resumable and Pretrainer.fit both pass the data through: the second is a no-op."""
    dataset = tf.data.Dataset.from_tensors(_batch(3)).repeat(2)
    checked = checked_token_ids(dataset, backbone)
    assert checked is not dataset and checked_token_ids(checked, backbone) is checked
    assert [b["token_ids"][0, 1] for b in checked.as_numpy_iterator()] == [3, 3]
    iterator = checked_token_ids(iter([_batch(3)]), backbone)
    assert checked_token_ids(iterator, backbone) is iterator
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be in \[0, 10\)"):
        list(checked_token_ids(tf.data.Dataset.from_tensors(_batch(10)), backbone))

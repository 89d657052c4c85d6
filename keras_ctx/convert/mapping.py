"""Declarative weight maps: (our variable, checkpoint name, transform), both ways.

A converter lists, for each of our variables, the checkpoint tensor that
feeds it and a `Transform` whose `to_ours` maps the checkpoint layout to
ours and whose `to_theirs` is its exact inverse. Loading and exporting are
then the same list read in the two directions, so a round trip
ours -> checkpoint -> ours is exact by construction (and tested).
"""

import warnings

import keras
import numpy as np

from keras_ctx.convert.base import CheckpointError, TensorReader, assign


class Transform:
    """Identity; subclasses change the layout."""

    def to_ours(self, tensor):
        return tensor

    def to_theirs(self, value):
        return value


IDENTITY = Transform()


class Linear(Transform):
    """torch Linear weight (out, in) <-> Keras kernel (in, out)."""

    def to_ours(self, tensor):
        return tensor.T

    def to_theirs(self, value):
        return value.T


LINEAR = Linear()


class HeadsIn(Transform):
    """torch Linear (heads * size, in) <-> EinsumDense kernel (in, heads, size)."""

    def __init__(self, num_heads):
        self.num_heads = num_heads

    def to_ours(self, tensor):
        out_features, in_features = tensor.shape
        return tensor.T.reshape(in_features, self.num_heads, out_features // self.num_heads)

    def to_theirs(self, value):
        return value.reshape(value.shape[0], -1).T


class HeadsBias(Transform):
    """bias (heads * size,) <-> (heads, size)."""

    def __init__(self, num_heads):
        self.num_heads = num_heads

    def to_ours(self, tensor):
        return tensor.reshape(self.num_heads, -1)

    def to_theirs(self, value):
        return value.reshape(-1)


class HeadsOut(Transform):
    """torch Linear (out, heads * size) <-> output kernel (heads, size, out)."""

    def __init__(self, num_heads):
        self.num_heads = num_heads

    def to_ours(self, tensor):
        out_features, in_features = tensor.shape
        return tensor.T.reshape(self.num_heads, in_features // self.num_heads, out_features)

    def to_theirs(self, value):
        return value.reshape(-1, value.shape[-1]).T


class Permute(Transform):
    """A transpose of the axes (and its inverse)."""

    def __init__(self, axes):
        self.axes = tuple(axes)

    def to_ours(self, tensor):
        return np.transpose(tensor, self.axes)

    def to_theirs(self, value):
        return np.transpose(value, np.argsort(self.axes))


class Reshape(Transform):
    """Same values, another shape (e.g. XLNet's mask_emb (1, 1, d) <-> (d,))."""

    def __init__(self, theirs_shape):
        self.theirs_shape = tuple(theirs_shape)

    def to_ours(self, tensor):
        return tensor.reshape(-1)

    def to_theirs(self, value):
        return value.reshape(self.theirs_shape)


class DropRows(Transform):
    """A table whose first `count` rows we never use (RoBERTa's position offset).

    Exported with zero rows in front (the padding row of fairseq's table).
    """

    def __init__(self, count):
        self.count = count

    def to_ours(self, tensor):
        return tensor[self.count:]

    def to_theirs(self, value):
        return np.concatenate([np.zeros((self.count,) + value.shape[1:], value.dtype), value])


class Entry:
    def __init__(self, variable, name, transform=IDENTITY, optional=False):
        self.variable = variable
        self.name = name
        self.transform = transform
        self.optional = optional


def load_weight_map(entries, read):
    """Assigns every entry from `read` (a TensorReader); optional ones may be absent."""
    for entry in entries:
        if entry.optional and not read.has(entry.name):
            warnings.warn(f"The checkpoint has no {entry.name!r}: {entry.variable.path} "
                          "keeps its random initialisation.", stacklevel=3)
            continue
        tensor = read(entry.name)
        shape = tuple(entry.variable.shape)
        try:
            value = entry.transform.to_ours(tensor)
        except ValueError:  # a reshape that cannot fit
            value = None
        if value is None or tuple(value.shape) != shape:
            raise CheckpointError(
                f"{entry.name}: checkpoint shape {tuple(tensor.shape)} does not fit the "
                f"variable {entry.variable.path} of shape {shape} (expected checkpoint "
                f"shape {_expected_shape(entry)})."
            )
        assign(entry.variable, value, entry.name)


def _expected_shape(entry):
    try:
        zeros = np.zeros(tuple(entry.variable.shape), "float32")
        return tuple(entry.transform.to_theirs(zeros).shape)
    except ValueError:
        return "unknown"


def export_weight_map(entries):
    """{checkpoint name: float32 numpy array} for every entry."""
    tensors = {}
    for entry in entries:
        value = np.asarray(keras.ops.convert_to_numpy(entry.variable), dtype="float32")
        tensors[entry.name] = np.ascontiguousarray(entry.transform.to_theirs(value))
    return tensors


def with_tied_copy(tensors, name, copies, prefixes=("",)):
    """`tensors` with `name` filled from the first present tied copy, if missing.

    safetensors files keep one of several tied tensors (e.g. `shared.weight`
    or `encoder.embed_tokens.weight`); converters read the canonical name.
    """
    for prefix in prefixes:
        if prefix + name in tensors:
            return tensors
    for prefix in prefixes:
        for copy in copies:
            if prefix + copy in tensors:
                return dict(tensors, **{prefix + name: tensors[prefix + copy]})
    return tensors


def layer_by_name(model, name):
    for layer in model.layers:
        if layer.name == name:
            return layer
    raise CheckpointError(f"{type(model).__name__} has no layer {name!r}; the converter "
                          "does not match this backbone version.")


def block_entries(block, names, num_heads):
    """Entries of one post-LN TransformerEncoderBlock given the checkpoint's names.

    `names` maps query, key, value, attention_output, attention_norm,
    intermediate, output, output_norm to checkpoint prefixes (Linear weights
    stored torch-style (out, in); norms as weight/bias).
    """
    attention = block.self_attention
    entries = []
    for ours, key in (("query_dense", "query"), ("key_dense", "key"), ("value_dense", "value")):
        dense = getattr(attention, ours)
        entries += [Entry(dense.kernel, names[key] + ".weight", HeadsIn(num_heads)),
                    Entry(dense.bias, names[key] + ".bias", HeadsBias(num_heads))]
    entries += [
        Entry(attention.output_dense.kernel, names["attention_output"] + ".weight",
              HeadsOut(num_heads)),
        Entry(attention.output_dense.bias, names["attention_output"] + ".bias"),
    ]
    entries += norm_entries(block.self_attention_norm, names["attention_norm"])
    entries += dense_entries(block.feedforward.intermediate_dense, names["intermediate"])
    entries += dense_entries(block.feedforward.output_dense, names["output"])
    entries += norm_entries(block.feedforward_norm, names["output_norm"])
    return entries


def norm_entries(layer, prefix):
    return [Entry(layer.gamma, prefix + ".weight"), Entry(layer.beta, prefix + ".bias")]


def dense_entries(layer, prefix, optional=False):
    return [Entry(layer.kernel, prefix + ".weight", LINEAR, optional),
            Entry(layer.bias, prefix + ".bias", IDENTITY, optional)]


class SplitHeadsIn(Transform):
    """A Conv1D-style (in, heads * size) kernel <-> EinsumDense (in, heads, size) (GPT-2)."""

    def __init__(self, num_heads):
        self.num_heads = num_heads

    def to_ours(self, tensor):
        return tensor.reshape(tensor.shape[0], self.num_heads, -1)

    def to_theirs(self, value):
        return value.reshape(value.shape[0], -1)


class SplitHeadsOut(Transform):
    """A Conv1D-style (heads * size, out) kernel <-> output kernel (heads, size, out)."""

    def __init__(self, num_heads):
        self.num_heads = num_heads

    def to_ours(self, tensor):
        return tensor.reshape(self.num_heads, -1, tensor.shape[-1])

    def to_theirs(self, value):
        return value.reshape(-1, value.shape[-1])


def attention_entries(attention, names, num_heads, use_bias=True):
    """Entries of one of our MultiHeadAttention layers from torch Linear q/k/v/o names."""
    entries = []
    for ours, key in (("query_dense", "query"), ("key_dense", "key"), ("value_dense", "value")):
        dense = getattr(attention, ours)
        entries.append(Entry(dense.kernel, names[key] + ".weight", HeadsIn(num_heads)))
        if use_bias:
            entries.append(Entry(dense.bias, names[key] + ".bias", HeadsBias(num_heads)))
    entries.append(Entry(attention.output_dense.kernel, names["output"] + ".weight",
                         HeadsOut(num_heads)))
    if use_bias:
        entries.append(Entry(attention.output_dense.bias, names["output"] + ".bias"))
    return entries


def rms_norm_entries(layer, name):
    return [Entry(layer.gamma if hasattr(layer, "gamma") else layer.scale, name)]


def load_checkpoint(entries, tensors, prefixes=("",), ignore=()):
    """Fills every entry from a checkpoint's tensors, then insists each tensor was used.

    `prefixes` are the model prefixes the names may carry ("bert." ...);
    `ignore` lists regular expressions of whole tensor names known to have no place
    (buffers, heads).
    """
    read = TensorReader(tensors, prefixes=prefixes)
    load_weight_map(entries, read)
    read.check_all_used(ignore=ignore)

"""ONNX through Keras' `model.export(format="onnx")` (the torch backend's converter).

The forward pass is `flat_outputs` of the model (the SavedModel's output names, a
list output stacked on axis 1) in a small Keras model that returns them as a tuple
in name order; Keras exports it at the fixed shapes of `input_specs`. torch.onnx
names the file's outputs after the ops that made them ("stack", "tanh"), so each
gets an Identity under its SavedModel name, and every `*token_ids` input passes the
out-of-range guard of the tf2onnx path: a Gather named `<input>_out_of_range`
that fails in ONNX Runtime where an id is outside [0, V) (ONNX's Gather reads -1
as the last row).
"""

import keras
import numpy as np

from keras_ctx.export.saved_model import named_inputs, served_outputs

class _Served(keras.Model):
    """`model`'s `flat_outputs` as a tuple, in the order of `names` (sorted)."""

    def __init__(self, model, names):
        super().__init__(name=f"{model.name}_onnx")
        self.served, self.names = model, names

    def call(self, inputs):
        outputs = served_outputs(self.served, inputs)
        return tuple(outputs[name] for name in self.names)


def write(model, path, batch_size, sequence_length, opset, vocabulary_size):
    """Writes `model`'s forward pass at (batch_size, sequence_length) to `path`."""
    import onnx

    named = named_inputs(model)
    specs = {}
    for name, tensor in named.items():
        shape = [batch_size] + list(tensor.shape[1:])
        if len(shape) >= 2:
            shape[1] = sequence_length
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        dtype = "int32" if "int" in dtype or dtype == "bool" else dtype
        specs[name] = keras.InputSpec(shape=tuple(shape), dtype=dtype, name=name)
    sample = {name: np.zeros(spec.shape, spec.dtype) for name, spec in specs.items()}
    names = sorted(served_outputs(model, sample))
    served = _Served(model, names)
    served.export(path, format="onnx", input_signature=[specs], opset_version=opset,
                  verbose=False)
    proto = onnx.load(path)
    _name_outputs(proto.graph, names)
    for name in sorted(specs):
        if name.endswith("token_ids") and vocabulary_size is not None:
            _guard(proto.graph, name, vocabulary_size)
    onnx.checker.check_model(proto)
    onnx.save(proto, path)


def _name_outputs(graph, names):
    """Each output of `graph` (in `names`' order) renamed to its name by an Identity."""
    from onnx import helper

    for output, name in zip(graph.output, names):
        graph.node.append(helper.make_node("Identity", [output.name], [name],
                                           name=f"{name}_output"))
        output.name = name


def _guard(graph, name, vocabulary_size):
    """Every reader of input `name` reads it through a Gather that fails outside [0, V)."""
    from onnx import helper, numpy_helper

    def constant(suffix, value):
        tensor = numpy_helper.from_array(np.asarray(value, np.int32), f"{name}_{suffix}")
        graph.initializer.append(tensor)
        return tensor.name

    guarded = f"{name}_guarded"
    for node in graph.node:
        for i, read in enumerate(node.input):
            if read == name:
                node.input[i] = guarded
    zero, size = constant("zero", 0), constant("size", vocabulary_size)
    nodes = [
        helper.make_node("Less", [name, zero], [f"{name}_negative"]),
        helper.make_node("GreaterOrEqual", [name, size], [f"{name}_too_large"]),
        helper.make_node("Or", [f"{name}_negative", f"{name}_too_large"], [f"{name}_bad"]),
        # An index past the one-element table: ONNX Runtime refuses it, naming the node.
        helper.make_node("Where", [f"{name}_bad", constant("past", 2**31 - 1), zero],
                         [f"{name}_index"]),
        helper.make_node("Gather", [constant("table", [0]), f"{name}_index"],
                         [f"{name}_zeros"], name=f"{name}_out_of_range"),
        helper.make_node("Add", [name, f"{name}_zeros"], [guarded]),
    ]
    nodes += list(graph.node)  # first: a graph's nodes are in the order they run
    del graph.node[:]
    graph.node.extend(nodes)

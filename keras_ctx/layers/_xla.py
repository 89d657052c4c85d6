"""XLA for the layers: whether XLA compiles the trace, and a barrier it keeps."""

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import control_flow_util


def in_xla_compilation():
    """True while tracing a function that XLA compiles (`jit_compile=True`)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph())


def optimization_barrier(tensor):
    """`tensor`, which XLA must compute into a buffer of its own (no fusion across it).

    Only valid inside XLA compilation.
    """
    from tensorflow.compiler.tf2xla.python import xla

    (result,) = xla.optimization_barrier(tensor)
    return result


def _barrier_gradient(op, *upstream):
    """The barrier is the identity: so is its gradient (second-order gradients need it)."""
    return list(upstream)


try:
    tf.RegisterGradient("XlaOptimizationBarrier")(_barrier_gradient)
except KeyError:  # registered already (by TensorFlow, or an earlier import)
    pass

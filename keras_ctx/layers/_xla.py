"""What the layers need to know about XLA: whether they are being compiled by it."""

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

"""XLA for the layers on TensorFlow (`tf_ops`): whether XLA compiles the trace, and for which device.

The layers' XLA:CPU rewrites (products with ones for column sums, custom
weight-gradient products, optimization barriers; layers/dense.py,
normalization.py, embeddings.py) pay on XLA:CPU only: on GPU and TPU, XLA
fuses these reductions well and a barrier only blocks fusion. `cpu_rewrites()`
decides, at trace time, whether they apply.
"""

import contextlib

import tensorflow as tf

from keras_ctx.common import compat

_ACCELERATORS = ("TPU", "GPU")
_forced = []  # a stack of device types set by `compiled_for`


def in_xla_compilation():
    """True while tracing a function that XLA compiles (`jit_compile=True`)."""
    return compat.in_xla_context(tf.compat.v1.get_default_graph())


@contextlib.contextmanager
def compiled_for(device_type):
    """Traces inside the block take `device_type` ("CPU", "GPU" or "TPU") as their device.

    For tests, and for tracing on one machine a step meant for another.

    Example:
    >>> with compiled_for("GPU"):
    ...     model.compile(jit_compile=True); model.fit(...)   # Keras' own layer math
    """
    device_type = str(device_type).upper()
    if device_type not in ("CPU",) + _ACCELERATORS:
        raise ValueError(f"`device_type` must be 'CPU', 'GPU' or 'TPU', got {device_type!r}.")
    _forced.append(device_type)
    try:
        yield
    finally:
        _forced.pop()


def _device_types(devices):
    return {tf.DeviceSpec.from_string(d).device_type for d in devices if d}


def compiled_device_type():
    """The device type ("CPU", "GPU" or "TPU") the op being traced will run on.

    In order: `compiled_for`; the innermost `tf.device` scope of the trace
    (a MirroredStrategy replica, OneDeviceStrategy, a user's scope); the
    distribution strategy's devices; else where TensorFlow places an op
    without a scope: a TPU or GPU if one is visible, else the CPU.
    """
    if _forced:
        return _forced[-1]
    graph = tf.compat.v1.get_default_graph()
    if not tf.executing_eagerly():
        # The device an op created here is given by the enclosing scopes (the op
        # itself is unused; TensorFlow prunes it).
        with graph.as_default():
            scoped = _device_types([tf.raw_ops.NoOp(name="device_probe").device])
        if scoped - {None}:
            return sorted(scoped - {None})[0]
    if tf.distribute.has_strategy():
        types = _device_types(tf.distribute.get_strategy().extended.worker_devices)
        for kind in _ACCELERATORS:
            if kind in types:
                return kind
        if "CPU" in types:
            return "CPU"
    for kind in _ACCELERATORS:
        if tf.config.list_logical_devices(kind):
            return kind
    return "CPU"


def cpu_rewrites():
    """True while tracing a function that XLA compiles for a CPU: the rewrites apply."""
    return bool(in_xla_compilation()) and compiled_device_type() == "CPU"


def optimization_barrier(tensor):
    """`tensor`, which XLA must compute into a buffer of its own (no fusion across it).

    Only valid inside XLA compilation.
    """
    return compat.optimization_barrier(tensor)


def _barrier_gradient(op, *upstream):
    """The barrier is the identity: so is its gradient (second-order gradients need it)."""
    return list(upstream)


try:
    tf.RegisterGradient("XlaOptimizationBarrier")(_barrier_gradient)
except KeyError:  # registered already (by TensorFlow, or an earlier import)
    pass

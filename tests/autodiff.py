"""Gradients on whichever Keras backend runs the tests, through that backend's own autodiff
(tf.GradientTape, jax.value_and_grad over a keras.StatelessScope, torch.autograd), so a
test of gradients runs unchanged under KERAS_BACKEND=tensorflow, jax and torch."""

import keras
import numpy as np


def _numpy(x):
    if x is None:
        return None
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if isinstance(x, tf.IndexedSlices):
            x = tf.convert_to_tensor(x)
    return keras.ops.convert_to_numpy(x)


def value_and_gradients(loss_fn, inputs=(), variables=(), compiled=False, with_outputs=False):
    """`loss_fn(*inputs)` (a scalar) and its gradients with respect to `inputs` (arrays) and
    `variables` (Keras variables the function reads), as NumPy: `(loss, [d/dinput], [d/dvar])`.
    A gradient that does not reach the loss is None. `compiled` traces the function as the
    backend compiles a step (TensorFlow: `tf.function(jit_compile=True)`, JAX: `jax.jit`;
    PyTorch runs it eagerly, as Keras' torch trainer does by default). With `with_outputs`,
    `loss_fn` returns `(loss, outputs)` and the outputs (a list of tensors, computed in the
    same trace) come back last, as NumPy."""
    backend = keras.backend.backend()
    variables = list(variables)
    if backend == "tensorflow":
        import tensorflow as tf

        def run(xs):
            with tf.GradientTape() as tape:
                tape.watch(xs)
                loss, outputs = _split(loss_fn(*xs), with_outputs)
            grads = tape.gradient(loss, list(xs) + [v.value for v in variables])
            return loss, grads, outputs

        if compiled:
            run = tf.function(run, jit_compile=True)
        loss, grads, outputs = run([tf.convert_to_tensor(x) for x in inputs])
    elif backend == "jax":
        import jax

        xs = [jax.numpy.asarray(x) for x in inputs]
        floats = [i for i, x in enumerate(xs) if jax.numpy.issubdtype(x.dtype, jax.numpy.floating)]

        def run(float_xs, values):
            given = list(xs)
            for i, x in zip(floats, float_xs):
                given[i] = x
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return _split(loss_fn(*given), with_outputs)

        step = jax.value_and_grad(run, argnums=(0, 1), has_aux=True)
        if compiled:
            step = jax.jit(step)
        (loss, outputs), (float_grads, variable_grads) = step([xs[i] for i in floats],
                                                   [v.value for v in variables])
        input_grads = [None] * len(xs)
        for i, g in zip(floats, float_grads):
            input_grads[i] = g
        grads = input_grads + list(variable_grads)
    elif backend == "torch":
        import torch

        xs = [torch.tensor(np.asarray(x), requires_grad=np.asarray(x).dtype.kind == "f")
              for x in inputs]
        loss, outputs = _split(loss_fn(*xs), with_outputs)
        wrt = xs + [v.value for v in variables]
        # A tensor that does not require grad (an integer input, a non-trainable variable)
        # gets None, as TensorFlow's tape gives a tensor the loss does not reach.
        asked = [t for t in wrt if t.requires_grad] if loss.requires_grad else []
        found = iter(torch.autograd.grad(loss, asked, allow_unused=True) if asked else ())
        grads = [next(found) if asked and t.requires_grad else None for t in wrt]
    else:
        raise ValueError(f"no autodiff for backend {backend!r}")
    grads = [_numpy(g) for g in grads]
    result = (_numpy(loss), grads[:len(inputs)], grads[len(inputs):])
    return result + ([_numpy(o) for o in outputs],) if with_outputs else result


def no_gradient(gradient):
    """Whether a gradient from `value_and_gradients` says the loss does not reach its tensor:
    None on TensorFlow and torch; JAX has no "unconnected" and gives zeros."""
    if keras.backend.backend() == "jax":
        return gradient is None or not np.any(gradient)
    return gradient is None


def _split(result, with_outputs):
    return (result[0], list(result[1])) if with_outputs else (result, [])


def compiled(fn):
    """`fn` traced as the backend compiles a step: TensorFlow's XLA through
    `tf.function(jit_compile=True)`, `jax.jit`; on PyTorch `fn` itself (eager). Build the
    layers `fn` calls first: JAX cannot create variables inside a trace."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    return fn


def run_compiled(fn, *args):
    """`compiled(fn)(*args)`, as NumPy."""
    return keras.tree.map_structure(_numpy, compiled(fn)(*args))

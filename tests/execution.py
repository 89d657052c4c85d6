"""How a test runs a few steps of a tiny model: the cheapest execution on the running backend.

A test whose subject is a step's numbers, not how the step runs, compiles with
`model.compile(..., **FEW_STEPS)` and decodes with `generate(..., jit_compile=DECODE)`; one
that runs many steps (fit over epochs) takes Keras' "auto" (a TF graph on a CPU, jax.jit on
JAX, eager on torch). A test whose subject is one execution (XLA against a TF graph,
`jit_compile=False` itself) names it. The one branch on the backend for this lives here
(measured on 2 CPU cores, single tests):

- TensorFlow: a step eagerly: tracing it costs more than running a few (CVT's two-update
  step took 50 s to trace). Decoding as a TF graph, as "auto" does on a CPU for one row
  (XLA compiles a loop over two rows in tens of seconds).
- JAX: one `jax.jit` per step and per decode loop. Eagerly JAX compiles every distinct
  operation with XLA on its own: CVT's eager step compiled 464 programs (its test 92 s
  against 35 s jitted, on a loaded machine). Not where a test's own eager calls already
  compiled its step's ops (test_from_checkpoint's AdamW step after its eager gradients,
  test_adapters' four MAD-X cases; jitted they measured no faster): those stay eager, as
  does test_generation's one-row loop that `stream` is compared with (18 s, jitted 26 s).
- PyTorch: Keras' "auto", eager (conftest turns torch.compile off); the decode loop runs
  eagerly whatever `jit_compile` says.

A reference forward pass called on a few shapes goes through `few_calls`: one jax.jit per
shape on JAX, as it is on TensorFlow and torch (their eager ops compile nothing).
"""

import keras

_BACKEND = keras.backend.backend()

FEW_STEPS = {"tensorflow": {"run_eagerly": True},
             "jax": {"jit_compile": True}}.get(_BACKEND, {})
DECODE = _BACKEND == "jax"
# `tests.autodiff.value_and_gradients(..., compiled=GRADIENTS)` where a test's subject is
# which weights a loss reaches or what its gradients are, not how they run: one jax.jit on
# JAX (its eager autodiff compiled each op on its own); TensorFlow's tape and torch's
# autograd eagerly (XLA would compile on TensorFlow).
GRADIENTS = _BACKEND == "jax"


def few_calls(function):
    """`function` (arrays -> arrays, the model's weights fixed from the first call on: JAX
    compiles them in as constants) as the cheapest to call on a few shapes."""
    if _BACKEND == "jax":
        import jax

        return jax.jit(function)
    return function

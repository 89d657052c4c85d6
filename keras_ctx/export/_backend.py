"""The export package's one backend switch: how the model's forward pass enters the
SavedModel's TensorFlow graph.

TensorFlow: the model runs in the serving graph itself (XLA-compiled on
request). JAX: Keras' ExportArchive converts it with jax2tf (its own XLA
module in the graph), and the input checks, `parse_example` and the
preprocessor stay TensorFlow ops around it. Decoding (`serve_generate`) and a
free sequence length are exported from TensorFlow only.
"""

import keras

from keras_ctx.common.optional import tensorflow as tf

BACKEND = keras.backend.backend()


def check_token_ids(token_ids, vocabulary_size, name):
    """The serving graph's id check: TensorFlow ops on every backend (imported when used:
    `import keras_ctx` needs no TensorFlow)."""
    from keras_ctx.layers import _tensorflow

    return _tensorflow.check_token_ids(token_ids, vocabulary_size, name)


def compiled(forward, jit_compile):
    """`forward`, XLA-compiled on TensorFlow when asked (jax2tf compiles it on JAX)."""
    if BACKEND == "tensorflow" and jit_compile:
        return tf.function(forward, jit_compile=True)
    return forward


def served(archive, forward, specs):
    """A TensorFlow-callable `forward` (inputs in `specs`' dtypes -> outputs) for `archive`.

    On JAX it is the jax2tf conversion, registered as the archive's `forward`
    endpoint (the signature of the cast inputs, without the serving checks).
    """
    if BACKEND == "tensorflow":
        return forward
    return archive.add_endpoint("forward", forward, input_signature=[specs])


def add_endpoint(archive, name, serve, input_signature):
    """`archive.add_endpoint`: on JAX, `serve` (TensorFlow ops around `served`'s forward)
    is traced as a tf.function first, so that the archive keeps it, not jax2tf."""
    if BACKEND != "tensorflow":
        serve = tf.function(serve, input_signature=input_signature, autograph=False)
        serve.get_concrete_function()
        input_signature = None
    return archive.add_endpoint(name, serve, input_signature=input_signature)


def refusal(specs, generation):
    """The one-line reason this backend cannot export as asked, else None."""
    if BACKEND == "tensorflow":
        return None
    if BACKEND != "jax":
        return (f"SavedModel export runs on the TensorFlow or JAX backend, not {BACKEND!r}; "
                "set KERAS_BACKEND=tensorflow (or jax) to export.")
    if generation is not None:
        return ("`generation` (serve_generate) is exported from TensorFlow only: save the "
                "weights, then export with KERAS_BACKEND=tensorflow.")
    if any(spec.shape.rank >= 2 and spec.shape[1] is None for spec in specs.values()):
        # jax2tf traces the length symbolically, and slicing a position table by it
        # compares symbolic sizes.
        return ("On JAX the served sequence length is fixed: pass sequence_length=N "
                "(--sequence-length N), or export with KERAS_BACKEND=tensorflow for a free one.")
    return None

"""Generation on JAX: seeded draws, and `jax.jit` over the weights' values."""

import jax
import keras


def categorical(logits, seed, step):
    """One draw per row from softmax(logits), seeded by (seed, step)."""
    key = jax.random.fold_in(jax.random.key(seed), step)
    return jax.random.categorical(key, logits, axis=-1).astype("int32")


def keep_shapes(new, old):
    return new  # JAX's shapes are static


def auto_jit_compile(rows, float32_weights):
    return True  # the loop is one XLA loop either way; jit adds the prefill and sampler


def compile_function(backbone, function, jit_compile):
    """`function(*arrays)`; with `jit_compile`, one `jax.jit` whose arguments include
    the backbone's variable values (read in a StatelessScope, not baked in as
    constants: a later weight update is seen without recompiling)."""
    if not jit_compile:
        return function
    variables = list(backbone.variables)

    @jax.jit
    def compiled(values, *arguments):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*arguments)

    def run(*arguments):
        return compiled([variable.value for variable in variables], *arguments)

    return run

"""keras_ctx on Keras' PyTorch backend (keras_ctx.backend's names; see its docstring).

The layers: `keras_ops` (keras.ops only). The Pretrainer's step as Keras'
guide "Customizing what happens in fit() with PyTorch" writes one: clear the
gradients, forward, `loss.backward()`, `optimizer.apply` under `no_grad`.
Weights the loss does not reach keep a `None` gradient (RoBERTa's pooler, the
CVT modules a minibatch does not use), and the optimizer leaves them and their
slots alone, as on TensorFlow. One process trains on one device: Keras'
distribution API (DataParallel) is JAX's. Generation runs eagerly, its draws seeded
by a torch.Generator; SavedModel export is TensorFlow's and JAX's, ONNX export is
Keras' `model.export(format="onnx")` (torch.onnx's exporter), at fixed shapes.
"""

import contextlib
import types

import torch
from keras import ops

from keras_ctx.backend import keras_ops
from keras_ctx.common import compat
from keras_ctx.backend.keras_ops import (  # noqa: F401  (the backend's names)
    cudnn_lstm,
    decay_weights,
    flat_cross_entropy,
    fused_attention,
    gpu_available,
    recurrence,
    scan_states,
    summed_rows,
    take_rows,
    update_positions,
)


def has_values(tensor):
    """False while Keras builds a model symbolically (its placeholder tensors live on
    torch's "meta" device, or, where a layer cannot run there, on the CPU uninitialised:
    their values are garbage) or torch.compile traces it."""
    if not isinstance(tensor, torch.Tensor):
        return True
    return not (tensor.is_meta or compat.in_symbolic_scope()
                or torch.compiler.is_compiling())


check_token_ids, check_at_most = keras_ops.value_checks(has_values)


def dropout(inputs, rate, seed_generator):
    """Dropout whose mask is drawn from `seed_generator`'s state, as on TensorFlow and JAX.

    Keras' torch dropout draws from torch's global generator when the layer's seed is
    None (every keras_ctx model's): a checkpoint, which saves the seed generators' state
    (training.Checkpointer), then resumed with other masks than a run never stopped.
    """
    if inputs.is_meta:  # Keras' symbolic build: no values, no draw
        return inputs
    first, second = (int(s) for s in ops.convert_to_numpy(seed_generator.next()))
    generator = torch.Generator(device=inputs.device)
    generator.manual_seed((first + second) & 0xFFFFFFFF)
    keep = torch.empty_like(inputs).bernoulli_(1.0 - rate, generator=generator)
    return inputs * keep / (1.0 - rate)


# -- the Pretrainer (keras_ctx.pretraining) ----------------------------------------------


def make_strategy(name, batch_size=None):
    """`--strategy default` only: data parallel training is TensorFlow's and JAX's here."""
    if name != "default":
        raise ValueError(
            f"--strategy {name} is not available on the torch backend (Keras' distribution "
            "API is JAX's): train on one device, or use --backend jax or tensorflow for "
            "data parallel training.")
    return types.SimpleNamespace(scope=contextlib.nullcontext)


def num_replicas():
    """1: one process, one device."""
    return 1


def replicas_mean(total):
    return total


def replica_rows(value, rows, axis):
    """A copy of `value` (the carried state's rows: one replica holds them all): the step
    then assigns the carried variable in place, which would change what autograd kept."""
    return ops.copy(value)


def gathered_rows(value, axis):
    return value


class PretrainerStep(keras_ops.BuiltFromSpec):
    """The Pretrainer's `train_step(data)` / `test_step(data)` on PyTorch."""

    def train_step(self, data):
        for batch in self.step_batches(self.unpack_batch(data)):
            results = self._update(batch)
        return results

    def _update(self, batch):
        self.zero_grad()  # torch.nn.Module's: gradients of the last step set to None
        total = self.total_loss(self.compute_losses(batch, training=True))
        self.optimizer.scale_loss(total).backward()
        variables = self.step_variables(batch)
        if not self.optimizer.built:
            # Every trainable variable, as on the other backends: subsets (ELECTRA's
            # stages, CVT) share one optimizer and its checkpoint.
            self.optimizer.build(self.trainable_variables)
        used = [(v.value.grad, v) for v in variables if v.value.grad is not None]
        with torch.no_grad():
            self.optimizer.apply([g for g, _ in used], [v for _, v in used])
        return self._results(total)

    def test_step(self, data):
        return self._results(self.total_loss(self.evaluation_losses(self.unpack_batch(data))))

    def _results(self, total):
        self.loss_tracker.update_state(ops.stop_gradient(total))
        return {m.name: m.result() for m in self.metrics}


def state_kept(model):
    """Nothing to keep: the variables hold their values through a refused call."""
    return contextlib.nullcontext()


# -- the tasks (keras_ctx.tasks) ---------------------------------------------------------


class TaskStep:
    """Keras' own train step: the optimizer applies to the weights trainable now, any
    subset of those it was built with."""


def check_unfreezing(model):
    """Every model's step follows a changing trainable set here."""


STRINGS_REFUSAL = None  # tokenized in tf.data maps, outside the step (as on JAX)


# -- generation (keras_ctx.generation) ---------------------------------------------------


def categorical(logits, seed, step):
    """One draw per row from softmax(logits), seeded by (seed, step): a torch.Generator
    (Keras' torch draws take an integer seed only; the loop is eager, so both are values)."""
    logits = torch.as_tensor(logits)
    generator = torch.Generator(device=logits.device)
    generator.manual_seed(int(seed) * 1_000_003 + int(step))
    probabilities = torch.softmax(logits.float(), dim=-1)
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0].to(torch.int32)


def keep_shapes(new, old):
    return new


def auto_jit_compile(rows, float32_weights):
    return False  # the decode loop runs eagerly


def compile_function(backbone, function, jit_compile):
    """`function` as it is: generation runs eagerly on torch (no grad)."""

    def run(*arguments):
        with torch.no_grad():
            return function(*arguments)

    return run


# -- export (keras_ctx.export) -----------------------------------------------------------


def export_refusal(specs, generation):
    return ("SavedModel export runs on the TensorFlow or JAX backend, not torch: save the "
            "weights, then export with KERAS_BACKEND=tensorflow (or jax).")


def compiled_forward(forward, jit_compile):
    return forward


def served_forward(archive, forward, specs):
    raise RuntimeError(export_refusal(specs, None))


def add_endpoint(archive, name, serve, input_signature):
    raise RuntimeError(export_refusal(input_signature, None))


def preprocessed(preprocessor, text):
    raise RuntimeError(export_refusal({}, None))


# Keras' ONNX export on torch traces fixed shapes with torch.onnx's dynamo exporter; with a
# free axis it takes the TorchScript exporter, which cannot export Keras' own
# layer_normalization (its broadcast shape is read from the traced input: "Failed to export
# a node ... because it is not constant", Keras 3.15.1, torch 2.13).
ONNX_CONVERTER = "model.export"


def onnx_refusal(model, batch_size, sequence_length):
    """The one-line reason `model` cannot be exported to ONNX from torch as asked, else None."""
    if batch_size is None or sequence_length is None:
        return ("On torch, Keras' ONNX export fixes the input shapes: pass batch_size=B and "
                "sequence_length=N, or export from KERAS_BACKEND=tensorflow (tf2onnx) for a "
                "free batch and length.")
    if model.compute_dtype != "float32":
        # Keras' export documents float32 only; a bfloat16 Einsum is a file ONNX Runtime
        # refuses to load ("Type 'tensor(bfloat16)' ... of operator (Einsum) is invalid").
        return (f"Keras' ONNX export on torch takes a float32 model, and {model.name!r} "
                f"computes in {model.compute_dtype} ({model.dtype_policy.name}): build it "
                "under the float32 policy, load its weights, then export.")
    return None

"""Every objective's first step on the backend this process runs, for the cross-backend matrix.

The objectives and batches are `matrix_cases.CASES` (the TensorFlow matrix's).
`first_step` runs the same way on every backend: build, set the trainable
weights, one SGD step through `fit`, read the weights back. The test process
(TensorFlow) saves each case's starting weights; run as a module with
KERAS_BACKEND=jax, this file starts from them and writes its updates:

    python -m tests.pretraining.backend_cases IN.npz OUT.npz NAME... [--policies
        float32,mixed_bfloat16] [--devices 2]

With `--devices N` (XLA_FLAGS=--xla_force_host_platform_device_count=N set by
the caller) each case also runs under keras.distribution.DataParallel.
"""

import contextlib
import json

import keras
import numpy as np

from keras_ctx.common import compat
from tests.pretraining.matrix_cases import CASES

# Random draws differ between backends by design: the sampled-softmax candidates.
RANDOM = ("bilm_sampled_softmax",)
# Carried state after two steps at learning rate 0: (case, the carried variable).
CARRIED = {"xlnet": lambda model: model.memory, "awd_lstm_lm_carried": lambda model: model.state}
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def _batches(batch, steps):
    # A generator of numpy structures: what a JAX fit takes without TensorFlow.
    for _ in range(steps):
        yield batch if isinstance(batch, tuple) else (batch,)


def first_step(name, initial=None, dtype_policy="float32", learning_rate=0.1, steps=1,
               distribution=None):
    """`steps` SGD steps of case `name` from `initial` weights (arrays) or its own.

    Returns {"initial": `model.weights` before, "update": the trainable
    variables' flat float64 change,
    "loss": the `loss` metric, "carried": the carried variable after (or None)}.
    """
    make, make_batch = CASES[name]
    batch = make_batch()
    keras.utils.set_random_seed(0)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    try:
        with distribution.scope() if distribution else contextlib.nullcontext():
            model = make()
            model.compile(optimizer=keras.optimizers.SGD(learning_rate))
            compat.resolve("symbolic_build")(
                model, data_batch=batch if isinstance(batch, tuple) else (batch,))
    finally:
        keras.config.set_dtype_policy(previous)
    # Every weight, frozen ones included (MAD-X trains only its adapters).
    weights, variables = model.weights, model.trainable_variables
    if initial is not None:
        shapes = [tuple(w.shape) for w in weights], [w.shape for w in initial]
        assert shapes[0] == shapes[1], f"{name}: the weights differ by backend"
        for weight, value in zip(weights, initial):
            weight.assign(value)
    start = [keras.ops.convert_to_numpy(w) for w in weights]
    before = [keras.ops.convert_to_numpy(v).astype("float32") for v in variables]
    with distribution.scope() if distribution else contextlib.nullcontext():
        history = model.fit(_batches(batch, steps), steps_per_epoch=steps, epochs=1,
                            verbose=0, shuffle=False)
    after = [keras.ops.convert_to_numpy(v).astype("float64") for v in variables]
    carried = CARRIED[name](model) if name in CARRIED and steps > 1 else None
    return {"initial": start,
            "update": np.concatenate([(a - b).ravel() for a, b in zip(after, before)]),
            "loss": float(history.history["loss"][-1]),
            "carried": None if carried is None else keras.ops.convert_to_numpy(carried),
            "type": type(model).__name__}


def measures(name, initial, policies=("float32",), devices=1, carried_initial=None):
    """This backend's numbers for case `name`: {policy or "data_parallel" or "carried": array}."""
    out = {policy: first_step(name, initial, dtype_policy=policy)["update"]
           for policy in policies}
    if devices > 1:
        import jax

        data_parallel = keras.distribution.DataParallel(devices=jax.devices()[:devices])
        out["data_parallel"] = first_step(name, initial, distribution=data_parallel)["update"]
    if carried_initial is not None:
        out["carried"] = first_step(name, carried_initial, learning_rate=0.0,
                                    steps=2)["carried"]
    return out


def main():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("names", nargs="+")
    parser.add_argument("--policies", default="float32")
    parser.add_argument("--devices", type=int, default=1)
    args = parser.parse_args()
    saved = np.load(args.source)

    def weights(prefix):
        count = sum(key.startswith(prefix + "/") for key in saved.files)
        return [saved[f"{prefix}/{i}"] for i in range(count)] if count else None

    out = {}
    for name in args.names:
        numbers = measures(name, weights(f"{name}/initial"), args.policies.split(","),
                           args.devices, weights(f"{name}/carried_initial"))
        out.update({f"{name}/{key}": value for key, value in numbers.items()})
    np.savez(args.target, **out)
    print(json.dumps({"backend": keras.backend.backend(), "cases": args.names}))


if __name__ == "__main__":
    main()

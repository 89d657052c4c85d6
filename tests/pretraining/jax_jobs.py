"""Pretraining jobs `tests.backends.run_on_backend` runs on JAX (test_jax_training.py reads them).

`learning`: objectives fit on numpy arrays and on Python iterators, under each
precision, with TensorFlow unimportable; `resume`: `fit_resumable` interrupted
and resumed against one uninterrupted run (tf.data input, dropout on).
"""

import numpy as np

from tests.pretraining.matrix_cases import CASES

# (case, dtype policy, how the batches arrive): every precision and both numpy feeds.
LEARNING = (("bert", "mixed_bfloat16", "arrays"), ("bert", "mixed_float16", "iterator"),
            ("t5", "mixed_bfloat16", "iterator"), ("causal_lm", "float32", "arrays"))


def _start_keeper():
    """A callback that keeps the weights' and the optimizer's values at the start of a fit
    (both are built by then), and `restore()` to put them back."""
    import keras

    class Start(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            if not hasattr(self, "values"):
                self.values = [(v, keras.ops.convert_to_numpy(v))
                               for v in self.model.weights + self.model.optimizer.variables]

        def restore(self):
            for variable, value in self.values:
                variable.assign(value)

    return Start()


def _losses(name, policy, feed, learning_rate, steps):
    """The `loss` metric after each of `steps` AdamW steps on case `name`'s one batch, at
    learning rate 0 ("frozen") and `learning_rate` ("trained").

    One model and one compiled step (the learning rate is an optimizer variable): the
    frozen fit first, then the weights and optimizer state it started from are put back
    and the trained fit starts from them, as a new model would (on JAX one XLA compile
    instead of two).
    """
    import keras

    make, make_batch = CASES[name]
    batch = make_batch()
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy(policy)
    try:
        model = make()
    finally:
        keras.config.set_dtype_policy("float32")
    model.compile(optimizer=keras.optimizers.AdamW(0.0))
    start = _start_keeper()

    def fit(callbacks):
        if feed == "arrays":  # the whole batch per step, one step per epoch
            rows = len(next(iter(batch.values())))
            return model.fit(batch, batch_size=rows, epochs=steps, shuffle=False, verbose=0,
                             callbacks=callbacks)

        def batches():
            while True:
                yield batch if isinstance(batch, tuple) else (batch,)

        return model.fit(batches(), steps_per_epoch=1, epochs=steps, shuffle=False,
                         verbose=0, callbacks=callbacks)

    frozen = np.array(fit([start]).history["loss"])
    start.restore()
    model.optimizer.learning_rate = learning_rate
    return {"frozen": frozen, "trained": np.array(fit([]).history["loss"])}


def learning(out, steps):
    """{f"{case}/{policy}/{feed}/{trained|frozen}": losses}: learning rate 3e-3 and 0."""
    arrays = {}
    for name, policy, feed in LEARNING:
        for kind, losses in _losses(name, policy, feed, 3e-3, steps).items():
            arrays[f"{name}/{policy}/{feed}/{kind}"] = losses
    np.savez(out, **arrays)


def _bert_run(directory, steps):
    """A tiny BERT pretrainer (dropout 0.1) through `fit_resumable` up to `steps`."""
    import keras
    import tensorflow as tf

    from keras_ctx.models import BertBackbone
    from keras_ctx.pretraining import BertPretrainer
    from keras_ctx.training import fit_resumable
    from tests.pretraining.matrix_cases import _mlm_batch

    keras.utils.set_random_seed(0)
    model = BertPretrainer(BertBackbone(vocabulary_size=40, num_layers=1, num_heads=2,
                                        hidden_size=16, intermediate_size=32,
                                        max_sequence_length=16, dropout=0.1))
    model.compile(optimizer=keras.optimizers.AdamW(1e-2))
    # Four different batches, repeated: a resume must skip the ones it consumed.
    batches = [_mlm_batch(seed, "next_sentence_labels") for seed in range(4)]
    dataset = tf.data.Dataset.from_tensor_slices(
        {key: np.stack([b[key] for b in batches]) for key in batches[0]}).repeat()
    fit_resumable(model, dataset, steps, directory, checkpoint_every=2, verbose=0)
    return model


def _prepared_run(corpus, directory, steps):
    """`keras-ctx prepare` once, then `pretrain --data` to `steps` (resuming what is there)."""
    import os

    from keras_ctx.cli import main
    from tests.cli_helpers import TINY

    data = f"{directory}/prepared"
    if not os.path.isdir(data):
        assert main(["prepare", "bert-tiny", "--corpus", corpus, "--out", data,
                     "--sequence-length", "32", "--vocabulary-size", "200", "--workers", "1",
                     "--duplicate", "1"]) == 0
    flags = [f for f in TINY if f not in ("--vocabulary-size", "200")]
    assert main(["pretrain", "bert-tiny", "--data", data, "--steps", str(steps),
                 "--checkpoint-every", "2", *flags, "--out", f"{directory}/run"]) == 0
    return f"{directory}/run"


def resume(out, directory, corpus):
    """Weights of a 4-step run, of a 2-step run, and of that run resumed to 4 in a new
    model (`fit_resumable` on tf.data); the same three through `pretrain --data`."""
    from tests.cli_helpers import final_weights

    runs = {"straight": _bert_run(f"{directory}/straight", 4),
            "stopped": _bert_run(f"{directory}/interrupted", 2),
            "resumed": _bert_run(f"{directory}/interrupted", 4)}
    arrays = {f"{run}/{i}": np.asarray(w) for run, model in runs.items()
              for i, w in enumerate(model.get_weights())}
    for run, (where, steps) in {"prepared_straight": ("straight", 4),
                                "prepared_stopped": ("stopped", 2),
                                "prepared_resumed": ("stopped", 4)}.items():
        weights = final_weights(_prepared_run(corpus, f"{directory}/{where}", steps))
        arrays.update({f"{run}/{i}": w for i, w in enumerate(weights)})
    np.savez(out, **arrays)


def strategies(out, corpus, directory):
    """`keras-ctx pretrain --strategy` on JAX over this process's (virtual) devices: the
    default and mirrored runs, the distribution mirrored set, and the refused names."""
    import json

    import keras

    from keras_ctx.cli import main
    from tests.cli_helpers import TINY
    from tests.cli_helpers import cli_output

    common = ["pretrain", "bert-tiny", "--corpus", corpus, "--steps", "2", *TINY]
    refused = {"tpu": ["--strategy", "tpu"], "multi_worker": ["--strategy", "multi_worker"],
               "odd_batch": ["--strategy", "mirrored", "--batch-size", "5"]}
    refusals = {name: cli_output([*common, *flags, "--out", f"{directory}/{name}"])
                for name, flags in refused.items()}
    for name in ("default", "mirrored"):
        assert main([*common, "--strategy", name, "--out", f"{directory}/{name}"]) == 0
    distribution = keras.distribution.distribution()
    with open(out, "w") as handle:
        json.dump({"distribution": type(distribution).__name__,
                   "devices": int(distribution.device_mesh.devices.size),
                   "refusals": refusals}, handle)

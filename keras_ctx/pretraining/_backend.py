"""The one switch of pretraining/: what differs per Keras backend, chosen once at import.

- `Step`: the mixin the Pretrainer base takes its train and test step from
  (TensorFlow: GradientTape + tf.distribute; JAX: a stateless
  `train_step(state, data)`, data parallel through keras.distribution).
- Replica arithmetic for objectives that see one replica's rows:
  `num_replicas`, `replicas_mean`, `replica_rows`, `gathered_rows`. A
  tf.distribute step runs once per replica on its share of the batch; a JAX
  step is one program over the global batch (the distribution shards it), where
  there is one "replica" and all four are identities.
- `flat_cross_entropy`, the loss kernel of keras_ctx.pretraining.losses.
- `make_strategy`, what `keras-ctx pretrain --strategy` names (pretraining/strategies.py).
"""

import importlib

import keras

BACKEND = keras.backend.backend()
_MODULES = {"tensorflow": "keras_ctx.pretraining._tensorflow",
            "jax": "keras_ctx.pretraining._jax"}
if BACKEND not in _MODULES:
    raise ImportError(
        f"keras_ctx pretrains on Keras' TensorFlow or JAX backend, not {BACKEND!r}: set "
        "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax before importing keras.")
_chosen = importlib.import_module(_MODULES[BACKEND])

Step = _chosen.Step
flat_cross_entropy = _chosen.flat_cross_entropy
make_strategy = _chosen.make_strategy
num_replicas = _chosen.num_replicas
replicas_mean = _chosen.replicas_mean
replica_rows = _chosen.replica_rows
gathered_rows = _chosen.gathered_rows

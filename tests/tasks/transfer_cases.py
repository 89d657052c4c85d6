"""Transfer recipes on a token-id classifier, the same on every backend.

`snapshots` fits a tiny BERT `SequenceClassifier` (dropout off) with Adam and
ULMFiT's `GradualUnfreezing` for one step per epoch, from the given weights, and
keeps every weight after each epoch; `layer_rate_updates` takes two AdamW steps
(weight decay on) with layer-wise learning rates. tests/tasks/test_transfer_backends.py
runs them on TensorFlow and, through tests.backends' `transfer_outputs` job, on JAX.
"""

import numpy as np

from tests.backends import TASK_IDS, _task_inputs, tiny_family_backbone


def classifier(weights=None):
    from keras_ctx.tasks import SequenceClassifier

    backbone_cls, config, _ = tiny_family_backbone("bert")
    config.update(num_layers=2, dropout=0.0)
    backbone = backbone_cls(**config)
    model = SequenceClassifier(backbone, num_classes=2, dropout=0.0)
    model(_task_inputs())
    if weights is not None:
        model.set_weights(weights)
    return model


def snapshots(weights=None):
    """(the weights before, [every weight after each epoch], the number of layer groups)."""
    import keras

    from keras_ctx.tasks import GradualUnfreezing, layer_groups

    model = classifier(weights)
    groups = layer_groups(model)
    before = [np.asarray(w.numpy()) for w in model.weights]
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    after = []
    keep = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: after.append(
        [np.asarray(w.numpy()) for w in model.weights]))
    model.fit(_task_inputs(), np.array([0, 1]), batch_size=len(TASK_IDS), epochs=len(groups),
              shuffle=False, verbose=0, callbacks=[GradualUnfreezing(groups), keep])
    return before, after, len(groups)


def plain_keras_refusal():
    """What fitting a plain Keras model with GradualUnfreezing says ("" if it fits)."""
    import keras

    from keras_ctx.tasks import GradualUnfreezing

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(), "mse")
    groups = [model.layers[0].trainable_weights, model.layers[1].trainable_weights]
    try:
        model.fit(np.ones((2, 3)), np.ones((2, 1)), epochs=2, verbose=0,
                  callbacks=[GradualUnfreezing(groups)])
    except ValueError as error:
        return str(error)
    return ""


def layer_rate_updates(weights=None):
    """(the weights before, the change of every weight after two AdamW steps with weight
    decay 0.1 and learning rates halving per layer group from the top)."""
    import keras

    from keras_ctx.tasks import layer_groups
    from keras_ctx.tasks.transfer import with_layer_learning_rates

    model = classifier(weights)
    groups = layer_groups(model)
    before = [np.asarray(w.numpy()) for w in model.weights]
    optimizer = with_layer_learning_rates(keras.optimizers.AdamW(1e-2, weight_decay=0.1),
                                          groups, [0.5 ** (len(groups) - 1 - i)
                                                   for i in range(len(groups))])
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(_task_inputs(), np.array([0, 1]), batch_size=len(TASK_IDS), epochs=2,
              shuffle=False, verbose=0)
    return before, [np.asarray(w.numpy()) - b for w, b in zip(model.weights, before)]

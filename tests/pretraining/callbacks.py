"""Keras callbacks the pretraining tests read."""

import keras


class FirstBatchLoss(keras.callbacks.Callback):
    """The loss of the very first step: the untrained model's loss, at no extra compile."""

    def on_train_batch_end(self, batch, logs=None):
        if not hasattr(self, "loss"):
            self.loss = float(logs["loss"])

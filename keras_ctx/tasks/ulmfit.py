"""ULMFiT's three stages as Python functions (Howard & Ruder 2018, Sec. 3).

    1. `pretrain_language_model`: the AWD-LSTM LM on general-domain text;
    2. `fine_tune_language_model`: the same LM on the target task's text, with
       discriminative rates and STLR;
    3. `fine_tune_classifier`: concat pooling + two linear blocks, with
       discriminative rates, STLR and gradual unfreezing.
Hyperparameters from Sec. 4: Adam with beta_1 = 0.7, beta_2 = 0.99; base
learning rates 0.004 (LM fine-tuning) and 0.01 (classifier); cut_frac 0.1,
ratio 32; eta^(l-1) = eta^l / 2.6. `keras-ctx ulmfit` (`keras_ctx.commands.ulmfit`)
runs them on files.
"""

import keras

from keras_ctx.common import validation
from keras_ctx.schedules import SlantedTriangular
from keras_ctx.tasks.transfer import (
    ConcatPoolClassifier,
    GradualUnfreezing,
    discriminative_multipliers,
    layer_groups,
    with_layer_learning_rates,
)

# Howard & Ruder 2018, Sec. 4.
ULMFIT_ADAM = dict(beta_1=0.7, beta_2=0.99)
LM_FINE_TUNING_RATE = 0.004
CLASSIFIER_RATE = 0.01


def _steps(dataset, steps_per_epoch):
    if steps_per_epoch is not None:
        return steps_per_epoch
    if _is_stream(dataset):  # every epoch has its steps_per_epoch segments
        return dataset.expected_steps()
    count = int(dataset.cardinality())
    if count < 0:
        raise ValueError("The dataset's length is unknown (or infinite): pass steps_per_epoch.")
    return count


def _ulmfit_optimizer(model, backbone, learning_rate, total_steps):
    groups = layer_groups(model, backbone)
    adam = keras.optimizers.Adam(SlantedTriangular(learning_rate, total_steps), **ULMFIT_ADAM)
    return with_layer_learning_rates(adam, groups, discriminative_multipliers(len(groups))), \
        groups


def _language_model(lm_or_backbone, stream_batch_size):
    """An `AwdLstmLMPretrainer` on the backbone that carries its LSTM states over
    batches of `stream_batch_size` rows (None: a fresh state per batch); a given
    pretrainer's output bias is kept."""
    from keras_ctx.pretraining.awd_lstm import AwdLstmLMPretrainer

    lm = lm_or_backbone
    carry = stream_batch_size is not None
    if isinstance(lm, AwdLstmLMPretrainer):
        if lm.carry_state == carry and (not carry or lm.batch_size == stream_batch_size):
            return lm
        bias = lm.output_bias
        lm = AwdLstmLMPretrainer(lm.backbone, batch_size=stream_batch_size,
                                 carry_state=carry)
        lm.output_bias.assign(keras.ops.copy(bias))  # not the old LM's buffer: a JAX step donates it
        return lm
    return AwdLstmLMPretrainer(lm, batch_size=stream_batch_size, carry_state=carry)


def _is_stream(dataset):
    from keras_ctx.data.lm_stream import BpttStream

    return isinstance(dataset, BpttStream)


def _stream_batch_size(dataset, stream_batch_size):
    """A `BpttStream` carries the state over its own batch size."""
    if _is_stream(dataset):
        if stream_batch_size not in (None, dataset.batch_size):
            raise ValueError(f"stream_batch_size={stream_batch_size} but the BpttStream "
                             f"has batch_size={dataset.batch_size}: leave it out.")
        return dataset.batch_size
    return stream_batch_size


def _fit_language_model(lm, dataset, epochs, steps_per_epoch, fit_kwargs):
    from keras_ctx.pretraining.awd_lstm import StateReset

    if _is_stream(dataset):
        dataset = dataset.dataset()  # each epoch draws its own lengths, always K of them
    callbacks = list(fit_kwargs.pop("callbacks", None) or [])
    if lm.carry_state:
        callbacks.append(StateReset())  # each epoch reads the stream from its start
    fit_kwargs.setdefault("shuffle", False)  # batches: shuffled (or not) where they are made
    lm.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
           **fit_kwargs)


def _check_schedule(epochs, learning_rate, steps_per_epoch):
    """A stage's epochs and rate, checked before anything is built (None: the default)."""
    if epochs is not None:
        validation.positive_int("epochs", epochs)
    validation.positive_number("learning_rate", learning_rate)
    if steps_per_epoch is not None:
        validation.positive_int("steps_per_epoch", steps_per_epoch)


def pretrain_language_model(backbone, dataset, epochs=1, learning_rate=1e-3,
                            steps_per_epoch=None, stream_batch_size=None, **fit_kwargs):
    """Stage 1: the general-domain LM (Adam; AWD-LSTM's AR/TAR and dropouts).

    Args:
        backbone: an `AwdLstmBackbone`.
        dataset: a `keras_ctx.data.lm_stream.BpttStream` (Merity et al.'s
            training: the LSTM states carried from batch to batch,
            variable-length BPTT with the learning rate rescaled per batch),
            or a dataset of {"token_ids", "padding_mask"} batches.
        stream_batch_size: for a dataset (not a BpttStream) that is a
            continuous stream (row i of batch k + 1 continues row i of batch
            k) of this fixed batch size: carry the LSTM states from batch to
            batch. None: zero states per batch.

    Returns:
        The `AwdLstmLMPretrainer` (its backbone is `backbone`, trained).
    """
    _check_schedule(epochs, learning_rate, steps_per_epoch)
    lm = _language_model(backbone, _stream_batch_size(dataset, stream_batch_size))
    lm.compile(keras.optimizers.Adam(learning_rate, **ULMFIT_ADAM))
    _fit_language_model(lm, dataset, epochs, steps_per_epoch, fit_kwargs)
    return lm


def fine_tune_language_model(lm_or_backbone, dataset, epochs=1,
                             learning_rate=LM_FINE_TUNING_RATE, steps_per_epoch=None,
                             stream_batch_size=None, **fit_kwargs):
    """Stage 2: target-task LM fine-tuning with discriminative rates and STLR (Sec. 3.2).

    Args:
        lm_or_backbone: the stage-1 `AwdLstmLMPretrainer` (keeps its output
            bias) or a bare backbone.
        dataset: the target task's text, as for `pretrain_language_model`.
        stream_batch_size: as for `pretrain_language_model`.

    Returns:
        The fine-tuned `AwdLstmLMPretrainer`.
    """
    _check_schedule(epochs, learning_rate, steps_per_epoch)
    lm = _language_model(lm_or_backbone, _stream_batch_size(dataset, stream_batch_size))
    total = epochs * _steps(dataset, steps_per_epoch)
    optimizer, _ = _ulmfit_optimizer(lm, lm.backbone, learning_rate, total)
    lm.compile(optimizer)
    _fit_language_model(lm, dataset, epochs, steps_per_epoch, fit_kwargs)
    return lm


def fine_tune_classifier(backbone, dataset, num_classes, epochs=None,
                         learning_rate=CLASSIFIER_RATE, steps_per_epoch=None,
                         gradual_unfreezing=True, validation_data=None, **fit_kwargs):
    """Stage 3: the classifier, with discriminative rates, STLR and gradual unfreezing.

    Args:
        backbone: the fine-tuned LM's backbone.
        dataset: batches of ({"token_ids", "padding_mask"}, label).
        num_classes: labels.
        epochs: default: one per layer group (the last epoch trains everything).
        gradual_unfreezing: unfreeze from the top, one group per epoch (Sec. 3.3).

    Returns:
        (the `ConcatPoolClassifier`, its History).
    """
    _check_schedule(epochs, learning_rate, steps_per_epoch)
    classifier = ConcatPoolClassifier(backbone, num_classes)
    groups = layer_groups(classifier)
    epochs = len(groups) if epochs is None else epochs  # 0 is refused, not "the default"
    total = epochs * _steps(dataset, steps_per_epoch)
    optimizer, groups = _ulmfit_optimizer(classifier, backbone, learning_rate, total)
    classifier.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"])
    callbacks = list(fit_kwargs.pop("callbacks", []))
    fit_kwargs.setdefault("shuffle", False)  # batches: shuffled (or not) where they are made
    if gradual_unfreezing:
        callbacks.insert(0, GradualUnfreezing(groups))
    history = classifier.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                             validation_data=validation_data, callbacks=callbacks,
                             **fit_kwargs)
    return classifier, history


def ulmfit(backbone, target_text, labelled, num_classes, general_text=None,
           lm_epochs=1, classifier_epochs=None, **fit_kwargs):
    """All three stages; `general_text=None` skips stage 1 (a pretrained backbone).

    Returns:
        (classifier, History of stage 3).
    """
    lm = backbone
    if general_text is not None:
        lm = pretrain_language_model(backbone, general_text, epochs=lm_epochs, **fit_kwargs)
    lm = fine_tune_language_model(lm, target_text, epochs=lm_epochs, **fit_kwargs)
    return fine_tune_classifier(lm.backbone, labelled, num_classes, epochs=classifier_epochs,
                                **fit_kwargs)


# ---------------------------------------------------------------- CVT tagging

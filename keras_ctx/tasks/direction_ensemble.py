"""ULMFiT's bidirectional classifier: a forward and a backward classifier, averaged.

Howard & Ruder 2018, Sec. 3.3 ("Bidirectional language model"): "we pretrain both a
forward and a backward LM. We fine-tune a classifier for each LM independently ... and
average the classifier predictions". The backward classifier reads each text from its
end (fastai v1's `pad_collate(backwards=True)` flips each row); its probabilities and
the forward one's are averaged (fastai1's examples/ULMFit.ipynb @8287ec0:
`final_pred = (pred_fwd + pred_bwd) / 2`, `get_preds` giving softmax probabilities).

`DirectionEnsemble` takes the texts' ids in reading order, as any keras_ctx classifier,
and returns log(mean_d softmax(logits_d)): logits whose softmax is the mean of the
directions' probabilities, so whatever reads a classifier's logits (its loss, `predict`
then argmax, the SavedModel's `probabilities`) reads the ensemble's.
"""

import keras
from keras import ops

from keras_ctx.common.keras_files import CheckedWeightFiles
from keras_ctx.data.ulmfit_text import DIRECTIONS
from keras_ctx.models.checked_input import CheckedTokenIds

# The smallest mean probability kept under the log (float32's normal range): a class every
# direction gives 0 stays finite, and the softmax of the result changes by < 1e-30.
_SMALLEST_PROBABILITY = 1e-30


@keras.saving.register_keras_serializable(package="keras_ctx")
class ReversedTokens(keras.layers.Layer):
    """Each row's real tokens in reverse order, the padding kept on the right.

        out[b, t] = x[b, n_b - 1 - t] for t < n_b (n_b: the row's real tokens), else x[b, t]

    Call arguments: token_ids (batch, time), padding_mask (batch, time), right padding.
    """

    def call(self, token_ids, padding_mask):
        lengths = ops.sum(ops.cast(padding_mask, "int32"), axis=1, keepdims=True)
        positions = ops.arange(ops.shape(token_ids)[1], dtype="int32")[None, :]
        index = ops.where(positions < lengths, lengths - 1 - positions, positions)
        return ops.take_along_axis(token_ids, index, axis=1)

    def compute_output_shape(self, token_ids_shape, padding_mask_shape=None):
        return token_ids_shape


@keras.saving.register_keras_serializable(package="keras_ctx")
class DirectionEnsemble(CheckedTokenIds, CheckedWeightFiles, keras.Model):
    """Classifiers of several reading directions, their probabilities averaged.

    Args:
        classifiers: one id-level classifier per direction (logits out), e.g. ULMFiT's
            `ConcatPoolClassifier`s, each over {"token_ids", "padding_mask"}.
        directions: each classifier's direction, "forward" (reads the ids as given)
            or "backward" (reads each row's real tokens reversed).

    Inputs: {"token_ids", "padding_mask"} (batch, time), right padding, in reading order.
    Output: (batch, classes) log of the mean of the classifiers' softmax probabilities.

    Example:
    >>> ensemble = DirectionEnsemble([forward, backward], ["forward", "backward"])
    >>> probabilities = keras.ops.softmax(ensemble.predict(inputs))

    References:
        Howard & Ruder, "Universal Language Model Fine-tuning for Text
        Classification", 2018, Sec. 3.3.
    """

    def __init__(self, classifiers, directions, **kwargs):
        classifiers, directions = list(classifiers), list(directions)
        if not classifiers or len(classifiers) != len(directions):
            raise ValueError(f"DirectionEnsemble needs one direction per classifier, got "
                             f"{len(classifiers)} classifiers and directions {directions}.")
        for direction in directions:
            if direction not in DIRECTIONS:
                raise ValueError(f"Each direction must be one of {DIRECTIONS}, got "
                                 f"{direction!r}.")
        widths = {c.output_shape[-1] for c in classifiers}
        if len(widths) != 1:
            raise ValueError(f"The classifiers have different numbers of classes "
                             f"({sorted(widths)}): train them on the same labels.")
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
        reversed_ids = None
        probabilities = []
        for classifier, direction in zip(classifiers, directions):
            ids = token_ids
            if direction == "backward":
                reversed_ids = reversed_ids if reversed_ids is not None else ReversedTokens(
                    name="reversed_tokens")(token_ids, padding_mask)
                ids = reversed_ids
            logits = classifier({"token_ids": ids, "padding_mask": padding_mask})
            probabilities.append(ops.softmax(ops.cast(logits, "float32"), axis=-1))
        mean = probabilities[0] if len(probabilities) == 1 else ops.mean(
            ops.stack(probabilities, axis=0), axis=0)
        log_mean = ops.log(ops.maximum(mean, _SMALLEST_PROBABILITY))
        super().__init__({"token_ids": token_ids, "padding_mask": padding_mask}, log_mean,
                         **kwargs)
        self.classifiers = classifiers
        self.directions = directions

    def get_config(self):
        return {"classifiers": [keras.saving.serialize_keras_object(c)
                                for c in self.classifiers],
                "directions": list(self.directions), "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["classifiers"] = [keras.saving.deserialize_keras_object(c)
                                 for c in config["classifiers"]]
        return cls(**config)

    def serving_outputs(self, logits):
        """The SavedModel's outputs: the log mean probabilities and the mean probabilities."""
        return {"logits": logits, "probabilities": ops.softmax(logits, axis=-1)}

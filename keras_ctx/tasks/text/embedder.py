"""Sentence vectors from strings: the masked mean of a backbone's outputs, L2-normalized."""

import keras

from keras_ctx.tasks.heads import Pool, padding_mask_of
from keras_ctx.tasks.text.task import TextTask, family_of, registered


@keras.saving.register_keras_serializable(package="keras_ctx")
class L2Normalize(keras.layers.Layer):
    """x / ||x||_2 along the last axis (sentence-transformers' Normalize module)."""

    def call(self, x):
        x = keras.ops.cast(x, "float32")
        return x / keras.ops.maximum(keras.ops.norm(x, axis=-1, keepdims=True), 1e-12)


@registered
class TextEmbedder(TextTask):
    """Texts -> sentence vectors: the mean over real tokens, then L2-normalized.

    This is all-MiniLM-L6-v2's published pooling (its sentence-transformers
    modules: Transformer, Pooling with pooling_mode_mean_tokens, Normalize):
    padding positions never count. Encoder-decoders pool the output the
    family's `word_vectors` names (the encoder's).

    Args:
        backbone, tokenizer, sequence_length, family, truncation: as `TextClassifier`.
        normalize: L2-normalize the mean (True as MiniLM; False: the raw mean).

    `predict(texts)` returns (batch, hidden) float32 vectors; with
    `normalize` their dot products are cosine similarities.
    """

    def __init__(self, backbone, tokenizer, sequence_length=256, family=None,
                 truncation="error", normalize=True):
        family = family_of(backbone, family)
        inputs = {name: keras.Input(shape=t.shape[1:], dtype=t.dtype, name=name)
                  for name, t in backbone.input.items()}
        outputs = backbone(inputs)
        sequence = outputs[family.word_vectors]
        mask_name = ("encoder_padding_mask" if family.word_vectors.startswith("encoder")
                     else "padding_mask")
        mask = padding_mask_of(inputs, sequence, mask_name)
        vector = Pool("mean", name="mean_pool")(sequence, mask)
        if normalize:
            vector = L2Normalize(name="normalize")(vector)
        self.normalize = normalize
        model = keras.Model(inputs, vector, name="text_embedder")
        super().__init__(model, tokenizer, family, sequence_length, truncation,
                         backbone=backbone)

    def _settings(self):
        return {"normalize": self.normalize}

    def _load_settings(self, settings):
        self.normalize = settings["normalize"]

"""Attentional translation with teacher forcing: how CoVe's MT-LSTM is trained.

`TranslationPretrainer(encoder, ...)` wraps any encoder taking
{"token_ids", "padding_mask"} and returning `sequence_output` (e.g.
`CoveBackbone`), adds target word vectors, CoVe's `AttentionalDecoder`
(McCann et al., 2017) and an output softmax, and trains with the NLL of the
gold next words (teacher forcing: the decoder reads the gold previous words)
as the released OpenNMT-py run weighs it: summed over each sentence's real
targets, averaged over the batch's sentences. Metrics: `loss`, `accuracy`
(token accuracy on real tokens).

Data: `keras_ctx.data.parallel.translation_inputs` gives
({"encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
"decoder_padding_mask"}, labels), 0 = padding.
"""

import keras
import numpy as np
from keras import ops

from keras_ctx.layers import Dropout

from keras_ctx.models.cove.backbone import AttentionalDecoder
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.losses import (
    replica_weight_total,
    sparse_cross_entropy,
    top_one_correct,
)


def sentence_mean_of_sums(values, weights):
    """sum(values * weights) / the global batch's sentences (rows with a positive weight).

    CoVe's loss (salesforce/cove @9a0d90b OpenNMT-py train.py: `NMTCriterion` sums the
    targets' NLL, `size_average=False`, <blank> weighted 0; `memoryEfficientLoss`
    back-propagates `loss_t.div(batch_size)`, the batch's sentences). Against the mean over
    targets its gradient is a mean target length larger, which matters under SGD at 1.0
    with `-max_grad_norm 5`. The sentences are counted over the global batch as
    `replica_weight_total` counts weights, so N replicas give the one-device gradient.
    """
    weights = ops.cast(weights, "float32")
    total = ops.sum(ops.cast(values, "float32") * weights)
    sentences = ops.cast(ops.any(ops.greater(weights, 0.0), axis=-1), "float32")
    return total / ops.maximum(replica_weight_total(sentences), 1.0)


@keras.saving.register_keras_serializable(package="keras_ctx")
class TranslationPretrainer(Pretrainer):
    """Encoder + attentional LSTM decoder + softmax, trained with teacher forcing.

    Args:
        encoder: the encoder being trained (a `CoveBackbone`).
        target_vocabulary_size: size of the target vocabulary (0 = padding).
        target_embedding_dim: size of the target word vectors z (300 in CoVe).
        decoder_units: decoder LSTM / h~ size (defaults to the encoder output size).
        num_decoder_layers: 2 in CoVe.
        target_embeddings: optional initial (V, dim) target word vectors.
        dropout: on h~ before the softmax.
        target_dropout: on the target word vectors z the decoder reads (OpenNMT-py's
            decoder drops each step's word vector, salesforce/cove @9a0d90b onmt/Models.py).

    Call: the input dict -> logits (batch, target_time, target_vocabulary_size), float32.
    """

    def __init__(
        self,
        encoder,
        target_vocabulary_size,
        target_embedding_dim=300,
        decoder_units=None,
        num_decoder_layers=2,
        target_embeddings=None,
        dropout=0.0,
        target_dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.target_vocabulary_size = int(target_vocabulary_size)
        self.target_embedding_dim = int(target_embedding_dim)
        encoder_dim = encoder.output["sequence_output"].shape[-1]
        self.decoder_units = int(decoder_units or encoder_dim)
        self.num_decoder_layers = int(num_decoder_layers)
        self.dropout = float(dropout)
        self.target_embedding = keras.layers.Embedding(
            self.target_vocabulary_size, self.target_embedding_dim, name="target_embedding"
        )
        self.target_embedding.build((None, None))
        if target_embeddings is not None:
            self.target_embedding.embeddings.assign(np.asarray(target_embeddings, "float32"))
        self.decoder = AttentionalDecoder(
            self.decoder_units, self.num_decoder_layers, name="decoder"
        )
        self.decoder.build(
            (None, None, self.target_embedding_dim), (None, None, encoder_dim), (None, None)
        )
        self.dropout_layer = Dropout(self.dropout)
        self.target_dropout = float(target_dropout)
        self.target_dropout_layer = Dropout(self.target_dropout)
        self.output_layer = keras.layers.Dense(
            self.target_vocabulary_size, dtype="float32", name="output_softmax"
        )
        self.output_layer.build((None, None, self.decoder_units))
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")
        self.objective_metrics = [self.accuracy_tracker]

    @property
    def token_id_vocabularies(self):
        """Where the decoder's ids are checked (keras_ctx.models.checked_input.checked_token_ids):
        the target vocabulary, not the encoder's."""
        return {"decoder_token_ids": self.target_vocabulary_size}

    def call(self, inputs, training=False):
        encoded = self.encoder(
            {"token_ids": inputs["encoder_token_ids"],
             "padding_mask": inputs["encoder_padding_mask"]},
            training=training,
        )["sequence_output"]
        z = self.target_dropout_layer(self.target_embedding(inputs["decoder_token_ids"]),
                                      training=training)
        h_tilde = self.decoder(z, encoded, encoder_mask=inputs["encoder_padding_mask"])
        h_tilde = self.dropout_layer(h_tilde, training=training)
        return ops.cast(self.output_layer(h_tilde), "float32")

    def compute_losses(self, batch, training):
        x, labels, weights = keras.utils.unpack_x_y_sample_weight(batch)
        if labels is None:
            raise ValueError(
                "TranslationPretrainer needs (inputs, labels[, weights]); map your "
                "dataset with keras_ctx.data.parallel.translation_inputs.")
        logits = self(x, training=training)
        # Given weights are the caller's; without them every real (non-0) label counts.
        weights = (ops.not_equal(labels, 0) if weights is None else weights)
        weights = ops.cast(weights, "float32")
        self.accuracy_tracker.update_state(top_one_correct(labels, logits), sample_weight=weights)
        return {"translation": sentence_mean_of_sums(sparse_cross_entropy(labels, logits),
                                                     weights)}

    def greedy_translate(self, encoder_token_ids, max_length, bos_id=1, eos_id=2):
        """Greedy decoding (numpy in, numpy out): ids after `<s>`, 0 after `</s>`."""
        encoder_token_ids = np.asarray(encoder_token_ids, "int32")
        batch = encoder_token_ids.shape[0]
        decoder = np.zeros((batch, max_length), "int32")
        decoder[:, 0] = bos_id
        out = np.zeros((batch, max_length), "int32")
        done = np.zeros(batch, bool)
        for t in range(max_length):
            logits = self(
                {"encoder_token_ids": encoder_token_ids,
                 "encoder_padding_mask": (encoder_token_ids != 0).astype("int32"),
                 "decoder_token_ids": decoder,
                 "decoder_padding_mask": (decoder != 0).astype("int32")},
            )
            next_ids = np.argmax(keras.ops.convert_to_numpy(logits[:, t]), -1)
            next_ids = np.where(done, 0, next_ids)
            out[:, t] = next_ids
            done |= next_ids == eos_id
            if t + 1 < max_length:
                decoder[:, t + 1] = next_ids
        return out

    serialized_models = ("encoder",)

    def get_config(self):
        return {
            **super().get_config(),
            "target_vocabulary_size": self.target_vocabulary_size,
            "target_embedding_dim": self.target_embedding_dim,
            "decoder_units": self.decoder_units,
            "num_decoder_layers": self.num_decoder_layers,
            "dropout": self.dropout,
            "target_dropout": self.target_dropout,
        }

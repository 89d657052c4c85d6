"""ELECTRA replaced token detection (Clark et al. 2020).

    x_masked                  BERT-masked input (keras_ctx.data.masking)
    p_G(x_t | x_masked)       small MLM generator, at the masked positions
    x^_t ~ p_G   (t masked)   sampled (Gumbel-max), not back-propagated through
    x_corrupt = x with x_t := x^_t at the masked positions
    y_t = 1[x_corrupt_t != x_t]   (a sample equal to the original is "original")
    L = L_MLM(G) + lambda * L_Disc,   lambda = 50   (Clark et al. 2020, Sec. 2)
    L_Disc = sum_t m_t BCE(y_t, sigmoid(D(x_corrupt)_t)) / sum_t m_t   (m = padding_mask)

The objective is generic over the two encoders (tf-models' habit): any
backbones taking `token_ids`, `padding_mask` (optionally `segment_ids`),
returning `sequence_output`, the generator exposing `token_embedding` (its
MLM output is tied to it). By default the two must share their token
embeddings (the same variables), as ELECTRA does: build the generator with
`keras_ctx.models.electra_generator(discriminator)`, or pass
`share_embeddings=False`. Batches are BERT MLM batches (`mask_positions`,
`mask_ids`, `mask_weights`), e.g. from `keras_ctx.data.masking.MLMMasker`;
the original tokens are put back from `mask_ids`, so no extra key is needed.

Only the discriminator is kept for fine-tuning and export:
`pretrainer.discriminator`.
"""

import keras
from keras import ops

from keras_ctx.common.validation import one_of, positive_number
from keras_ctx.layers import activations
from keras_ctx.layers.heads import MaskedLMHead
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.losses import TokenAccuracy, weighted_cross_entropy, weighted_mean
from keras_ctx.pretraining.masked_lm import (
    backbone_inputs,
    checkpoint_head_settings,
    load_head_weights,
    sequence_rows,
    sequence_width,
)

DISCRIMINATOR_WEIGHT = 50.0  # lambda, Clark et al. 2020, Sec. 2 / Table 6
STAGES = ("joint", "generator", "discriminator")


def scatter_masked(token_ids, mask_positions, values, mask_weights):
    """`token_ids` with `values[b, p]` written at `mask_positions[b, p]` where the weight is 1.

    Dense one-hot arithmetic (no scatter op), so it compiles with XLA.

    Returns:
        (new token ids (batch, time) int32, written (batch, time) bool).
    """
    token_ids = ops.cast(token_ids, "int32")
    length = ops.shape(token_ids)[1]
    one_hot = ops.one_hot(ops.cast(mask_positions, "int32"), length, dtype="float32")
    one_hot = one_hot * ops.cast(mask_weights, "float32")[:, :, None]      # (b, P, T)
    written = ops.max(one_hot, axis=1) > 0
    # Ids are < 2**24, exact in float32.
    scattered = ops.einsum("bp,bpt->bt", ops.cast(values, "float32"), one_hot)
    scattered = ops.cast(ops.round(scattered), "int32")
    return ops.where(written, scattered, token_ids), written


def replace_masked_tokens(masked_token_ids, mask_positions, mask_ids, mask_weights,
                          sampled_ids, padding_mask=None):
    """Builds the discriminator's input and labels from a masked batch and generator samples.

    Args:
        masked_token_ids: (batch, time) MLM input (with [MASK] etc.).
        mask_positions, mask_ids, mask_weights: (batch, P) from BERT masking.
        sampled_ids: (batch, P) generator samples at those positions.
        padding_mask: (batch, time); labels are 0 at padding.

    Returns:
        dict with `original_token_ids`, `token_ids` (corrupted), `labels`
        (batch, time) int32: 1 exactly where the corrupted token differs from
        the original, so a sample equal to the original is labelled 0.
    """
    original, _ = scatter_masked(masked_token_ids, mask_positions, mask_ids, mask_weights)
    corrupted, _ = scatter_masked(original, mask_positions, sampled_ids, mask_weights)
    labels = ops.cast(ops.not_equal(corrupted, original), "int32")
    if padding_mask is not None:
        labels = labels * ops.cast(padding_mask, "int32")
    return {"original_token_ids": original, "token_ids": corrupted, "labels": labels}


def gumbel_sample(logits, seed):
    """argmax(logits + Gumbel noise): one sample of softmax(logits), no gradient."""
    logits = ops.cast(ops.stop_gradient(logits), "float32")
    uniform = keras.random.uniform(ops.shape(logits), minval=0.0, maxval=1.0, seed=seed)
    gumbel = -ops.log(-ops.log(uniform + 1e-9) + 1e-9)
    return ops.stop_gradient(ops.cast(ops.argmax(logits + gumbel, axis=-1), "int32"))


@keras.saving.register_keras_serializable(package="keras_ctx")
class ReplacedTokenHead(keras.layers.Layer):
    """ELECTRA's discriminator head: `logit_t = w^T act(W h_t + b) + c`, one per token.

    Args:
        activation: of the hidden dense ("gelu", as the encoder).
        kernel_initializer: of both dense layers.

    Call arguments:
        inputs: (batch, time, hidden) sequence output.

    Returns:
        (batch, time) logits of "this token was replaced".
    """

    def __init__(self, activation="gelu", kernel_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.activation = activation
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or keras.initializers.TruncatedNormal(stddev=0.02))

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.dense = keras.layers.Dense(hidden, activation=activations.get(self.activation),
                                        kernel_initializer=self.kernel_initializer,
                                        dtype=self.dtype_policy, name="dense")
        self.dense.build(input_shape)
        self.classifier = keras.layers.Dense(1, kernel_initializer=self.kernel_initializer,
                                             dtype=self.dtype_policy, name="classifier")
        self.classifier.build(tuple(input_shape[:-1]) + (hidden,))
        self.built = True

    def call(self, inputs):
        return ops.squeeze(self.classifier(self.dense(inputs)), axis=-1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update({"activation": self.activation,
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config


def _sequence_shape(backbone):
    return (None, None, sequence_width(backbone))


def _unique(variables):
    seen, out = set(), []
    for v in variables:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


@keras.saving.register_keras_serializable(package="keras_ctx")
class ElectraPretrainer(Pretrainer):
    """ELECTRA: MLM generator + replaced-token-detection discriminator, one train_step.

    Args:
        generator: backbone trained with MLM (e.g. `electra_generator(disc)`).
        discriminator: backbone trained to detect replaced tokens; the model
            kept afterwards (`pretrainer.discriminator`).
        discriminator_weight: lambda (50, Clark et al. 2020).
        share_embeddings: require the two to share their token embedding
            variables (True, ELECTRA's default); False allows untied networks.
        disallow_correct: never sample the original token (the released
            code's `disallow_correct`, off by default).
        temperature: of the generator's softmax when sampling (1.0).
        stage: "joint" (default), or the two-stage schedule of Clark et al.
            2020, Sec. 3.2: "generator" (MLM only, generator weights only),
            then "discriminator" (discriminator loss only, generator frozen).
            Change it with `set_stage`.
        seed: of the sampling noise.
        sparse_last_layer: the generator computes its last layer only at the
            masked positions, all its MLM head reads (see `MaskedLMPretrainer`).
        mlm_head: the generator's MLM head to continue from, tied to
            `generator.token_embedding` (an ElectraForMaskedLM checkpoint:
            `generator, mlm_head = masked_lm_from_huggingface(d)`); its weights are
            copied into the generator head. None: a fresh head.

    Call: a batch dict -> {"mlm": (batch, P, V) generator logits, "rtd":
    (batch, time) discriminator logits, "labels", "token_ids" (corrupted),
    "original_token_ids", "sampled_ids" (batch, P)}.

    Metrics: loss, generator_loss, generator_accuracy, discriminator_loss,
    discriminator_accuracy, discriminator_precision, discriminator_recall
    (on replaced tokens), sampled_original_rate (share of sampled tokens equal
    to the original).

    Example:
    >>> disc = keras_ctx.models.ElectraBackbone.from_preset("electra-small")
    >>> pretrainer = ElectraPretrainer(keras_ctx.models.electra_generator(disc), disc)
    >>> pretrainer.compile(optimizer=keras.optimizers.AdamW(5e-4), jit_compile=True)
    >>> pretrainer.fit(masked_batches)
    >>> pretrainer.discriminator.save("electra.keras")
    """

    def __init__(self, generator, discriminator, discriminator_weight=DISCRIMINATOR_WEIGHT,
                 share_embeddings=True, disallow_correct=False, temperature=1.0,
                 stage="joint", seed=None, sparse_last_layer=True, mlm_head=None, **kwargs):
        super().__init__(**kwargs)
        if generator is discriminator:
            raise ValueError("`generator` and `discriminator` must be two different models.")
        if share_embeddings and (generator.token_embedding.embeddings
                                 is not discriminator.token_embedding.embeddings):
            raise ValueError(
                "The generator and discriminator do not share their token embeddings. "
                "Build the generator with keras_ctx.models.electra_generator(discriminator) "
                "(or ElectraBackbone(..., shared_embeddings=discriminator)), or pass "
                "share_embeddings=False for untied networks.")
        positive_number("temperature", temperature)
        self.generator = generator
        self.discriminator = discriminator
        self.discriminator_weight = float(discriminator_weight)
        self.share_embeddings = bool(share_embeddings)
        self.disallow_correct = bool(disallow_correct)
        self.temperature = float(temperature)
        self.seed = seed
        self.sparse_last_layer = bool(sparse_last_layer)
        self.seed_generator = keras.random.SeedGenerator(seed, name="sampling_seed")
        activation = getattr(generator, "activation", "gelu")
        epsilon = getattr(generator, "layer_norm_epsilon", 1e-12)
        if mlm_head is not None:
            _, activation, epsilon = checkpoint_head_settings(
                mlm_head, generator.token_embedding, head_transform=True)
        self.mlm_head = MaskedLMHead(
            token_embedding=generator.token_embedding, activation=activation,
            layer_norm_epsilon=epsilon, dtype=generator.dtype_policy, name="generator_head")
        self.rtd_head = ReplacedTokenHead(
            activation=getattr(discriminator, "activation", "gelu"),
            dtype=discriminator.dtype_policy, name="discriminator_head")
        # Build the heads now, so that the optimizer (built by fit before the
        # first trace) knows all their weights.
        self.mlm_head.build(_sequence_shape(generator), (None, None))
        if mlm_head is not None:
            load_head_weights(self.mlm_head, mlm_head, _sequence_shape(generator))
        self.rtd_head.build(_sequence_shape(discriminator))
        self.built = True
        self.stage = None
        self.set_stage(stage, initialize=False)
        self.generator_loss = keras.metrics.Mean(name="generator_loss")
        self.generator_accuracy = TokenAccuracy(name="generator_accuracy")
        self.discriminator_loss = keras.metrics.Mean(name="discriminator_loss")
        self.discriminator_accuracy = keras.metrics.BinaryAccuracy(
            name="discriminator_accuracy")
        self.discriminator_precision = keras.metrics.Precision(
            name="discriminator_precision")
        self.discriminator_recall = keras.metrics.Recall(name="discriminator_recall")
        self.sampled_original_rate = keras.metrics.Mean(name="sampled_original_rate")
        self.objective_metrics = [
            self.generator_loss, self.generator_accuracy, self.discriminator_loss,
            self.discriminator_accuracy, self.discriminator_precision,
            self.discriminator_recall, self.sampled_original_rate]

    # --- the two-stage schedule -------------------------------------------------------

    def set_stage(self, stage, initialize=True):
        """Sets the stage: "joint", "generator" or "discriminator" (Clark et al. 2020, Sec. 3.2).

        Entering "discriminator" with `initialize=True` copies the generator's
        weights into the discriminator (they must be the same size:
        `electra_generator(disc, hidden_fraction=1.0)`). The next `fit`
        retraces the train step; the optimizer is kept.
        """
        one_of("stage", stage, STAGES)
        if stage == "discriminator" and initialize and self.stage != "discriminator":
            self.initialize_discriminator_from_generator()
        self.stage = stage
        # Keras caches the traced steps: make the next fit/evaluate retrace.
        self.train_function = None
        self.test_function = None

    def initialize_discriminator_from_generator(self):
        """Copies every generator weight into the discriminator (shared ones are no-ops)."""
        source, target = self.generator.weights, self.discriminator.weights
        shapes = [tuple(w.shape) for w in source], [tuple(w.shape) for w in target]
        if shapes[0] != shapes[1]:
            raise ValueError(
                "Initialising the discriminator from the generator needs two networks of "
                "the same size; build the generator with "
                "electra_generator(discriminator, hidden_fraction=1.0).")
        for s, t in zip(source, target):
            if s is not t:  # a copy: on JAX assign shares the buffer, which a jitted step
                t.assign(ops.copy(s))  # then donates twice ("donate the same buffer twice")

    def step_variables(self, batch):
        if self.stage == "generator":
            return _unique(self.generator.trainable_variables
                           + self.mlm_head.trainable_variables)
        if self.stage == "discriminator":
            # Generator-only weights frozen; shared embeddings train with the discriminator.
            return _unique(self.discriminator.trainable_variables
                           + self.rtd_head.trainable_variables)
        return self.trainable_variables

    # --- forward ----------------------------------------------------------------------

    def call(self, batch, training=False):
        generated = sequence_rows(self.generator, backbone_inputs(self.generator, batch),
                                  batch["mask_positions"], training,
                                  sparse=self.sparse_last_layer)
        mlm_logits = self.mlm_head(generated)
        sample_logits = ops.cast(mlm_logits, "float32") / self.temperature
        if self.disallow_correct:
            sample_logits -= 1e9 * ops.one_hot(ops.cast(batch["mask_ids"], "int32"),
                                               ops.shape(sample_logits)[-1])
        sampled = gumbel_sample(sample_logits, self.seed_generator)
        replaced = replace_masked_tokens(batch["token_ids"], batch["mask_positions"],
                                         batch["mask_ids"], batch["mask_weights"], sampled,
                                         batch.get("padding_mask"))
        inputs = backbone_inputs(self.discriminator, batch)
        inputs["token_ids"] = ops.stop_gradient(replaced["token_ids"])
        discriminated = self.discriminator(inputs, training=training)
        rtd_logits = self.rtd_head(discriminated["sequence_output"])
        return dict(replaced, mlm=mlm_logits, rtd=rtd_logits, sampled_ids=sampled)

    def compute_losses(self, batch, training):
        outputs = self(batch, training=training)
        losses = self.losses_from_outputs(batch, outputs)
        self._update_metrics(batch, outputs, losses)
        return losses

    def losses_from_outputs(self, batch, outputs):
        """{"mlm": generator MLM loss, "rtd": discriminator loss} (float32 scalars)."""
        mlm = weighted_cross_entropy(batch["mask_ids"], outputs["mlm"], batch["mask_weights"])
        weights = ops.cast(batch.get("padding_mask", ops.ones_like(outputs["labels"])),
                           "float32")
        bce = ops.binary_crossentropy(ops.cast(outputs["labels"], "float32"),
                                      ops.cast(outputs["rtd"], "float32"), from_logits=True)
        return {"mlm": mlm, "rtd": weighted_mean(bce, weights)}

    def total_loss(self, losses):
        if self.stage == "generator":
            return losses["mlm"]
        if self.stage == "discriminator":
            return self.discriminator_weight * losses["rtd"]
        return losses["mlm"] + self.discriminator_weight * losses["rtd"]

    def _update_metrics(self, batch, outputs, losses):
        self.generator_loss.update_state(losses["mlm"])
        self.generator_accuracy.update_state(batch["mask_ids"],
                                             ops.cast(outputs["mlm"], "float32"),
                                             sample_weight=batch["mask_weights"])
        self.discriminator_loss.update_state(losses["rtd"])
        weights = ops.cast(batch.get("padding_mask", ops.ones_like(outputs["labels"])),
                           "float32")
        labels = ops.cast(outputs["labels"], "float32")
        probabilities = ops.sigmoid(ops.cast(outputs["rtd"], "float32"))
        self.discriminator_accuracy.update_state(labels, probabilities, sample_weight=weights)
        self.discriminator_precision.update_state(labels, probabilities, sample_weight=weights)
        self.discriminator_recall.update_state(labels, probabilities, sample_weight=weights)
        same = ops.cast(ops.equal(outputs["sampled_ids"], ops.cast(batch["mask_ids"], "int32")),
                        "float32")
        self.sampled_original_rate.update_state(same, sample_weight=batch["mask_weights"])

    # --- construction helpers and serialization -----------------------------------------

    @classmethod
    def from_preset(cls, name, generator_fraction=None, **kwargs):
        """Discriminator of `name` + a generator of Table 6's size, sharing embeddings.

        `name` is any model handle (`keras_ctx.handles`): a preset (random
        weights), a checkpoint directory, `hf://...` or `kaggle://...`.

        `generator_fraction` defaults to Clark et al. 2020, Table 6
        (electra-small 1/4, electra-base 1/3, electra-large 1/4; 1/4 otherwise).
        Backbone overrides go in `backbone_overrides={...}`.
        """
        from keras_ctx.models.electra.backbone import (ELECTRA_GENERATOR_FRACTIONS, ElectraBackbone,
                                              electra_generator)

        overrides = kwargs.pop("backbone_overrides", {})
        discriminator = ElectraBackbone.from_preset(name, **overrides)
        fraction = generator_fraction or ELECTRA_GENERATOR_FRACTIONS.get(name, 0.25)
        return cls(electra_generator(discriminator, fraction), discriminator, **kwargs)

    def get_config(self):
        return {
            "generator": keras.saving.serialize_keras_object(self.generator),
            "discriminator": keras.saving.serialize_keras_object(self.discriminator),
            "discriminator_weight": self.discriminator_weight,
            "share_embeddings": self.share_embeddings,
            "disallow_correct": self.disallow_correct,
            "temperature": self.temperature,
            "stage": self.stage,
            "seed": self.seed,
            "sparse_last_layer": self.sparse_last_layer,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        from keras_ctx.models.electra.backbone import ElectraBackbone

        config = dict(config)
        discriminator = keras.saving.deserialize_keras_object(config.pop("discriminator"))
        generator_config = config.pop("generator")
        if config.get("share_embeddings", True) and isinstance(discriminator, ElectraBackbone):
            inner = dict(generator_config["config"])
            inner.pop("trainable", None)
            generator = ElectraBackbone(shared_embeddings=discriminator, **inner)
        else:
            generator = keras.saving.deserialize_keras_object(generator_config)
        return cls(generator, discriminator, **config)


__all__ = ["ElectraPretrainer", "ReplacedTokenHead", "replace_masked_tokens",
           "scatter_masked", "gumbel_sample", "DISCRIMINATOR_WEIGHT"]

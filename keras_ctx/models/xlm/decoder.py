"""XLM's CLM models decoding token by token: what `keras_ctx.generation` reads.

XLM's backbone is a functional encoder whose positions and language ids are
inputs, and its output layer (PredLayer) is the pretrainer's, not the
backbone's. `XLMDecoder` runs the same layers one step at a time with a
key/value cache, as XLM's own `TransformerModel.generate` (xlm/model/
transformer.py @cd281d3): each new token at its position, with the row's
language id, and the next-token scores read from the last position's
output through the tied table plus PredLayer's bias.
"""

import keras
from keras import ops

from keras_ctx.layers.heads import MaskedLMHead


class XLMDecoder(keras.layers.Layer):
    """A causal XLMBackbone (and its PredLayer) as a decoder of `keras_ctx.generation`.

    Args:
        backbone: an `XLMBackbone` with `causal=True`.
        lm_head: its PredLayer, a `MaskedLMHead(transform=False)` tied to the
            backbone's token table (`CausalLMPretrainer(output_bias=True).lm_head`,
            or the head `masked_lm_from_huggingface` reads); None: a new one, its
            bias zero (trained where the decoder's logits are, as CausalLM's).
        language_id: the language every generated row is written in (an index
            of the language table; XLM's `lang2id`); None: 0, the first.

    Not serialised itself: a saved CausalLM rebuilds it from its backbone
    (`keras_ctx.tasks.language_model.LanguageModel`), the head's bias among its weights.

    Example:
    >>> decoder = XLMDecoder(pretrainer.backbone, pretrainer.lm_head, language_id=1)
    >>> keras_ctx.generation.generate(decoder, prompt_ids, max_length=32)
    """

    def __init__(self, backbone, lm_head=None, language_id=None, **kwargs):
        super().__init__(dtype=backbone.dtype_policy, **kwargs)
        if not backbone.causal:
            raise ValueError("XLM generates with its CLM models (causal=True); this "
                             "backbone is an MLM encoder: score text with it instead.")
        language_id = 0 if language_id is None else int(language_id)
        if not 0 <= language_id < backbone.num_languages:
            raise ValueError(f"language id {language_id} is not one of the backbone's "
                             f"{backbone.num_languages} languages; pass 0..."
                             f"{backbone.num_languages - 1} (its lang2id).")
        if lm_head is None:  # XLM's PredLayer: the tied table and a bias (asm=False)
            lm_head = MaskedLMHead(token_embedding=backbone.token_embedding, transform=False,
                                   dtype=backbone.dtype_policy, name="lm_head")
            lm_head.build((None, None, backbone.hidden_size))
        elif getattr(lm_head, "token_embedding", None) is not backbone.token_embedding:
            raise ValueError("lm_head reads another token table than this backbone's: pass "
                             "the head made with it (its pretrainer's lm_head, or "
                             "masked_lm_from_huggingface's pair).")
        self.backbone = backbone
        self.lm_head = lm_head
        self.language_id = language_id
        self.vocabulary_size = backbone.vocabulary_size
        self.num_layers = backbone.num_layers
        self.num_heads = backbone.num_heads
        self.head_size = backbone.hidden_size // backbone.num_heads
        self.max_sequence_length = backbone.max_sequence_length
        self._languages = (backbone.get_layer("language_embedding")
                           if backbone.use_language_embeddings and backbone.num_languages > 1
                           else None)
        self.built = True

    def with_backbone(self, backbone):
        """This decoder over `backbone`, a copy of this one's (`generation.for_decoding`'s,
        in another precision): the same language, and a PredLayer read from the copy's token
        table with this one's bias. The head holds the table it was made with, not a
        backbone: a copied backbone needs a head of its own, or it decodes through the old
        table (and the copy's int8 or bfloat16 weights go unread there)."""
        decoder = XLMDecoder(backbone, language_id=self.language_id)
        for new, old in zip(decoder.lm_head.own_weights, self.lm_head.own_weights, strict=True):
            new.assign(ops.cast(old, new.dtype))
        return decoder

    def build_cache(self, batch_size, max_length):
        """Zero key/value cache (batch, layers, 2, max_length, heads, head_size)."""
        if max_length > self.max_sequence_length:
            raise ValueError(f"max_length {max_length} exceeds the backbone's "
                             f"max_sequence_length {self.max_sequence_length}; generate "
                             "fewer tokens.")
        return ops.zeros((batch_size, self.num_layers, 2, max_length, self.num_heads,
                          self.head_size), dtype=self.compute_dtype)

    def _embeddings(self, token_ids, start):
        backbone = self.backbone
        positions = start + ops.arange(ops.shape(token_ids)[1], dtype="int32")[None, :]
        x = (backbone.token_embedding(token_ids)
             + backbone.get_layer("position_embedding")(positions))
        if self._languages is not None:
            x = x + self._languages(ops.full(ops.shape(positions), self.language_id, "int32"))
        return backbone.get_layer("embeddings_norm")(x)

    def call_with_cache(self, token_ids, cache, cache_update_index):
        """Runs `token_ids` (batch, t) at positions cache_update_index.. with the cache.

        XLMBackbone's encoder blocks (post-LN, adapters included) with causal
        self-attention over the cache; inference only (no dropout).
        Returns `(sequence_output, cache)`.
        """
        x = self._embeddings(token_ids, cache_update_index)
        caches = []
        for i, block in enumerate(self.backbone.get_layer("encoder").blocks):
            residual = x
            if block.normalize_first:
                x = block.self_attention_norm(x)
            x, layer_cache = block.self_attention(
                x, use_causal_mask=True, cache=cache[:, i],
                cache_update_index=cache_update_index)
            x = block._add_and_norm("attention", residual, x, block.self_attention_norm, False)
            residual = x
            if block.normalize_first:
                x = block.feedforward_norm(x)
            x = block.feedforward(x)
            x = block._add_and_norm("feedforward", residual, x, block.feedforward_norm, False)
            caches.append(layer_cache)
        return x, ops.stack(caches, axis=1)

    def logits(self, hidden):
        """Next-token scores: PredLayer's, the tied table read in reverse plus its bias."""
        return self.lm_head(hidden)

    def call(self, inputs, training=False):
        """The backbone on `inputs` with the decoder's positions and language (no cache):
        what `generate(use_cache=False)` re-runs each step."""
        ids = inputs["token_ids"]
        positions = ops.broadcast_to(ops.arange(ops.shape(ids)[1], dtype="int32")[None, :],
                                     ops.shape(ids))
        return self.backbone({"token_ids": ids, "padding_mask": inputs["padding_mask"],
                              "position_ids": positions,
                              "language_ids": ops.full(ops.shape(ids), self.language_id,
                                                       "int32")}, training=training)


def xlm_decoder(backbone, lm_head=None, language_id=None):
    """The XLM family's `decoder` (`keras_ctx.registry.Family`)."""
    return XLMDecoder(backbone, lm_head, language_id)

from keras_ctx.models.backbone import BackbonePreset
"""ERNIE 1.0 (Sun et al. 2019): BERT's network, pretrained with knowledge masking.

ERNIE keeps BERT's multi-layer Transformer encoder (Sec. 3.1) and changes
what is masked (Sec. 3.2): basic units, then whole phrases, then whole
entities (`keras_ctx.data.knowledge_masking`). The backbone is
`BertBackbone`; only the released configuration differs from BERT-base:

    ERNIE 1.0 base (PaddlePaddle/ERNIE ernie_config.json, as PaddleNLP's
    "ernie-1.0" configuration repeats it): 12 layers, hidden 768, 12 heads,
    FFN 4H = 3072 (ernie.py: d_inner_hid = hidden * 4), hidden_act "relu",
    513 position rows, 2 segment rows, vocab_size 18000 (Chinese
    characters and word pieces), post-LN blocks ("dan").

Paddle's layer_norm epsilon default, 1e-5, is used (from memory of
fluid.layers.layer_norm; the config does not list it).
"""

ERNIE_VOCABULARY_SIZE = 18000  # ERNIE 1.0 ernie_config.json
ERNIE_ACTIVATION = "relu"      # ernie_config.json: "hidden_act": "relu"
ERNIE_POSITIONS = 513          # ernie_config.json: max_position_embeddings


def _ernie(num_layers, hidden_size):
    # A = H / 64 and FFN = 4H, as ERNIE 1.0's ernie.py builds the encoder.
    return dict(vocabulary_size=ERNIE_VOCABULARY_SIZE, num_layers=num_layers,
                num_heads=hidden_size // 64, hidden_size=hidden_size,
                intermediate_size=4 * hidden_size, max_sequence_length=ERNIE_POSITIONS,
                type_vocab_size=2, activation=ERNIE_ACTIVATION, layer_norm_epsilon=1e-5)


ERNIE_PRESETS = {
    "ernie-1.0-base": BackbonePreset(
        _ernie(12, 768),
        "ERNIE 1.0 base, Chinese (Sun et al. 2019)", 99_866_112),
}

__all__ = ["ERNIE_PRESETS", "ERNIE_VOCABULARY_SIZE"]

"""ERNIE 1.0: BERT's network in the released configuration, one registry entry."""

import numpy as np

from keras_ctx import families
from keras_ctx.models import BertBackbone, from_preset
from keras_ctx.models.presets import count_parameters, preset_config


def test_ernie_base_is_the_released_configuration():
    backbone_cls, config = preset_config("ernie-1.0-base")
    assert backbone_cls is BertBackbone
    # ERNIE 1.0 ernie_config.json (PaddlePaddle/ERNIE; PaddleNLP "ernie-1.0"):
    released = {"hidden_size": 768, "num_layers": 12, "num_heads": 12,
                "vocabulary_size": 18000, "max_sequence_length": 513, "type_vocab_size": 2,
                "activation": "relu", "intermediate_size": 4 * 768}
    assert {k: config[k] for k in released} == released
    # Closed form, by hand: (V + P + 2) H + 2H, 12 layers, pooler.
    h, f = 768, 3072
    layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h
    expected = (18000 + 513 + 2) * h + 2 * h + 12 * layer + h * h + h
    analytic = BertBackbone.analytic_parameter_count(**config)
    assert count_parameters(backbone_cls, config) == expected == analytic
    assert abs(expected / 1e6 - 99.9) < 0.05


def test_ernie_is_a_family_with_bert_pretraining_and_knowledge_masking():
    family = families.of_preset("ernie-1.0-base")
    assert family.name == "ernie" and family.pooling[2] == "pooled"
    tiny = from_preset("ernie-1.0-base", num_layers=1, num_heads=2, hidden_size=16,
                       intermediate_size=32, vocabulary_size=50)
    pretrainer = family.pretrainer(tiny, None, None)
    assert pretrainer.sentence_objective == "nsp"
    # ERNIE's mask_lm_trans_fc uses hidden_act (relu), then LayerNorm, tied output.
    assert pretrainer.mlm_head.activation == "relu" and pretrainer.head_transform
    assert pretrainer.mlm_head.token_embedding is tiny.token_embedding
    out = tiny({"token_ids": np.ones((1, 4), "int32"), "segment_ids": np.zeros((1, 4), "int32"),
                "padding_mask": np.ones((1, 4), "int32")})
    assert out["pooled_output"].shape == (1, 16)

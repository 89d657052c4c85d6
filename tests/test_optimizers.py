"""keras_ctx.optimizers.bert_adamw: BERT's AdamW (Devlin et al. 2019; its optimization.py)."""

import numpy as np

import keras_ctx


def test_bert_adamw_decays_weights_but_not_biases_or_norms():
    backbone = keras_ctx.models.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                             hidden_size=8, intermediate_size=16,
                                             max_sequence_length=16)
    t5 = keras_ctx.models.T5Backbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                     hidden_size=8, intermediate_size=16)
    variables = backbone.trainable_variables + t5.trainable_variables
    optimizer = keras_ctx.optimizers.bert_adamw(0.1)
    config = optimizer.get_config()
    assert (config["weight_decay"], config["beta_1"], config["beta_2"], config["epsilon"]) == (
        0.01, 0.9, 0.999, 1e-6)
    for v in variables:  # nonzero everywhere, so that decay shows
        v.assign(np.full(v.shape, 2.0, "float32"))
    # Zero gradients: Adam moves nothing, so all that changes is the decoupled decay.
    optimizer.apply([np.zeros(v.shape, "float32") for v in variables], variables)
    moved = {}
    for v in variables:
        value = np.unique(v.numpy())
        assert len(value) == 1, v.path
        moved[v.path] = float(value[0])
    decayed = 2.0 * (1 - 0.1 * 0.01)
    undecayed = [p for p, value in moved.items() if value == 2.0]
    assert all(np.isclose(value, decayed) for p, value in moved.items() if p not in undecayed)
    names = {p.rsplit("/", 1)[-1] for p in undecayed}
    assert names == {"bias", "gamma", "beta", "scale", "relative_attention_bias"}, names
    assert any(p.endswith("embeddings") for p in moved if p not in undecayed)
    assert any(p.endswith("kernel") for p in moved if p not in undecayed)

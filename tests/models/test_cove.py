import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.models.cove.backbone import AttentionalDecoder, Cove, CoveBackbone
from keras_ctx.models.presets import preset_config
from keras_ctx.testing import run_layer_test


def ids_and_mask():
    ids = np.array([[3, 5, 7, 2, 0, 0], [4, 4, 6, 1, 5, 2]], "int32")
    return ids, (ids != 0).astype("int32")


def test_backbone_outputs_and_padding_does_not_leak():
    backbone = CoveBackbone(10, embedding_size=4, hidden_size=5)
    ids, mask = ids_and_mask()
    out = backbone({"token_ids": ids, "padding_mask": mask})
    assert out["sequence_output"].shape == (2, 6, 10)
    assert [h.shape[-1] for h in out["hidden_states"]] == [4, 10, 10]
    # The backward LSTM starts at the last real token: appending padding (any
    # ids) leaves the real positions unchanged.
    longer = np.concatenate([ids, np.full((2, 3), 9, "int32")], 1)
    longer_mask = np.concatenate([mask, np.zeros((2, 3), "int32")], 1)
    out2 = backbone({"token_ids": longer, "padding_mask": longer_mask})
    real = mask.astype(bool)
    np.testing.assert_allclose(
        to_numpy(out2["sequence_output"])[:, :6][real], to_numpy(out["sequence_output"])[real],
        atol=1e-6,
    )
    assert backbone.count_params() == CoveBackbone.from_config(backbone.get_config()).count_params()


def test_embeddings_are_copied_and_fixed():
    table = np.arange(30, dtype="float32").reshape(10, 3)
    backbone = CoveBackbone(10, embedding_size=3, hidden_size=2, embeddings=table)
    np.testing.assert_array_equal(to_numpy(backbone.token_embedding.embeddings), table)
    assert not backbone.token_embedding.trainable
    with pytest.raises(ValueError, match="expected"):
        CoveBackbone(10, embedding_size=4, hidden_size=2, embeddings=table)


def test_cove_preset_parameter_count():
    # McCann et al., 2017: 300-d GloVe, 2-layer biLSTM of 300 per direction.
    lstm = lambda i, h: 4 * h * (i + h) + 4 * h  # noqa: E731
    want = 100_000 * 300 + 2 * lstm(300, 300) + 2 * lstm(600, 300)
    model = CoveBackbone.from_preset("cove-base")
    assert model.count_params() == want
    assert CoveBackbone.analytic_parameter_count(**preset_config("cove-base")[1]) == want
    assert preset_config("cove-base")[1]["hidden_size"] == 300


def test_cove_layer_concatenates_glove_and_cove():
    backbone = CoveBackbone(10, embedding_size=4, hidden_size=5)
    ids, mask = ids_and_mask()
    layer = Cove(backbone)
    got = to_numpy(layer(ids))
    assert got.shape == (2, 6, 14)
    np.testing.assert_allclose(got[..., :4], to_numpy(backbone.token_embedding.embeddings)[ids])
    out = backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"]
    np.testing.assert_allclose(got[..., 4:], to_numpy(out), atol=1e-6)
    np.testing.assert_array_equal(to_numpy(layer.compute_mask(ids)), mask.astype(bool))
    assert layer.trainable_weights == []
    with pytest.raises(ValueError, match="CoveBackbone"):
        Cove(keras.layers.Dense(2))


def test_attentional_decoder_layer_test():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2, 4, 3)).astype("float32")
    encoder = rng.normal(size=(2, 5, 6)).astype("float32")
    run_layer_test(
        AttentionalDecoder,
        {"units": 7, "num_layers": 2},
        {"inputs": z, "encoder_outputs": encoder},
        expected_output_shape=(2, 4, 7),
    )


def test_attentional_decoder_ignores_masked_source_and_is_causal():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(1, 4, 3)).astype("float32")
    encoder = rng.normal(size=(1, 5, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0]], bool)
    layer = AttentionalDecoder(7)
    base = to_numpy(layer(z, encoder, encoder_mask=mask))
    changed = encoder.copy()
    changed[0, 3:] = 100.0  # masked source positions
    np.testing.assert_allclose(to_numpy(layer(z, changed, encoder_mask=mask)), base, atol=1e-6)
    later = z.copy()
    later[0, 2:] += 1.0  # changing later target words leaves earlier steps alone
    new = to_numpy(layer(later, encoder, encoder_mask=mask))
    np.testing.assert_allclose(new[0, :2], base[0, :2], atol=1e-6)
    assert np.abs(new[0, 2:] - base[0, 2:]).max() > 1e-4

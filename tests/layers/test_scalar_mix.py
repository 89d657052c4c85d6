import keras
import numpy as np
import pytest

from keras.ops import convert_to_numpy as to_numpy
from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder, Highway
from keras_ctx.layers.scalar_mix import ScalarMix
from keras_ctx.testing import run_layer_test
from tests.references import softmax


def layers_and_mask(mixture_size=3, batch=2, time=6, dim=4, seed=0):
    rng = np.random.default_rng(seed)
    tensors = [
        (rng.normal(size=(batch, time, dim)) * (j + 1) + j).astype("float32")
        for j in range(mixture_size)
    ]
    mask = np.ones((batch, time), "float32")
    mask[0, 4:] = 0.0  # sequence 0 has 2 padding tokens
    mask[1, 5:] = 0.0  # sequence 1 has 1
    return tensors, mask


def numpy_masked_norm(h, mask):
    """allennlp ScalarMix._do_layer_norm: one mean/variance over unmasked elements."""
    m = np.broadcast_to(mask[..., None], h.shape).astype("float64")
    h = h.astype("float64")
    n = m.sum()
    mean = (h * m).sum() / n
    variance = (((h - mean) * m) ** 2).sum() / n
    return (h - mean) / np.sqrt(variance + 1e-12)


def test_scalar_mix_layer_test():
    tensors, _ = layers_and_mask()
    run_layer_test(
        ScalarMix, {"mixture_size": 3}, tensors, expected_output_shape=(2, 6, 4)
    )


def test_scalar_mix_layer_norm_layer_test():
    tensors, _ = layers_and_mask(seed=1)
    run_layer_test(
        ScalarMix,
        {
            "mixture_size": 3,
            "do_layer_norm": True,
            "initial_scalar_parameters": [0.5, -0.5, 1.0],
        },
        tensors,
        expected_output_shape=(2, 6, 4),
    )


def test_initial_output_is_the_mean():
    tensors, _ = layers_and_mask()
    layer = ScalarMix(mixture_size=3)
    got = to_numpy(layer(tensors))
    np.testing.assert_allclose(got, np.mean(tensors, axis=0), atol=1e-6)
    np.testing.assert_array_equal(to_numpy(layer.scalar_parameters), np.zeros(3))
    assert float(to_numpy(layer.gamma)) == 1.0


def test_hand_set_scalars_and_gamma():
    tensors, _ = layers_and_mask(seed=2)
    s = np.array([1.0, 2.0, 3.0])
    want = 0.5 * sum(w * h for w, h in zip(softmax(s), tensors))

    layer = ScalarMix(mixture_size=3)
    layer.build([t.shape for t in tensors])
    layer.scalar_parameters.assign(s.astype("float32"))
    layer.gamma.assign(0.5)
    np.testing.assert_allclose(to_numpy(layer(tensors)), want, atol=1e-5)

    initialised = ScalarMix(mixture_size=3, initial_scalar_parameters=[1.0, 2.0, 3.0])
    initialised.build([t.shape for t in tensors])
    initialised.gamma.assign(0.5)
    np.testing.assert_allclose(to_numpy(initialised(tensors)), want, atol=1e-5)


def test_layer_norm_matches_numpy_masked_normalisation():
    tensors, mask = layers_and_mask(seed=3)
    s = np.array([0.3, -1.0, 2.0])
    layer = ScalarMix(mixture_size=3, do_layer_norm=True, initial_scalar_parameters=s.tolist())
    layer.build([t.shape for t in tensors])
    layer.gamma.assign(1.7)
    got = to_numpy(layer(tensors, mask=mask))
    want = 1.7 * sum(w * numpy_masked_norm(h, mask) for w, h in zip(softmax(s), tensors))
    np.testing.assert_allclose(got, want, atol=1e-4)
    # The masked statistics differ from the unmasked ones: the mask is used.
    unmasked = to_numpy(layer(tensors))
    assert not np.allclose(unmasked, got, atol=1e-3)
    # Without a mask every position counts as real.
    np.testing.assert_allclose(
        to_numpy(layer(tensors, mask=np.ones_like(mask))), unmasked, atol=1e-5
    )
    want_unmasked = 1.7 * sum(
        w * numpy_masked_norm(h, np.ones_like(mask)) for w, h in zip(softmax(s), tensors)
    )
    np.testing.assert_allclose(unmasked, want_unmasked, atol=1e-4)


def test_padding_does_not_change_layer_norm_statistics():
    tensors, mask = layers_and_mask(seed=4)
    layer = ScalarMix(mixture_size=3, do_layer_norm=True)
    before = to_numpy(layer(tensors, mask=mask))
    rng = np.random.default_rng(5)
    noisy = []
    for h in tensors:
        h = h.copy()
        h[mask == 0] = rng.normal(size=h[mask == 0].shape) * 100.0 + 50.0
        noisy.append(h)
    after = to_numpy(layer(noisy, mask=mask))
    real = mask.astype(bool)
    np.testing.assert_allclose(after[real], before[real], atol=1e-5)
    assert not np.allclose(after[~real], before[~real])


def test_mask_carried_by_inputs_is_used_and_passed_on():
    # ELMo's path: char CNN (computes the token mask) -> layers -> ScalarMix.
    config = {
        "filters": [[1, 4], [2, 8]],
        "projection_dim": 6,
        "max_characters_per_token": 10,
    }
    ids = np.zeros((2, 5, 10), "int32")
    ids[0, :5, :3] = 7
    ids[1, :3, :4] = np.arange(1, 5)
    ids[0, 2, :] = 11
    inputs = keras.Input((5, 10), dtype="int32")
    embedded = CharCNNHighwayEmbedder(**config)(inputs)
    first = Highway(num_layers=1)(embedded)
    second = Highway(num_layers=1)(first)
    mix = ScalarMix(mixture_size=3, do_layer_norm=True)
    mixed = mix([embedded, first, second])
    assert mixed._keras_mask is not None
    model = keras.Model(inputs, [mixed, embedded, first, second])
    got, *hidden = (to_numpy(t) for t in model(ids))
    token_mask = np.any(ids != 0, axis=-1).astype("float32")
    want = to_numpy(mix(hidden, mask=token_mask))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(to_numpy(mix(hidden)), want, atol=1e-4)


def test_mixed_bfloat16_output_dtype_and_float32_weights():
    tensors, mask = layers_and_mask(seed=6)
    layer = ScalarMix(mixture_size=3, do_layer_norm=True, dtype="mixed_bfloat16")
    out = layer(tensors, mask=mask)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)


def test_wrong_number_of_inputs():
    tensors, _ = layers_and_mask()
    layer = ScalarMix(mixture_size=3)
    with pytest.raises(ValueError, match=r"mixture_size=3.*received 2 tensors"):
        layer(tensors[:2])
    layer(tensors)
    with pytest.raises(ValueError, match=r"mixture_size=3.*received 4 tensors"):
        layer(tensors + tensors[:1])
    with pytest.raises(ValueError, match="list of `mixture_size`"):
        ScalarMix(mixture_size=3)(tensors[0])


def test_inputs_of_different_shapes():
    tensors, _ = layers_and_mask()
    tensors[1] = tensors[1][:, :, :3]
    with pytest.raises(ValueError, match="one shape"):
        ScalarMix(mixture_size=3)(tensors)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mixture_size": 0}, "mixture_size"),
        ({"mixture_size": 2.0}, "mixture_size"),
        ({"mixture_size": 3, "initial_scalar_parameters": [0.0, 1.0]}, "initial_scalar_parameters"),
        ({"mixture_size": 2, "initial_scalar_parameters": ["a", "b"]}, "initial_scalar_parameters"),
        ({"mixture_size": 2, "initial_scalar_parameters": 1.0}, "initial_scalar_parameters"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScalarMix(**kwargs)


def test_not_trainable_freezes_scalars_and_gamma():
    tensors, _ = layers_and_mask()
    layer = ScalarMix(mixture_size=3, trainable=False)
    layer(tensors)
    assert layer.trainable_weights == []
    assert len(layer.non_trainable_weights) == 2
    assert ScalarMix.from_config(layer.get_config()).trainable is False

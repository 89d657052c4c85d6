"""Every family's backbone through the one harness, `keras_ctx.testing.run_backbone_test`."""

import numpy as np
import pytest

from keras_ctx import families
from keras_ctx.models.presets import preset_config
from keras_ctx.testing import run_backbone_test
from tests.tiny_backbones import TINY, backbone_inputs



def test_every_family_declares_its_tiny_config():
    missing = [name for name in families.names() if not families.get(name).tiny]
    assert not missing, f"declare Family.tiny (a test size) in their family.py: {missing}"


@pytest.mark.parametrize("family", sorted(TINY))
def test_backbone_contract(family):
    preset = next(iter(families.get(family).presets))
    backbone_cls, config = preset_config(preset)
    config.update(TINY[family])
    # BERT's count by hand (Devlin et al. 2019's layout): embeddings
    # (V + P + 2) H + 2H, one layer 4(H^2 + H) + 2H + (HF + F) + (FH + H) + 2H,
    # pooler H^2 + H; V=50, H=16, F=32, P=512.
    expected = {"bert": (50 + 512 + 2) * 16 + 32 + 1088 + 32 + 544 + 528 + 32 + 272}
    probe = backbone_cls(**config)
    run_backbone_test(backbone_cls, config, backbone_inputs(probe, np.random.default_rng(0)),
                      expected_parameter_count=expected.get(family))


def test_a_weights_file_of_another_configuration_is_refused_by_load_weights(tmp_path):
    """`backbone.load_weights` (Keras' own name) of a `.weights.h5` saved from another depth
    or width raises one line and changes nothing (Keras set what it found by name:
    a 2-block file into a 1-block model loaded silently)."""
    import keras

    from keras_ctx.common.errors import CheckpointError
    from keras_ctx.models import from_preset

    small = dict(vocabulary_size=50, max_sequence_length=16, hidden_size=32, num_heads=2,
                 intermediate_size=64, num_layers=2)

    def bert(seed=0, **config):
        keras.utils.set_random_seed(seed)
        return from_preset("bert-tiny", **dict(small, **config))

    path = str(tmp_path / "deep.weights.h5")
    bert(seed=1).save_weights(path)
    for config in (dict(num_layers=1), dict(num_layers=3)):
        model = bert(**config)
        before = [w.copy() for w in model.get_weights()]
        with pytest.raises(CheckpointError, match="saved from another configuration"):
            model.load_weights(path)
        for a, b in zip(model.get_weights(), before):
            np.testing.assert_array_equal(a, b)
    same = bert()
    same.load_weights(path)  # the configuration it came from loads
    for a, b in zip(same.get_weights(), bert(seed=1).get_weights()):
        np.testing.assert_array_equal(a, b)

"""Every family's backbone at test size (its Family.tiny), and inputs for any backbone."""

import numpy as np

from keras_ctx import families
from keras_ctx.models.presets import preset_config


def _tiny(family):
    """The family's own `Family.tiny`, with the tests' vocabulary of 50 where it has one."""
    config = preset_config(next(iter(family.presets)))[1]
    return dict(family.tiny, **({"vocabulary_size": 50} if "vocabulary_size" in config else {}))


TINY = {name: _tiny(families.get(name)) for name in families.names()}


def backbone_inputs(backbone, rng, batch=2, length=6):
    """Random ids (1..49), a padding mask with the second row's last two positions
    padded, and zero segment ids, for every input `backbone` takes."""
    data = {}
    for name, tensor in backbone.input.items():
        shape = (batch, length) + tuple(tensor.shape[2:])
        if "padding_mask" in name:
            values = np.ones(shape, "int32")
            values[1, -2:] = 0
        elif name == "segment_ids":
            values = np.zeros(shape, "int32")
        else:
            values = rng.integers(1, 50, size=shape).astype("int32")
        data[name] = values
    return data

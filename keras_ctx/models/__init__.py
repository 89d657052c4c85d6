"""Backbones (functional keras.Model) of every family, and their presets.

Importing a family module registers its presets.
"""

from keras_ctx.models.backbone import Backbone
from keras_ctx.models.presets import from_preset, list_presets, register_preset

# Family modules (each registers its presets):

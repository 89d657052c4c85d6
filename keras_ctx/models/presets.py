"""Named sizes of every backbone family: `from_preset(name)`, `list_presets()`.

Presets are data: each family's module under `keras_ctx.families` names its
presets and registers them with the family in `keras_ctx.registry`, so every
preset carries its family. `build(name)` makes a randomly initialised backbone
of a preset; `from_preset(handle)` also takes checkpoints (local, hf://,
kaggle://) through `keras_ctx.handles`, the one resolver of model handles.
"""

import dataclasses
import inspect

from keras_ctx import registry


@dataclasses.dataclass(frozen=True)
class Preset:
    """One named configuration of a family's backbone, with its `Family` (the registry's)."""

    name: str
    family: object
    backbone_cls: type
    config: dict
    description: str = ""

    @property
    def parameter_count(self):
        return count_parameters(self.backbone_cls, self.config)


def preset_names():
    """Every preset's name, sorted."""
    return registry.preset_names()


def get_preset(name):
    """The `Preset` of `name`, with a clear error if unknown (the one registry lookup)."""
    family = registry.of_preset(name)
    config, description = family.presets[name]
    return Preset(name, family, family.backbone, dict(config), description)


def preset_config(name):
    """(backbone class, config dict) of a preset, with a clear error if unknown."""
    preset = get_preset(name)
    return preset.backbone_cls, dict(preset.config)


def preset_family(name):
    """The family name a preset belongs to."""
    return get_preset(name).family.name


def from_preset(handle, **overrides):
    """The backbone a handle names, with its `.tokenizer`.

    Args:
        handle: a preset name (random weights, said in one log line), a local
            checkpoint or run directory, `hf://ORG/NAME[@REVISION]` or
            `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]`
            (`keras_ctx.handles`).
        **overrides: backbone config values to change (unknown keys raise).

    Returns:
        The backbone.
    """
    return registry.service("from_preset")(handle, **overrides)  # keras_ctx.handles


def build(preset, **overrides):
    """A randomly initialised backbone of a preset (a `Preset` or its name); `overrides`
    change its config."""
    from keras_ctx.common.validation import check_overrides

    if not isinstance(preset, Preset):
        preset = get_preset(preset)
    config = dict(preset.config)
    check_overrides(preset.name, preset.backbone_cls, config, overrides)
    config.update(overrides)
    backbone = preset.backbone_cls(**config)
    # Families that share a class (ERNIE and BERT) are told apart by this, as
    # the converters do for checkpoints.
    backbone.family = preset.family.name
    return backbone


def list_presets(family=None):
    """[(name, backbone class name, parameter count, description)].

    `family` keeps the presets whose family name or backbone class name
    contains it (case-insensitive): "gpt" lists GPT and GPT-2.
    """
    rows = []
    for name in preset_names():
        preset = get_preset(name)
        if family and family.lower() not in (
                preset.family.name + " " + preset.backbone_cls.__name__).lower():
            continue
        rows.append((name, preset.backbone_cls.__name__, preset.parameter_count,
                     preset.description))
    return rows


def count_parameters(backbone_cls, config):
    """Parameter count of a config: closed form when the family has one, else built.

    Families define `analytic_parameter_count(**config)` so that listing
    presets never allocates gpt2-xl; their tests check it against a build.
    """
    analytic = getattr(backbone_cls, "analytic_parameter_count", None)
    if analytic is not None:
        parameters = inspect.signature(analytic).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            config = {k: v for k, v in config.items() if k in parameters}
        return int(analytic(**config))
    model = backbone_cls(**config)
    count = model.count_params()
    del model
    return count


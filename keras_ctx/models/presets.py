"""Named sizes of every backbone family: `from_preset(name)`, `list_presets()`.

Presets are data: each family's entry in `keras_ctx.families` lists its
presets and `register_family` registers them here, so every preset carries
its family. `build(name)` makes a randomly initialised backbone of a preset;
`from_preset(handle)` also takes checkpoints (local, hf://, kaggle://) through
`keras_ctx.handles`, the one resolver of model handles.
"""

import dataclasses

_PRESETS = {}


@dataclasses.dataclass(frozen=True)
class Preset:
    """One named configuration of a family's backbone."""

    name: str
    family: str
    backbone_cls: type
    config: dict
    description: str = ""

    @property
    def parameter_count(self):
        return count_parameters(self.backbone_cls, self.config)


def register_preset(name, backbone_cls, config, description="", *, family):
    """Registers `name` -> `backbone_cls(**config)` of `family`; names are unique."""
    if name in _PRESETS:
        raise ValueError(f"Preset {name!r} is registered twice.")
    _PRESETS[name] = Preset(name, family, backbone_cls, dict(config), description)


def unregister_preset(name):
    """Removes a preset (for tests that register toy families)."""
    _PRESETS.pop(name, None)


def preset_names():
    _load_families()
    return sorted(_PRESETS)


def get_preset(name):
    """The `Preset` of `name`, with a clear error if unknown."""
    _load_families()
    if name not in _PRESETS:
        raise ValueError(
            f"Unknown preset {name!r}. Known presets: {', '.join(preset_names())}. "
            "`keras_ctx.models.list_presets()` lists them with parameter counts."
        )
    return _PRESETS[name]


def preset_config(name):
    """(backbone class, config dict) of a preset, with a clear error if unknown."""
    preset = get_preset(name)
    return preset.backbone_cls, dict(preset.config)


def preset_family(name):
    """The family name a preset belongs to."""
    return get_preset(name).family


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
    from keras_ctx import handles

    return handles.from_preset(handle, **overrides)


def build(name, **overrides):
    """A randomly initialised backbone of the named size; `overrides` change its config."""
    from keras_ctx.validation import check_overrides

    backbone_cls, config = preset_config(name)
    check_overrides(name, backbone_cls, config, overrides)
    config.update(overrides)
    backbone = backbone_cls(**config)
    # Families that share a class (ERNIE and BERT) are told apart by this, as
    # the converters do for checkpoints.
    backbone.family = get_preset(name).family
    return backbone


def list_presets(family=None):
    """[(name, backbone class name, parameter count, description)].

    `family` keeps the presets whose family name or backbone class name
    contains it (case-insensitive): "gpt" lists GPT and GPT-2.
    """
    rows = []
    for name in preset_names():
        preset = _PRESETS[name]
        if family and family.lower() not in (
                preset.family + " " + preset.backbone_cls.__name__).lower():
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
        import inspect

        parameters = inspect.signature(analytic).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            config = {k: v for k, v in config.items() if k in parameters}
        return int(analytic(**config))
    model = backbone_cls(**config)
    count = model.count_params()
    del model
    return count


def _load_families():
    # The registry registers the built-in presets when it is first imported.
    import keras_ctx.families  # noqa: F401

"""Named sizes of every backbone family: `from_preset(name)`, `list_presets()`.

Each family module registers its presets at import with `register_preset`.
A preset builds a randomly initialised backbone; published weights are loaded
by `keras_ctx.convert`.
"""

_PRESETS = {}


def register_preset(name, backbone_cls, config, description=""):
    """Registers `name` -> `backbone_cls(**config)`; names are unique."""
    if name in _PRESETS:
        raise ValueError(f"Preset {name!r} is registered twice.")
    _PRESETS[name] = (backbone_cls, dict(config), description)


def preset_names():
    return sorted(_PRESETS)


def preset_config(name):
    """(backbone class, config dict) of a preset, with a clear error if unknown."""
    if name not in _PRESETS:
        raise ValueError(
            f"Unknown preset {name!r}. Known presets: {', '.join(preset_names())}. "
            "`keras_ctx.models.list_presets()` lists them with parameter counts."
        )
    backbone_cls, config, _ = _PRESETS[name]
    return backbone_cls, dict(config)


def from_preset(name, **overrides):
    """A randomly initialised backbone of the named size; `overrides` change its config."""
    from keras_ctx.validation import check_overrides

    backbone_cls, config = preset_config(name)
    check_overrides(name, backbone_cls, config, overrides)
    config.update(overrides)
    return backbone_cls(**config)


def list_presets(family=None):
    """[(name, backbone class name, parameter count, description)].

    `family` keeps the presets whose name or backbone class contains it.
    """
    rows = []
    for name in preset_names():
        backbone_cls, config, description = _PRESETS[name]
        if family and family.lower() not in (name + backbone_cls.__name__).lower():
            continue
        rows.append((name, backbone_cls.__name__, count_parameters(backbone_cls, config),
                     description))
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

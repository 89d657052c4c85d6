"""Checks of user input made before any work: config keys and the CLI's numbers.

`check_config_keys` is what makes `from_preset("bert-tiny", hiden_size=64)`
raise (naming `hidden_size`) instead of building the unchanged preset.
`check_training_args` range-checks the numeric flags of `pretrain` and
`finetune` so that `--learning-rate -1` or `--steps 0` fail in one line
before a tokenizer is trained.
"""

import difflib
import inspect
import math

from keras_ctx.errors import ConfigError

# Keys every Keras layer/model accepts besides its own arguments.
_KERAS_KEYS = ("name", "dtype", "trainable")
# Enough pieces past the special tokens for the tokenizer to spell words
# (a 5-id vocabulary is only [PAD] [UNK] [CLS] [SEP] [MASK]: nothing to learn).
MIN_VOCABULARY_SIZE = 64


def closest(key, valid):
    """' (did you mean 'x'?)' for the closest valid key, or ''."""
    match = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def check_config_keys(owner, valid, keys, what="config key"):
    """Raises ConfigError on the first of `keys` not in `valid`, naming the closest."""
    for key in keys:
        if key not in valid:
            raise ConfigError(f"Unknown {what} {key!r} for {owner}{closest(key, valid)}; "
                              f"valid: {', '.join(sorted(valid))}.")


def constructor_keys(cls, config=()):
    """The keyword arguments `cls(**config)` really uses: its signature's and `config`'s.

    A subclass whose `__init__` forwards `**kwargs` (e.g. `RobertaBackbone`)
    also accepts its keras_ctx bases' arguments.
    """
    keys = set(config) | set(_KERAS_KEYS)
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        if not klass.__module__.startswith("keras_ctx"):
            break
        parameters = inspect.signature(klass.__init__).parameters
        keys |= {n for n, p in parameters.items() if n != "self"
                 and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
            break
    return keys


def check_overrides(preset, backbone_cls, config, overrides):
    """Unknown override keys of a preset raise, naming the closest valid one."""
    check_config_keys(f"preset {preset!r} ({backbone_cls.__name__})",
                      constructor_keys(backbone_cls, config), overrides)


def _positive_int(flag, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}.")


def check_training_args(steps=None, batch_size=None, sequence_length=None,
                        checkpoint_every=None, epochs=None, learning_rate=None,
                        vocabulary_size=None):
    """Range checks of the numeric settings `pretrain` and `finetune` share (None: unset)."""
    for flag, value in (("steps", steps), ("batch_size", batch_size),
                        ("sequence_length", sequence_length),
                        ("checkpoint_every", checkpoint_every), ("epochs", epochs)):
        _positive_int("--" + flag.replace("_", "-"), value)
    rate = learning_rate
    if rate is not None and not (isinstance(rate, (int, float)) and math.isfinite(rate)
                                 and rate > 0):
        raise ConfigError(f"--learning-rate must be a positive finite number, got {rate!r}.")
    vocabulary = vocabulary_size
    if vocabulary is not None and (isinstance(vocabulary, bool)
                                   or not isinstance(vocabulary, int)
                                   or vocabulary < MIN_VOCABULARY_SIZE):
        raise ConfigError(
            f"--vocabulary-size must be at least {MIN_VOCABULARY_SIZE} (the special tokens "
            f"plus pieces to spell words with), got {vocabulary!r}.")


def check_override_values(preset, family, config, overrides, sequence_length):
    """Refuses `--set` values that could not be applied as given, before any work.

    Args:
        preset: the preset name (for the messages).
        family: its `keras_ctx.families.Family`.
        config: the backbone config the run builds from (the preset's, the
            recipe's and the overrides merged).
        overrides: the user's `--set` values.
        sequence_length: the run's `--sequence-length`.
    """
    if family.sized_by_tokenizer and "vocabulary_size" in overrides:
        raise ConfigError(
            f"--set vocabulary_size cannot be applied to {preset}: its embedding has one row "
            "per entry of the tokenizer trained on the corpus; use --vocabulary-size "
            f"{overrides['vocabulary_size']} instead.")
    for key, value in overrides.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--set {key}={value!r}: config values must be finite numbers.")
        if key.endswith("dropout") or key.endswith("dropout_rate"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0 <= value < 1):
                raise ConfigError(f"--set {key} must be a number in [0, 1), got {value!r}.")
    limit = config.get("max_sequence_length")
    if isinstance(limit, int) and sequence_length is not None and sequence_length > limit:
        where = "--set max_sequence_length" if "max_sequence_length" in overrides else preset
        raise ConfigError(
            f"--sequence-length {sequence_length} is longer than the backbone's "
            f"max_sequence_length {limit} (from {where}): use --sequence-length <= {limit}"
            f" or --set max_sequence_length={sequence_length}.")


def check_overrides_applied(preset, backbone, overrides):
    """Raises when a built backbone's config differs from an override it was given.

    The last guard of "every --set key is applied or refused": a key a
    constructor accepts but replaces (or a recipe recomputes) is reported,
    never recorded in run.json and ignored.
    """
    config = backbone.get_config()
    for key, value in overrides.items():
        if key in config and _normalised(config[key]) != _normalised(value):
            raise ConfigError(f"--set {key}={value!r} was not applied to {preset}: the built "
                              f"backbone has {key}={config[key]!r}.")


def _normalised(value):
    import json

    return json.loads(json.dumps(value))  # tuples and lists compare equal


def check_export_path(path):
    """An --export path that exists must be a directory (versions go under it)."""
    import os

    if path and os.path.lexists(path) and not os.path.isdir(path):
        raise ConfigError(f"--export {path} exists and is not a directory; choose another "
                          "path (the export goes to PATH/<version>/).")

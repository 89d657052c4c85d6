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

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
    """The keyword arguments `cls(**config)` really uses: its signature's and `config`'s."""
    parameters = inspect.signature(cls.__init__).parameters
    keys = {n for n, p in parameters.items() if n != "self"
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return keys | set(config) | set(_KERAS_KEYS)


def check_overrides(preset, backbone_cls, config, overrides):
    """Unknown override keys of a preset raise, naming the closest valid one."""
    check_config_keys(f"preset {preset!r} ({backbone_cls.__name__})",
                      constructor_keys(backbone_cls, config), overrides)


def _positive_int(flag, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise ConfigError(f"{flag} must be a positive integer, got {value!r}.")


def check_training_args(args):
    """Range checks of the numeric flags `pretrain` and `finetune` share."""
    for flag in ("steps", "batch_size", "sequence_length", "checkpoint_every", "epochs"):
        _positive_int("--" + flag.replace("_", "-"), getattr(args, flag, None))
    rate = getattr(args, "learning_rate", None)
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"--learning-rate must be a positive finite number, got {rate!r}.")
    vocabulary = getattr(args, "vocabulary_size", None)
    if vocabulary is not None and (isinstance(vocabulary, bool)
                                   or not isinstance(vocabulary, int)
                                   or vocabulary < MIN_VOCABULARY_SIZE):
        raise ConfigError(
            f"--vocabulary-size must be at least {MIN_VOCABULARY_SIZE} (the special tokens "
            f"plus pieces to spell words with), got {vocabulary!r}.")

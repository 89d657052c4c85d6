"""Checks of user input made before any work: config keys and the CLI's numbers.

`check_config_keys` is what makes `from_preset("bert-tiny", hiden_size=64)`
raise (naming `hidden_size`) instead of building the unchanged preset.
`check_args` range-checks the numeric flags of every command (one table,
`FLAGS`) so that `--learning-rate -1`, `--steps 0` or `--workers -2` fail in
one line naming the flag, before a tokenizer is trained or `--out` written.
"""

import difflib
import inspect
import math
import numbers

from keras_ctx.common import files
from keras_ctx.common.errors import ConfigError

# Keys every Keras layer/model accepts besides its own arguments.
_KERAS_KEYS = ("name", "dtype", "trainable")
# Enough pieces past the special tokens for the tokenizer to spell words
# (a 5-id vocabulary is only [PAD] [UNK] [CLS] [SEP] [MASK]: nothing to learn).
MIN_VOCABULARY_SIZE = 64


def closest(key, valid, prefix=""):
    """' (did you mean 'x'?)' for the closest valid key (named after `prefix`: a nested
    field's path), or ''."""
    match = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
    return f" (did you mean {prefix + match[0]!r}?)" if match else ""


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
    owner = f"preset {preset!r} ({backbone_cls.__name__})"
    check_config_keys(owner, constructor_keys(backbone_cls, config), overrides)
    check_override_types(owner, {**constructor_defaults(backbone_cls), **config}, overrides)


# Every numeric flag of every command, by its Python name: (type, least value).
# Each command's Python function checks its own with `check_args` (the CLI adds none):
# one table, so a new flag without an entry fails tests/commands/test_arguments.py.
FLAGS = {
    "steps": (int, 1), "batch_size": (int, 1), "sequence_length": (int, 1),
    "checkpoint_every": (int, 1), "epochs": (int, 1), "lm_epochs": (int, 1),
    "warm_up_steps": (int, 1), "workers": (int, 1), "duplicate": (int, 1),
    "tokenizer_sample": (int, 1), "shard_mb": (int, 1), "shard_bytes": (int, 1),
    "version": (int, 1), "max_length": (int, 1), "seed": (int, 0),
    "vocabulary_size": (int, MIN_VOCABULARY_SIZE), "learning_rate": (float, 0.0),
    "reduction_factor": (int, 1),
}


# ------------------------------------------------------- one vocabulary of checks

# What the Python functions the commands call (peft, tasks, transfer recipes) check their
# numeric arguments with, naming the argument: NaN, inf, a bool, 0 or a negative number
# where the value must be positive, a rate outside its range, are refused before any work.

def _integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _real(value):
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value))


def _refuse(label, what, value, error=ConfigError, hint=""):
    """The one message of a broken range rule: "{label} must be {what}, got {value!r}."
    (`hint`, e.g. " (did you mean 'x'?)", goes before the full stop). The error's `rule`
    is `what`, for a caller that words its own subject (a checkpoint's field)."""
    refusal = error(f"{label} must be {what}, got {value!r}{hint}.")
    refusal.rule = what
    raise refusal


def refuse(name, what, value, hint=""):
    """Raises ConfigError "`name` must be {what}, got {value!r}{hint}.": the one message,
    for a rule only one caller has."""
    _refuse(f"`{name}`", what, value, hint=hint)


def _integer_rule(least):
    return "a positive integer" if least == 1 else f"an integer >= {least}"


def positive_int(name, value, least=1, error=ConfigError, why=None):
    """`value` as an int when it is an integer >= `least` (1); else `error` (ConfigError)
    naming `name` and, where given, `why` the bound is what it is. Bools, floats (1.5,
    3.0) and strings ("3") are refused."""
    if not _integer(value) or value < least:
        _refuse(f"`{name}`", _integer_rule(least) + (f" ({why})" if why else ""), value, error)
    return int(value)


def optional_positive_int(name, value, error=ConfigError):
    """None, or `value` as a positive int (`positive_int`)."""
    return None if value is None else positive_int(name, value, error=error)


def integer_in(name, value, least, most, why=None):
    """`value` as an int when it is an integer in least..most (both included)."""
    if not _integer(value) or not least <= value <= most:
        _refuse(f"`{name}`", f"an integer in {least}..{most}" + (f" ({why})" if why else ""),
                value)
    return int(value)


def non_negative_int(name, value, why=None):
    """`value` as an int when it is an integer >= 0."""
    return positive_int(name, value, least=0, why=why)


def finite_number(name, value):
    """`value` as a float when it is a finite number (not NaN, inf or a bool)."""
    if not _real(value):
        _refuse(f"`{name}`", "a finite number", value)
    return float(value)


def positive_number(name, value):
    """`value` as a float when it is a finite number > 0 (not NaN, inf or a bool)."""
    if not _real(value) or value <= 0:
        _refuse(f"`{name}`", "a positive finite number", value)
    return float(value)


def optional_positive_number(name, value):
    """None, or `value` as a positive finite float (`positive_number`)."""
    return None if value is None else positive_number(name, value)


def non_negative_number(name, value):
    """`value` as a float when it is a finite number >= 0."""
    return number_at_least(name, value, 0)


def number_at_least(name, value, least):
    """`value` as a float when it is a finite number >= `least` (a ratio >= 1)."""
    if not _real(value) or value < least:
        _refuse(f"`{name}`", f"a finite number >= {least}", value)
    return float(value)


def rate(name, value):
    """`value` as a float when it is a rate in [0, 1) (dropout: 1 would drop everything)."""
    if not _real(value) or not 0 <= value < 1:
        _refuse(f"`{name}`", "a number in [0, 1)", value)
    return float(value)


def fraction(name, value):
    """`value` as a float when it is in (0, 1] (a decay, a share of something)."""
    if not _real(value) or not 0 < value <= 1:
        _refuse(f"`{name}`", "a number in (0, 1]", value)
    return float(value)


def probability(name, value):
    """`value` as a float when it is a probability in [0, 1] (1: always)."""
    if not _real(value) or not 0 <= value <= 1:
        _refuse(f"`{name}`", "a number in [0, 1]", value)
    return float(value)


def open_fraction(name, value):
    """`value` as a float when it is strictly between 0 and 1 (a share of the tokens
    masked, of the steps spent warming up: neither none nor all)."""
    if not _real(value) or not 0 < value < 1:
        _refuse(f"`{name}`", "a number in (0, 1)", value)
    return float(value)


def shares(**rates):
    """The probabilities `rates` (by name) as floats, refused unless they sum to at most 1
    (parts of one draw: BERT's 80% [MASK] + 10% random token)."""
    values = {name: probability(name, value) for name, value in rates.items()}
    if sum(values.values()) > 1:
        names = " + ".join(f"`{name}`" for name in values)
        given = " + ".join(repr(value) for value in values.values())
        raise ConfigError(f"{names} must be at most 1, got {given} = "
                          f"{round(sum(values.values()), 9)!r}.")
    return tuple(values.values())


def even_positive_int(name, value, why):
    """`value` as an int when it is an even integer >= 2 (`why` it must be even)."""
    if not _integer(value) or value < 1 or value % 2:
        _refuse(f"`{name}`", f"a positive even integer ({why})", value)
    return int(value)


def positive_ints(name, value):
    """`value` as a list of ints when it is a non-empty list or tuple of positive integers."""
    if not isinstance(value, (list, tuple)) or not value or not all(
            _integer(item) and item >= 1 for item in value):
        _refuse(f"`{name}`", "a non-empty list of positive integers", value)
    return [int(item) for item in value]


def divisor(name, value, lengths, why=None):
    """`value` as an int when it is a positive integer that divides each of `lengths` (a
    block size that tiles every part); the message lists the ones that do."""
    common = math.gcd(*lengths)
    if not _integer(value) or not 1 <= value <= common or common % value:
        fits = ", ".join(str(d) for d in range(1, common + 1) if common % d == 0)
        whole = " and ".join(str(length) for length in lengths)
        _refuse(f"`{name}`", f"one of {fits} (a divisor of {whole}"
                + (f", {why})" if why else ")"), value)
    return int(value)


def boolean(name, value):
    """`value` when it is True or False (not 1, "yes" or None)."""
    if not isinstance(value, bool):
        _refuse(f"`{name}`", "True or False", value)
    return value


def one_of(name, value, choices, error=ConfigError):
    """`value` when it is one of `choices`; else `error` listing them and, for a
    misspelt name, the closest ("did you mean 'bi'?")."""
    if isinstance(value, (list, dict, set)) or value not in choices:
        hint = closest(value, [str(c) for c in choices]) if isinstance(value, str) else ""
        listed = ", ".join(repr(c) for c in sorted(choices, key=str))
        _refuse(f"`{name}`", f"one of {listed}", value, error, hint)
    return value


# Upper bounds where a flag has one: NumPy's and Keras' seeds are 32-bit (a larger one
# failed after --out was claimed, naming no flag).
MOST = {"seed": 2 ** 32 - 1}


def flag_name(name):
    """The command-line spelling of a Python argument name: batch_size -> --batch-size."""
    return "--" + name.replace("_", "-")


def check_arg(name, value):
    """Raises ConfigError naming the flag when `value` is outside `FLAGS[name]` (None: unset)."""
    kind, least = FLAGS[name]
    if value is None:
        return
    flag = flag_name(name)
    if kind is float:
        if not _real(value) or value <= least:
            _refuse(flag, "a positive finite number", value)
        return
    if not _integer(value) or value < least:
        if name == "vocabulary_size":
            raise ConfigError(
                f"{flag} must be at least {least} (the special tokens plus pieces to spell "
                f"words with), got {value!r}.")
        _refuse(flag, _integer_rule(least), value)
    if name in MOST and value > MOST[name]:
        _refuse(flag, f"at most {MOST[name]}", value)


def check_args(**values):
    """Range checks of a command's numeric arguments, by name (see `FLAGS`; None: unset)."""
    for name, value in values.items():
        check_arg(name, value)


def check_given(**values):
    """Refuses a text argument given as an empty string (a path, a word): "" is not "not
    given" (None is), so `export=""` does not silently skip the export."""
    import os

    for name, value in values.items():
        if isinstance(value, (str, os.PathLike)) and not os.fspath(value).strip():
            raise ConfigError(f"{flag_name(name)} is empty ({os.fspath(value)!r}): give a "
                              "value, or leave it out for its default.")


def check_override_types(owner, defaults, overrides):
    """Refuses `--set` values of another type than the key's default, before any work.

    Args:
        owner: what the keys configure (for the message).
        defaults: {key: the value the backbone would take without the override}.
        overrides: the user's `--set` values.

    `--set first_layer_size=abc` would otherwise reach a layer as a string
    (a TypeError deep in Keras), `--set num_layers=0` build an empty model.
    """
    for key, value in overrides.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"--set {key}={value!r}: config values must be finite numbers.")
        if key.endswith("dropout") or key.endswith("dropout_rate"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0 <= value < 1):
                _refuse(f"--set {key}", "a number in [0, 1)", value)
        default = defaults.get(key)
        if default is None or value is None:
            continue
        expected = _kind(default)
        if expected is not None and _kind(value) not in (expected, *_WIDER.get(expected, ())):
            raise ConfigError(
                f"--set {key}={value!r}: {owner} takes {key} as {expected} (default "
                f"{default!r}); give one, e.g. --set {key}={default!r}.")
        if expected == "an integer" and (key.startswith("num_") or key.endswith("_size")) and (
                value < 1):
            _refuse(f"--set {key}", _integer_rule(1), value)


_WIDER = {"a number": ("an integer",), "a list": ("a tuple",), "a tuple": ("a list",)}


def _kind(value):
    for kind, types in (("a boolean", bool), ("an integer", int), ("a number", float),
                        ("a string", str), ("a list", list), ("a tuple", tuple),
                        ("a mapping", dict)):
        if isinstance(value, types):
            return kind
    return None


def constructor_defaults(cls):
    """{argument: default} of `cls.__init__` and of its keras_ctx bases it forwards to."""
    defaults = {}
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass) and klass.__module__.startswith("keras_ctx"):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if parameter.default is not parameter.empty:
                    defaults[name] = parameter.default
    return defaults


def check_set(owner, cls, overrides, config=(), set_by_command=("vocabulary_size",)):
    """`--set` keys and value types for a model `cls` a command builds (ulmfit, cvt).

    Args:
        owner: what the keys configure, for the messages.
        cls: the model class the overrides go to.
        overrides: the user's `--set` values.
        config: the config the command starts from (its values are the defaults).
        set_by_command: keys the command sets itself from its own flags.
    """
    for key in set_by_command:
        if key in overrides:
            raise ConfigError(f"--set {key} cannot be applied to {owner}: the command sets "
                              f"it; use {flag_name(key)} {overrides[key]!r} instead.")
    check_config_keys(owner, constructor_keys(cls, config), overrides)
    check_override_types(owner, {**constructor_defaults(cls), **dict(config)}, overrides)


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


# ---------------------------------------------------------------- files' fields

def read_fields(path, what, schema, fix, closed=True):
    """The JSON object in `path` (`files.read_json`, naming `what`), checked against
    `schema` by `check_fields`: the one read of a record keras-ctx wrote."""
    return check_fields(path, files.read_json(path, what, fix), schema, fix, closed=closed)


def check_fields(path, record, schema, fix, closed=False):
    """Raises ConfigError naming `path`, the field and `fix` when `record` breaks `schema`.

    The one schema path of the files keras-ctx reads back (run.json,
    pretrain_settings.json, prepared manifests, shard records): a
    hand-edited or damaged file fails here in one line, before anything is
    built from it or claimed.

    Args:
        path: the file (for the message).
        record: its parsed JSON value.
        schema: {field: (kinds, least value or None, required)}; kinds: a type, or a
            tuple of types, where a nested value's type may be a `Record`, `ListOf` or
            `MapOf` (checked field by field, named by its path: `sizes.hidden_size`,
            `shards[0].file`); ints are never bools.
        fix: what the user should do, ending the message.
        closed: every field of `record` must be in `schema` (a field any version of
            the file's writer wrote: `object` for one read without a check); an
            unknown one (a typo, a renamed field) raises naming the closest. Nested
            `Record`s are always closed.

    Returns:
        `record`.
    """
    if not isinstance(record, dict):
        raise ConfigError(f"{path} holds {type(record).__name__}, not a JSON object: {fix}.")
    _check_record(path, "", record, schema, fix, closed)
    return record


class Record:
    """A nested JSON object of known fields: `schema` as `check_fields` takes it, closed
    (run.json's tokenizer_sample, a manifest's settings)."""

    name = "an object"

    def __init__(self, schema):
        self.schema = schema

    def check(self, path, where, value, fix):
        if not isinstance(value, dict):
            return False
        _check_record(path, where + ".", value, self.schema, fix, closed=True)
        return True


class ListOf:
    """A JSON list whose every item is of `kinds` (as in a schema) and >= `least`
    (finetune.json's classes: strings; a shard's token counts: integers >= 0)."""

    name = "a list"

    def __init__(self, kinds, least=None):
        self.kinds, self.least = kinds, least

    def check(self, path, where, value, fix):
        if not isinstance(value, list):
            return False
        for i, item in enumerate(value):
            _check_value(path, f"{where}[{i}]", item, self.kinds, self.least, fix)
        return True


class MapOf(ListOf):
    """A JSON object of free keys (a layout's features, a family's run files) whose every
    value is of `kinds` and >= `least`."""

    name = "an object"

    def check(self, path, where, value, fix):
        if not isinstance(value, dict):
            return False
        for key, item in value.items():
            _check_value(path, f"{where}.{key}", item, self.kinds, self.least, fix)
        return True


def _check_record(path, prefix, record, schema, fix, closed):
    unknown = [key for key in record if key not in schema] if closed else []
    if unknown:
        key = str(unknown[0])  # the known ones listed where none is close
        hint = closest(key, schema, prefix) or f" (known: {', '.join(sorted(schema))})"
        raise ConfigError(f"{path} has an unknown field {prefix + key!r}{hint}: correct or "
                          f"remove it, or {fix}.")
    for field, (kinds, least, required) in schema.items():
        if field in record:
            _check_value(path, prefix + field, record[field], kinds, least, fix)
        elif required:
            raise ConfigError(f"{path} lacks the field {prefix + field!r}: {fix}.")


def _check_value(path, where, value, kinds, least, fix):
    """Raises naming `path` and the field's path `where` unless `value` is of `kinds`."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if value is None and type(None) in kinds:
        return
    if any(not isinstance(kind, type) and kind.check(path, where, value, fix)
           for kind in kinds):
        return
    types = tuple(kind for kind in kinds if isinstance(kind, type))
    wrong_type = not isinstance(value, types) or (
        isinstance(value, bool) and bool not in kinds and object not in kinds)
    if wrong_type or (least is not None and value < least):
        names = " or ".join(
            "null" if k is type(None) else k.name if not isinstance(k, type)
            else _JSON_NAMES.get(k, k.__name__) for k in kinds)
        bound = f" >= {least}" if least is not None else ""
        raise ConfigError(f"{path} has {where}={_short(value)}, not {names}{bound}: {fix}.")


_JSON_NAMES = {int: "an integer", float: "a number", str: "a string", dict: "an object",
               list: "a list", bool: "true/false"}


def _short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

"""`keras-ctx presets`: the presets with their parameter counts."""

import re

from keras_ctx.models import list_presets


class UnknownFamilyError(ValueError):
    """`--family` names no family."""


def _key(name):
    """A family name as users type it: case and punctuation ignored (GPT-2 = gpt2)."""
    return re.sub(r"[\W_]+", "", name.lower())


def presets(family=None):
    """Prints (and returns) one row per preset: name, backbone, parameters, description.

    Args:
        family: only this family's presets (None: all), matched without case
            or punctuation: "GPT-2" lists gpt2's, "bert" BERT's only.

    Returns:
        The rows, as `keras_ctx.models.list_presets` gives them.

    Raises:
        UnknownFamilyError: `family` is no family's name (the message lists them).
    """
    from keras_ctx.models.presets import get_preset

    rows = list_presets()
    if family is not None:
        names = sorted({get_preset(name).family.name for name, *_ in rows})
        if _key(family) not in {_key(n) for n in names}:
            raise UnknownFamilyError(f"No family {family!r}; the families are "
                                     f"{', '.join(names)}.")
        rows = [row for row in rows if _key(get_preset(row[0]).family.name) == _key(family)]
    # Parameter counts of the preset's own vocabulary; `pretrain` sizes the
    # vocabulary to the tokenizer it trains (--vocabulary-size), so its count differs.
    widths = [max(len(header), *(len(str(row[i])) for row in rows))
              for i, header in enumerate(("preset", "backbone"))]
    count = max(len("parameters"), *(len(f"{row[2]:,d}") for row in rows))
    print(f"{'preset':{widths[0]}s}  {'backbone':{widths[1]}s}  {'parameters':>{count}s}  "
          "description")
    for name, backbone, parameters, description in rows:
        print(f"{name:{widths[0]}s}  {backbone:{widths[1]}s}  {parameters:>{count},d}  "
              f"{description}")
    print("Parameters at the preset's own vocabulary size; `keras-ctx pretrain` sizes the "
          "vocabulary to the tokenizer it trains (--vocabulary-size), so its count differs.")
    return rows

"""`keras-ctx presets`: the presets with their parameter counts."""

from keras_ctx.models import list_presets


def presets(family=None):
    """Prints (and returns) one row per preset: name, backbone, parameters, description.

    Args:
        family: only this family's presets (None: all).

    Returns:
        The rows, as `keras_ctx.models.list_presets` gives them.
    """
    rows = list_presets(family)
    print(f"{'preset':22s} {'backbone':18s} {'parameters':>14s}  description")
    for name, backbone, count, description in rows:
        print(f"{name:22s} {backbone:18s} {count:>14,d}  {description}")
    return rows

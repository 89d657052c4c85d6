"""`keras-ctx layers`: the reusable layers of `keras_ctx.layers`."""

import keras_ctx.layers as layer_module


def layers():
    """Prints (and returns) the names of `keras_ctx.layers`' classes, each with its summary."""
    names = sorted(n for n in dir(layer_module) if n[0].isupper())
    print("keras_ctx.layers:")
    for name in names:
        doc = (getattr(layer_module, name).__doc__ or "").strip().splitlines()
        print(f"  {name:32s} {doc[0] if doc else ''}")
    return names

"""The `keras-ctx` command."""

import argparse
import sys


def _layers(args):
    import keras_ctx.layers as layers

    names = sorted(n for n in dir(layers) if n[0].isupper())
    print("keras_ctx.layers:")
    for name in names:
        doc = (getattr(layers, name).__doc__ or "").strip().splitlines()
        print(f"  {name:32s} {doc[0] if doc else ''}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-ctx",
        description="Contextual word representations for Keras 3.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    layers = commands.add_parser("layers", help="list the reusable layers")
    layers.set_defaults(run=_layers)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

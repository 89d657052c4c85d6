"""What the example scripts (examples/*.py) share: their `--fast` smoke mode.

`--fast` runs a script end to end in seconds (tests/examples/test_examples.py
runs every script so): tiny data it makes itself, a couple of steps, and
eager execution, since tracing a step and compiling it with XLA cost more
than the few steps they would speed up. The full run is what the script's
docstring describes.

    >>> parser = argparse.ArgumentParser(description=__doc__)
    >>> parser.add_argument("--steps", type=int, default=150)
    >>> args = scripts.parse_args(parser, argv, fast="40 documents, 3 steps")
    >>> steps = 3 if args.fast else args.steps
"""

import warnings


def parse_args(parser, argv=None, fast="tiny data, a couple of steps"):
    """Adds `--fast` to `parser`, parses `argv`; under `--fast` functions run eagerly.

    Args:
        parser: the script's `argparse.ArgumentParser`.
        argv: the arguments (None: the command line).
        fast: what the fast mode shrinks, for `--help`.

    Returns:
        The parsed arguments, with `fast` True or False.
    """
    parser.add_argument("--fast", action="store_true",
                        help=f"a smoke run in seconds: {fast}, eager")
    args = parser.parse_args(argv)
    if args.fast:
        import tensorflow as tf

        # Tracing and XLA would cost more than the few steps they speed up.
        tf.config.run_functions_eagerly(True)
        # tf.data functions stay graphs (as they should: eager would be slower);
        # TensorFlow warns about that on every pipeline it builds.
        warnings.filterwarnings("ignore", category=UserWarning,
                                message="Even though the `tf.config.experimental_run_"
                                        "functions_eagerly` option is set")
    return args


def counted(dataset):
    """`dataset` with its length known, counted in one pass (cache a costly one first).

    Keras warns that a finite dataset of unknown length (text files, filters)
    "ran out of data" at the end of its first epoch.
    """
    import tensorflow as tf

    count = int(dataset.reduce(0, lambda n, _: n + 1))
    return dataset.apply(tf.data.experimental.assert_cardinality(count))

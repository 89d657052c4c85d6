"""Tests of the `keras-ctx` command line (keras_ctx/cli.py): flags and backends."""

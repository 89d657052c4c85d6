"""Tests of the `keras-ctx` commands (keras_ctx/commands), one file per command."""

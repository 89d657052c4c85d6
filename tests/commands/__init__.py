"""Tests of the `keras-ctx` commands (keras_ctx/commands), a file per command or per walk
through several."""

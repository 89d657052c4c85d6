"""Tests of the family registry (keras_ctx/families) and the families' entries."""

"""Tests of in-context evaluation (keras_ctx/evaluation.py)."""

"""Tests of the text-to-inputs path (keras_ctx/preprocessing.py)."""

"""Tests of model handles (keras_ctx/handles.py)."""

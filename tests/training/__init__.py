"""Tests of training (keras_ctx/training.py, optimizers.py, schedules.py)."""

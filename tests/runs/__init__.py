"""Tests of run directories (keras_ctx/runs.py, run_files.py)."""

"""Keeps benchmarks/banded_attention.py working: a tiny run, timing only."""

import pytest

from benchmarks import banded_attention


@pytest.mark.tensorflow_only("the benchmark times TensorFlow's GradientTape step in a "
                             "tf.function")
def test_banded_attention_benchmark_runs_and_reports_every_implementation():
    rows = banded_attention.main([
        "--lengths", "48", "--window", "16", "--hidden", "8", "--heads", "2",
        "--repeats", "1", "--steps", "1", "--in-process", "--xla", "off",
    ])
    assert [row[1] for row in rows] == list(banded_attention.IMPLEMENTATIONS)
    for length, _, ms, speedup, memory in rows:
        assert length == "48" and float(ms) > 0 and speedup.endswith("x")
    assert rows[1][3] == "1.00x"  # the dense + mask reference

"""Keeps benchmarks/accelerator_mlm.py working: its FLOP count by hand, a tiny CPU run on JAX."""

import os
import subprocess
import sys

import pytest

from benchmarks import accelerator_mlm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_forward_matmul_flops_by_hand():
    # One layer, H=4, F=8, T=3, batch 2, 1 masked position, V=10:
    # per token 2 * (4*16 + 2*4*8 + 2*3*4) = 2 * 152; head 2 * (16 + 40) per position.
    got = accelerator_mlm.forward_matmul_flops(batch=2, length=3, predictions=1, layers=1,
                                               hidden=4, intermediate=8, vocabulary=10)
    assert got == 6 * 2 * 152 + 2 * 1 * 2 * 56


@pytest.mark.slow  # ~2 min: builds and compiles both models on JAX (a GPU runs BERT-base)
def test_tiny_run_on_jax_cpu_times_both_implementations():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.accelerator_mlm", "--batch", "4", "--length", "32",
         "--predictions", "4", "--layers", "1", "--hidden", "32", "--heads", "2",
         "--intermediate", "64", "--vocabulary", "2000", "--steps", "2", "--rounds", "2",
         "--warmup", "1", "--precision", "mixed_bfloat16", "--dropout", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    table = [line for line in done.stdout.splitlines() if line.startswith("| keras")]
    assert [line.split("|")[1].strip() for line in table] == ["keras_ctx", "keras_hub"]
    for line in table:
        seq_per_second = float(line.split("|")[3].replace(",", ""))
        assert seq_per_second > 0
    assert "mixed_bfloat16" in done.stdout and "dropout 0," in done.stdout
    assert "cpu" in done.stdout

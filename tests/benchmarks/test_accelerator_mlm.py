"""Keeps benchmarks/accelerator_mlm.py working: its FLOP count by hand, a tiny CPU run on JAX."""

import os
import subprocess
import sys

import pytest

from benchmarks import accelerator_mlm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The runs are JAX subprocesses whatever this process's backend: once per CI run, from
# TensorFlow's (they took 45 s more of the JAX run and of torch's).
on_jax_once = pytest.mark.tensorflow_only(
    "starts JAX in a subprocess (TensorFlow blocked there), once, from TensorFlow's run")


def test_forward_matmul_flops_by_hand():
    # One layer, H=4, F=8, T=3, batch 2, 1 masked position, V=10:
    # per token 2 * (4*16 + 2*4*8 + 2*3*4) = 2 * 152; head 2 * (16 + 40) per position.
    got = accelerator_mlm.forward_matmul_flops(batch=2, length=3, predictions=1, layers=1,
                                               hidden=4, intermediate=8, vocabulary=10)
    assert got == 6 * 2 * 152 + 2 * 1 * 2 * 56


# As on the GPU machines (benchmarks/gpu_check.sh): JAX, keras and keras-hub, no TensorFlow.
WITHOUT_TENSORFLOW = """
import runpy, sys
from tests.backends import BlockTensorFlow
sys.meta_path.insert(0, BlockTensorFlow())
sys.argv[0] = "accelerator_mlm"
try:
    runpy.run_module("benchmarks.accelerator_mlm", run_name="__main__")
finally:
    assert "tensorflow" not in sys.modules, "TensorFlow was imported"
"""


@on_jax_once
def test_tiny_run_on_jax_cpu_without_tensorflow_times_and_profiles_both_implementations(
        tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               XLA_FLAGS="--xla_backend_optimization_level=0 "
                         "--xla_llvm_disable_expensive_passes=true")
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, "--batch", "4", "--length", "32",
         "--predictions", "4", "--layers", "1", "--hidden", "32", "--heads", "2",
         "--intermediate", "64", "--vocabulary", "2000", "--steps", "2", "--rounds", "2",
         "--warmup", "1", "--precision", "mixed_bfloat16", "--dropout", "0",
         "--profile", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    table = [line for line in done.stdout.splitlines() if line.startswith("| keras")]
    assert [line.split("|")[1].strip() for line in table] == ["keras_ctx", "keras_hub"]
    for line in table:
        seq_per_second = float(line.split("|")[3].replace(",", ""))
        assert seq_per_second > 0
    assert "mixed_bfloat16" in done.stdout and "dropout 0," in done.stdout
    assert "cpu" in done.stdout
    # Each step's trace, flat in the directory, summed by XLA op (the largest first).
    from benchmarks import profile_summary

    assert sorted(os.listdir(tmp_path)) == ["keras_ctx.xplane.pb", "keras_hub.xplane.pb"]
    for name in ("keras_ctx", "keras_hub"):
        lines = [c for c in profile_summary.op_times(str(tmp_path / f"{name}.xplane.pb"))
                 .values() if c]
        assert lines and sum(sum(c.values()) for c in lines) > 0
        text = profile_summary.summary(str(tmp_path / f"{name}.xplane.pb"), top=3)
        assert " ms in " in text and "%" in text


# The compiled training step of each implementation (tiny BERT, mixed_bfloat16, dropout
# 0), as the benchmark lowers it: its matmuls, and the attention calls made tracing it.
PROGRAMS = """
import json, sys
from tests.backends import BlockTensorFlow
sys.meta_path.insert(0, BlockTensorFlow())
import keras
from benchmarks import accelerator_mlm as bench
calls = []
fused = keras.ops.dot_product_attention
keras.ops.dot_product_attention = lambda *a, **k: calls.append(1) or fused(*a, **k)
keras.config.set_dtype_policy("mixed_bfloat16")
config = json.loads(sys.argv[1])
batch = bench.make_batch(4, 32, 4, config["vocabulary"])
out = {}
for name in bench.IMPLEMENTATIONS:
    model, data = bench.build(name, config, batch, dropout=0.0)
    calls.clear()
    out[name] = {"matmuls": bench.Stepper(model, data).matmuls, "attention_calls": len(calls)}
print(json.dumps(out))
"""


@on_jax_once
def test_the_jax_step_runs_bfloat16_matmuls_fused_attention_and_masked_rows_only():
    """What the GPU path is tuned for, read off the program the benchmark compiles."""
    import json

    config = dict(layers=2, hidden=64, heads=2, intermediate=128, vocabulary=2000)
    done = subprocess.run([sys.executable, "-c", PROGRAMS, json.dumps(config)], cwd=ROOT,
                          env=dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
                                   PYTHONPATH=ROOT), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    programs = json.loads(done.stdout.splitlines()[-1])
    model = 3 * accelerator_mlm.forward_matmul_flops(4, 32, 4, **config)
    ours, hub = programs["keras_ctx"], programs["keras_hub"]
    # The hand count is keras-hub's program (every position through every layer).
    assert abs(sum(m[0] for m in hub["matmuls"]) / model - 1) < 0.02
    # Every product in bfloat16 (keras-hub's vocabulary logits are float32).
    assert {(m[1], m[2]) for m in ours["matmuls"]} == {("bf16", "bf16")}
    assert ("f32", "f32") in {(m[1], m[2]) for m in hub["matmuls"]}
    # Only the masked positions reach the vocabulary: no (batch, length, vocabulary) logits.
    sizes = {m[3] for m in ours["matmuls"]}
    assert 4 * 4 * config["vocabulary"] in sizes and 4 * 32 * config["vocabulary"] not in sizes
    # No more matrix work than the model's; the last layer's queries only at masked rows.
    assert sum(m[0] for m in ours["matmuls"]) < 0.9 * model
    # Plain attention through keras.ops.dot_product_attention (cuDNN's on a GPU), per layer.
    assert ours["attention_calls"] and ours["attention_calls"] % config["layers"] == 0


def test_the_gpu_script_fetches_the_constrained_keras_and_keras_hub():
    """benchmarks/gpu_check.sh carries the keras and keras-hub the suite ran against."""
    script = open(os.path.join(ROOT, "benchmarks", "gpu_check.sh")).read()
    for name in ("keras", "keras-hub"):
        assert f'"{name}==$(pin {name})"' in script
    done = subprocess.run(["bash", "-c", 'source <(sed -n "/^pin()/p" benchmarks/gpu_check.sh);'
                           ' pin keras; pin keras-hub'], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    import keras
    import keras_hub

    assert done.stdout.split() == [keras.__version__, keras_hub.__version__]

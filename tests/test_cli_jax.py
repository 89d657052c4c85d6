"""`keras-ctx pretrain` and the text-in commands on Keras' JAX backend (tf.data and the
tokenizers on TensorFlow, numpy ids into the model): the files TensorFlow writes, and
TensorFlow's numbers from the same run."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.test_cli import TINY, write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["the bank of the river.", "the dog sat at the bank.", "money at the bank"]
PAIRS = (["the cat sat", "a dog ran to the park"], ["on a mat", "birds sang"])

# One JAX process: pretrain (it ends with the sense table), embed, then the
# preprocessor over pairs, called as the tasks call it.
JAX_JOB = """
import sys
import numpy as np
import pytest
from keras_ctx.cli import main
from keras_ctx import runs
from keras_ctx.preprocessing import TextPreprocessor
run, texts, pairs, out = sys.argv[1], sys.argv[2].split("|"), sys.argv[3].split("|"), sys.argv[4]
pretrain = sys.argv[5:]
assert main(["pretrain", "bert-tiny", *pretrain, "--out", run]) == 0
assert main(["embed", run, *texts, "--word", "bank", "--save", out + "/embed.npz"]) == 0
info, _, tokenizer = runs.load_run(run, need_tokenizer=True)
preprocess = TextPreprocessor(tokenizer, 16, info["family"])
half = len(pairs) // 2
ids = preprocess(np.array(pairs[:half], object), np.array(pairs[half:], object))
np.savez(out + "/pairs.npz", **{k: np.asarray(v) for k, v in ids.items()})
"""


def _files(run_dir):
    """The run's files, TensorBoard's event files without their time and host."""
    return sorted(os.path.relpath(os.path.join(d, f.split(".out.tfevents")[0]), run_dir)
                  for d, _, names in os.walk(run_dir) for f in names)


def _pretrain_on(backend, tmp_path, corpus, extra=()):
    run = str(tmp_path / backend)
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3",
               JAX_PLATFORMS="cpu",
               # XLA:CPU's compile time is most of a tiny run (tests/backends.py).
               XLA_FLAGS="--xla_backend_optimization_level=0 "
                         "--xla_llvm_disable_expensive_passes=true")
    common = ["--corpus", str(corpus), "--steps", "2", "--checkpoint-every", "2", *TINY]
    if backend == "jax":
        command = [sys.executable, "-c", JAX_JOB, run, "|".join(TEXTS),
                   "|".join(PAIRS[0] + PAIRS[1]), str(tmp_path), *common]
    else:
        command = [sys.executable, "-m", "keras_ctx.cli", "pretrain", "bert-tiny", *common,
                   "--out", run]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run, result.stdout


@pytest.mark.slow  # ~110 s, two CLI pretrains; tests/layers/test_jax_layers.py covers the text path
def test_cli_pretrain_and_text_commands_on_jax_match_tensorflow(tmp_path):
    from keras_ctx.commands.embed import word_vectors
    from keras_ctx import runs
    from keras_ctx.preprocessing import TextPreprocessor

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    jax_run, output = _pretrain_on("jax", tmp_path, corpus)
    assert "Compiling the training step with XLA" in output  # --xla auto compiles on JAX
    assert "One word, different contexts" in output and "Heatmap:" in output
    tf_run, _ = _pretrain_on("tensorflow", tmp_path, corpus)
    assert _files(jax_run) == _files(tf_run)

    # TensorFlow's numbers from the run JAX wrote.
    saved = np.load(tmp_path / "embed.npz")
    np.testing.assert_allclose(saved["vectors"], word_vectors(jax_run, TEXTS, "bank"),
                               atol=1e-4, rtol=1e-4)
    info, _, tokenizer = runs.load_run(jax_run, need_tokenizer=True)
    expected = TextPreprocessor(tokenizer, 16, info["family"])(
        np.array(PAIRS[0], object), np.array(PAIRS[1], object))
    pairs = np.load(tmp_path / "pairs.npz")
    assert sorted(pairs.files) == sorted(expected)
    for name, ids in expected.items():
        np.testing.assert_array_equal(pairs[name], np.asarray(ids), err_msg=name)

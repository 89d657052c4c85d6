"""`keras-ctx pretrain` and the text-in commands with `--backend jax` and `--backend torch`
(tf.data and the tokenizers on TensorFlow, numpy ids into the model): the files TensorFlow
writes, and TensorFlow's numbers from the same run, read in this process. By default JAX runs
every command and PyTorch the cheap chain (pretrain two steps, generate, export's refusal);
`-m slow` runs every command on PyTorch too."""

import contextlib
import io
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_ctx.preprocessing import TextPreprocessor
from tests.cli_helpers import TINY, write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXTS = ["the bank of the river.", "the dog sat at the bank.", "money at the bank"]
PAIRS = (["the cat sat", "a dog ran to the park"], ["on a mat", "birds sang"])

# The reference is TensorFlow's, in this process.
IN_TENSORFLOW = pytest.mark.tensorflow_only(
    "compares another backend's CLI run with TensorFlow's numbers in the test process")
# What pretrain says before its first step: JAX compiles it with XLA (--xla auto), PyTorch
# runs it eagerly.
FIRST_STEP = {"jax": "Compiling the training step with XLA",
              "torch": "Compiling the training step (the first step traces it)"}

# The job's arguments: the run, the texts, the pairs, the output folder, then pretrain's.
PRELUDE = """
import contextlib, io, json, sys
import numpy as np
from keras_ctx.cli import main
from keras_ctx import runs
from keras_ctx.preprocessing import TextPreprocessor
run, texts, pairs, out = sys.argv[1], sys.argv[2].split("|"), sys.argv[3].split("|"), sys.argv[4]
pretrain = sys.argv[5:]
"""
# BERT: pretrain (it ends with the sense table), embed, the preprocessor over pairs (called
# as the tasks call it), finetune.
BERT = """
assert main(["pretrain", "bert-tiny", *pretrain, "--out", run]) == 0
assert main(["embed", run, *texts, "--word", "bank", "--save", out + "/embed.npz"]) == 0
info, _, tokenizer = runs.load_run(run, need_tokenizer=True)
preprocess = TextPreprocessor(tokenizer, 16, info["family"])
half = len(pairs) // 2
ids = preprocess(np.array(pairs[:half], object), np.array(pairs[half:], object))
np.savez(out + "/pairs.npz", **{k: np.asarray(v) for k, v in ids.items()})
assert main(["finetune", run, "--train", out + "/train.tsv", "--out", out + "/tuned",
             "--epochs", "2", "--batch-size", "4"]) == 0
_, classifier = runs.load_finetuned(out + "/tuned")
np.save(out + "/logits.npy", np.asarray(classifier.predict(
    {k: np.asarray(v) for k, v in preprocess(np.array(texts, object)).items()
     if k in classifier.input}, verbose=0)))
"""
# A GPT-2 run and generate.
GPT2 = """
gpt2 = ["300" if a == "200" else a for a in pretrain]  # byte-level BPE: 256 bytes and more
assert main(["pretrain", "gpt2", *gpt2, "--out", out + "/gpt2"]) == 0
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert main(["generate", out + "/gpt2", "the bank", "--max-length", "12"]) == 0
with open(out + "/generated.json", "w") as handle:
    json.dump(printed.getvalue(), handle)
"""
# ULMFiT's three stages (gradual unfreezing, the LM's carried states) and CVT's tagger.
RNN = """
assert main(["ulmfit", "--text", out + "/text.txt", "--train", out + "/train.tsv", "--out",
             out + "/ulmfit", "--directions", "forward", "--batch-size", "4",
             "--sequence-length", "10",
             "--vocabulary-size", "100", "--set", "hidden_size=16", "--set",
             "embedding_size=8"]) == 0
assert main(["cvt", "--train", out + "/tags.tsv", "--unlabelled", out + "/text.txt", "--out",
             out + "/cvt", "--steps", "4", "--batch-size", "2", "--vocabulary-size", "100"]) == 0
assert main(["cvt-tag", out + "/cvt", "--input", out + "/text.txt"]) == 0
"""
# Export of the GPT-2 run: its exit status and what it printed on stderr.
EXPORT = """
refused = io.StringIO()
with contextlib.redirect_stderr(refused):
    status = main(["export", out + "/gpt2", out + "/exported"])
with open(out + "/export.json", "w") as handle:
    json.dump([status, refused.getvalue()], handle)
"""
EVERY_COMMAND = PRELUDE + BERT + GPT2 + RNN
PRETRAIN_GENERATE_EXPORT = PRELUDE + GPT2 + EXPORT


def _files(run_dir):
    """The run's files, TensorBoard's event files without their time and host."""
    return sorted(os.path.relpath(os.path.join(d, f.split(".out.tfevents")[0]), run_dir)
                  for d, _, names in os.walk(run_dir) for f in names)


def _generated_here(tmp_path):
    """GPT-2's greedy text from the run the other backend wrote, in this process."""
    from keras_ctx.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["generate", str(tmp_path / "gpt2"), "the bank", "--max-length", "12"]) == 0
    return printed.getvalue()


def _logits_here(tmp_path, backend):
    """The other backend's fine-tuned classifier's logits, in this process."""
    from keras_ctx import runs

    info, _, tokenizer = runs.load_run(str(tmp_path / backend), need_tokenizer=True)
    _, classifier = runs.load_finetuned(str(tmp_path / "tuned"))
    ids = TextPreprocessor(tokenizer, 16, info["family"])(np.array(TEXTS, object))
    return keras.ops.convert_to_numpy(classifier({k: np.asarray(v) for k, v in ids.items()
                                                  if k in classifier.input}))


def _run_on(backend, tmp_path, corpus, job=None):
    """`job` (a script above) under KERAS_BACKEND=`backend`, else `keras-ctx pretrain
    bert-tiny`; the run directory and what it printed."""
    pytest.importorskip(backend)
    run = str(tmp_path / backend)
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3",
               JAX_PLATFORMS="cpu",
               # XLA:CPU's compile time is most of a tiny run (tests/backends.py).
               XLA_FLAGS="--xla_backend_optimization_level=0 "
                         "--xla_llvm_disable_expensive_passes=true")
    common = ["--corpus", str(corpus), "--steps", "2", "--checkpoint-every", "2", *TINY]
    if job:
        command = [sys.executable, "-c", job, run, "|".join(TEXTS),
                   "|".join(PAIRS[0] + PAIRS[1]), str(tmp_path), *common]
    else:
        command = [sys.executable, "-m", "keras_ctx.cli", "pretrain", "bert-tiny", *common,
                   "--out", run]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run, result.stdout


def _corpus_file(tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    return corpus


@IN_TENSORFLOW
# Every command on each backend: slow (jax 117 s, torch 469 s on 2 busy cores); by default
# the cheap torch chain below runs, and CI runs tests/pretraining and tests/tasks on JAX
# and torch in-process.
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_cli_pretrain_and_text_commands_match_tensorflow(backend, tmp_path):
    from keras_ctx.commands.embed import word_vectors
    from keras_ctx import runs

    corpus = _corpus_file(tmp_path)
    (tmp_path / "text.txt").write_text(corpus.read_text()[:3000])
    (tmp_path / "tags.tsv").write_text("the\tDET\ncat\tNOUN\n\nthe\tDET\ndog\tNOUN\n")
    (tmp_path / "train.tsv").write_text("".join(
        f"{text}\t{'river' if 'river' in text else 'money'}\n" for text in TEXTS * 4))
    other_run, output = _run_on(backend, tmp_path, corpus, EVERY_COMMAND)
    assert FIRST_STEP[backend] in output
    assert "One word, different contexts" in output and "Heatmap:" in output
    tf_run, _ = _run_on("tensorflow", tmp_path, corpus)
    assert _files(other_run) == _files(tf_run)

    # TensorFlow's numbers from the run the other backend wrote.
    saved = np.load(tmp_path / "embed.npz")
    np.testing.assert_allclose(saved["vectors"], word_vectors(other_run, TEXTS, "bank"),
                               atol=1e-4, rtol=1e-4)
    info, _, tokenizer = runs.load_run(other_run, need_tokenizer=True)
    expected = TextPreprocessor(tokenizer, 16, info["family"])(
        np.array(PAIRS[0], object), np.array(PAIRS[1], object))
    pairs = np.load(tmp_path / "pairs.npz")
    assert sorted(pairs.files) == sorted(expected)
    for name, ids in expected.items():
        np.testing.assert_array_equal(pairs[name], np.asarray(ids), err_msg=name)

    # finetune's classifier.keras and generate's text, written there, read on TensorFlow.
    assert {"classifier.keras", "finetune.json"} <= set(os.listdir(tmp_path / "tuned"))
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"),
                               _logits_here(tmp_path, backend), atol=1e-4, rtol=1e-4)
    generated = json.loads((tmp_path / "generated.json").read_text())
    assert generated.startswith("the bank") and generated == _generated_here(tmp_path)
    assert {"classifier.keras", "vocabulary.json"} <= set(os.listdir(tmp_path / "ulmfit"))
    assert os.path.isdir(tmp_path / "cvt")


@IN_TENSORFLOW
def test_cli_on_torch_pretrains_generates_tensorflows_text_and_refuses_export(tmp_path):
    """The cheap chain by default: `--backend torch` pretrains GPT-2 two steps, generates
    the text TensorFlow generates from that run, and refuses SavedModel export in one line
    naming the backends that export, writing nothing."""
    _, output = _run_on("torch", tmp_path, _corpus_file(tmp_path), PRETRAIN_GENERATE_EXPORT)
    assert FIRST_STEP["torch"] in output and "Loss " in output
    generated = json.loads((tmp_path / "generated.json").read_text())
    assert generated.startswith("the bank") and generated == _generated_here(tmp_path)
    status, printed = json.loads((tmp_path / "export.json").read_text())
    assert status == 2
    assert printed == ("keras-ctx export: error: ExportError: SavedModel export runs on the "
                       "TensorFlow or JAX backend, not torch: save the weights, then export "
                       "with KERAS_BACKEND=tensorflow (or jax).\n")
    assert not os.path.exists(tmp_path / "exported")

"""`keras-ctx pretrain` and the text-in commands on Keras' JAX backend (tf.data and the
tokenizers on TensorFlow, numpy ids into the model): the files TensorFlow writes, and
TensorFlow's numbers from the same run."""

import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np

from keras_ctx.preprocessing import TextPreprocessor
from tests.test_cli import TINY, write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["the bank of the river.", "the dog sat at the bank.", "money at the bank"]
PAIRS = (["the cat sat", "a dog ran to the park"], ["on a mat", "birds sang"])

# One JAX process: pretrain (it ends with the sense table), embed, the preprocessor
# over pairs (called as the tasks call it), finetune, a GPT-2 run and generate, then
# ulmfit, cvt and cvt-tag.
JAX_JOB = """
import contextlib, io, json, sys
import numpy as np
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
assert main(["finetune", run, "--train", out + "/train.tsv", "--out", out + "/tuned",
             "--epochs", "2", "--batch-size", "4"]) == 0
_, classifier = runs.load_finetuned(out + "/tuned")
np.save(out + "/logits.npy", np.asarray(classifier.predict(
    {k: np.asarray(v) for k, v in preprocess(np.array(texts, object)).items()
     if k in classifier.input}, verbose=0)))
gpt2 = ["300" if a == "200" else a for a in pretrain]  # byte-level BPE: 256 bytes and more
assert main(["pretrain", "gpt2", *gpt2, "--out", out + "/gpt2"]) == 0
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert main(["generate", out + "/gpt2", "the bank", "--max-length", "12"]) == 0
with open(out + "/generated.json", "w") as handle:
    json.dump(printed.getvalue(), handle)
# ULMFiT's three stages (gradual unfreezing, the LM's carried states) and CVT's tagger.
assert main(["ulmfit", "--text", out + "/text.txt", "--train", out + "/train.tsv", "--out",
             out + "/ulmfit", "--batch-size", "4", "--sequence-length", "10",
             "--vocabulary-size", "100", "--set", "hidden_size=16", "--set",
             "embedding_size=8"]) == 0
assert main(["cvt", "--train", out + "/tags.tsv", "--unlabelled", out + "/text.txt", "--out",
             out + "/cvt", "--steps", "4", "--batch-size", "2", "--vocabulary-size", "100"]) == 0
assert main(["cvt-tag", out + "/cvt", "--input", out + "/text.txt"]) == 0
"""


def _files(run_dir):
    """The run's files, TensorBoard's event files without their time and host."""
    return sorted(os.path.relpath(os.path.join(d, f.split(".out.tfevents")[0]), run_dir)
                  for d, _, names in os.walk(run_dir) for f in names)


def _tensorflow_logits_and_text(tmp_path):
    """The JAX run's fine-tuned classifier's logits and GPT-2's greedy text, on TensorFlow."""
    from keras_ctx import runs
    from keras_ctx.cli import main

    info, _, tokenizer = runs.load_run(str(tmp_path / "jax"), need_tokenizer=True)
    _, classifier = runs.load_finetuned(str(tmp_path / "tuned"))
    ids = TextPreprocessor(tokenizer, 16, info["family"])(np.array(TEXTS, object))
    logits = np.asarray(classifier({k: np.asarray(v) for k, v in ids.items()
                                    if k in classifier.input}))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["generate", str(tmp_path / "gpt2"), "the bank", "--max-length", "12"]) == 0
    return logits, printed.getvalue()


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


def test_cli_pretrain_and_text_commands_on_jax_match_tensorflow(tmp_path):
    from keras_ctx.commands.embed import word_vectors
    from keras_ctx import runs

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    (tmp_path / "text.txt").write_text(corpus.read_text()[:3000])
    (tmp_path / "tags.tsv").write_text("the\tDET\ncat\tNOUN\n\nthe\tDET\ndog\tNOUN\n")
    (tmp_path / "train.tsv").write_text("".join(
        f"{text}\t{'river' if 'river' in text else 'money'}\n" for text in TEXTS * 4))
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

    # finetune's classifier.keras and generate's text, written on JAX, read on TensorFlow.
    assert {"classifier.keras", "finetune.json"} <= set(os.listdir(tmp_path / "tuned"))
    logits, text = _tensorflow_logits_and_text(tmp_path)
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), logits, atol=1e-4, rtol=1e-4)
    generated = json.loads((tmp_path / "generated.json").read_text())
    assert generated.startswith("the bank") and generated == text
    assert {"classifier.keras", "vocabulary.json"} <= set(os.listdir(tmp_path / "ulmfit"))
    assert os.path.isdir(tmp_path / "cvt")

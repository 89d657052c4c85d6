"""What the command and run tests share (not a test module): a corpus, tiny runs,
`keras-ctx` run in this process or as a subprocess, and its one-line errors."""

import os
import re
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from keras_ctx import cli, models, runs

WORDS = ("the cat sat on a mat and the dog ran to the park while birds sang in old trees "
         "money at the bank river water boat loan glass window storm").split()


def write_corpus(path, documents=60, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(documents):
            for _ in range(int(rng.integers(3, 6))):
                handle.write(" ".join(rng.choice(WORDS, size=int(rng.integers(5, 10)))) + ".\n")
            handle.write("\n")


def keras_ctx(*args, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "keras_ctx.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)


TINY = ["--set", "num_layers=1", "--set", "hidden_size=32", "--set", "num_heads=2",
        "--set", "intermediate_size=64", "--vocabulary-size", "200",
        "--sequence-length", "32", "--batch-size", "4", "--seed", "1"]


def final_weights(run_dir):
    model = keras.saving.load_model(os.path.join(run_dir, "backbone.keras"), compile=False)
    return [w.numpy() for w in model.weights]


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "bank", "river", "money",
         "on", "a", "good", "bad", "film", "was", "it", "."]
TINY_SET = ["--set", "num_layers=1", "--set", "hidden_size=32", "--set", "num_heads=2",
            "--set", "intermediate_size=64", "--vocabulary-size", "200",
            "--sequence-length", "16", "--batch-size", "4", "--steps", "2",
            "--checkpoint-every", "2"]


def tiny_backbone(seed=0):
    keras.utils.set_random_seed(seed)
    return models.from_preset("bert-tiny", num_layers=1, hidden_size=32, num_heads=2,
                              intermediate_size=64, vocabulary_size=len(VOCAB),
                              max_sequence_length=32)


def make_run(directory, seed=0):
    import keras_hub

    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    backbone = tiny_backbone(seed)
    runs.save_run(str(directory), {"model": "bert-tiny", "family": "bert",
                                   "sequence_length": 16}, backbone, tokenizer)
    return backbone


def run_cli(capsys, *argv):
    """(exit code, what it printed, stdout and stderr together) of `keras-ctx ARGV`."""
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def run_cli_apart(capsys, *argv):
    """(exit code, stdout, stderr's non-blank lines) of `keras-ctx ARGV` (paths as str)."""
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def cli_output(argv):
    """(exit code, what it printed) of `keras-ctx ARGV`, where no capsys is at hand."""
    import contextlib
    import io

    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        code = cli.main(list(argv))
    return code, stream.getvalue()


def one_line_error(output):
    errors = [line for line in output.splitlines() if "error:" in line]
    assert errors and "Traceback" not in output, output[-2000:]
    return errors[0]


def regression(learning_rate=1e-2):
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate), "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True)))
    return model, dataset.batch(8, drop_remainder=True).repeat()


def copy_run(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


# XLM's tiny runs (tests/commands: conftest.py's `corpora`, two languages and their pairs).
XLM_TINY = ["--set", "num_layers=1", "--set", "hidden_size=32", "--set", "num_heads=2",
            "--set", "intermediate_size=64", "--vocabulary-size", "200",
            "--sequence-length", "32", "--batch-size", "4"]


def first_and_last_loss(output):
    """(first, last) of the run's closing `Loss A at step N -> B` line."""
    first, last = re.search(r"Loss ([0-9.]+) at step \d+ -> ([0-9.]+)", output).groups()
    return float(first), float(last)

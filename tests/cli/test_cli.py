"""The keras-ctx command, run as users run it (subprocesses)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.backends import slow_on
from tests.cli_helpers import TINY, final_weights, keras_ctx, write_corpus
from tests.sense_table_off import sense_table_off


# JAX and torch: tests/training/test_training.py's resume tests run there in-process (this one
# starts three interpreters: 74 s on JAX).
@slow_on("jax", "torch")
def test_killed_pretraining_resumes_to_the_same_model(tmp_path):
    """The run killed and resumed are the command as users run it (subprocesses); the run
    that never stopped is the same command in this process (one interpreter fewer to start)."""
    from keras_ctx.cli import main

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus)
    common = ["pretrain", "bert-tiny", "--corpus", str(corpus), "--steps", "12",
              "--checkpoint-every", "3", *TINY]
    with sense_table_off():  # the resumed run's table is read below
        assert main([*common, "--out", str(tmp_path / "straight")]) == 0

    interrupted_dir = tmp_path / "interrupted"
    first = keras_ctx(*common, "--out", str(interrupted_dir))
    checkpoints = interrupted_dir / "checkpoints"
    deadline = time.time() + 600
    # Kill at the first checkpoint (step 3, 6 or 9): resuming from any of them
    # must end where the uninterrupted run ended.
    while first.poll() is None and time.time() < deadline and not (
            checkpoints.is_dir() and any(p.name.startswith("step-") and
                                         not p.name.endswith(".partial")
                                         for p in checkpoints.iterdir())):
        time.sleep(0.01)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert not (interrupted_dir / "backbone.keras").exists(), "the run finished before the kill"

    resumed = keras_ctx(*common, "--out", str(interrupted_dir))
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output[-3000:]
    assert "Resuming from step" in output and "Resuming from step 0 " not in output
    assert "One word, different contexts" in output
    for got, want in zip(final_weights(interrupted_dir), final_weights(tmp_path / "straight")):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.backend_neutral("two refusals before any model is built (the preset's name, the "
                             "corpus' path): two processes that start and exit with a line")
def test_unknown_preset_and_missing_corpus_fail_with_clear_messages(tmp_path):
    process = keras_ctx("pretrain", "bert-huge", "--out", str(tmp_path / "x"))
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 2 and "Unknown preset 'bert-huge'" in output
    process = keras_ctx("pretrain", "bert-tiny", "--corpus", str(tmp_path / "none.txt"),
                        "--out", str(tmp_path / "y"))
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 2 and "No file matches" in output


def test_pretrain_names_its_chunks_by_steps_not_as_keras_epochs(tmp_path, capsys):
    """`--steps 4 --checkpoint-every 2` printed Keras' 'Epoch 1/2', 'Epoch 2/2'."""
    from keras_ctx.cli import main

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    with sense_table_off():
        assert main(["pretrain", "bert-tiny", "--corpus", str(corpus), "--steps", "4",
                     "--checkpoint-every", "2", *TINY, "--out", str(tmp_path / "run")]) == 0
    said = "".join(capsys.readouterr())
    assert "Epoch" not in said
    assert said.index("Steps 1-2 of 4:") < said.index("\nStep 2/4, about") < said.index(
        "Steps 3-4 of 4:") < said.index("\nStep 4/4, about")


def test_another_runs_out_dir_an_unknown_flag_and_an_empty_corpus_fail_in_one_line(
        tmp_path, capsys):
    """In-process (the subprocess version below runs with -m slow)."""
    from keras_ctx.cli import main

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    base = ["pretrain", "bert-tiny", "--corpus", str(corpus), "--steps", "2",
            "--checkpoint-every", "2", *TINY]
    with sense_table_off():
        assert main([*base, "--out", str(tmp_path / "run")]) == 0
    said = "".join(capsys.readouterr())
    # The paper's stages and what this run reaches (BERT: Devlin et al., A.2).
    assert ("bert-tiny pretrains in 2 stages: 1. MLM + NSP from step 0 at length 128" in said
            and "from step 2 at length 512" in said and "[not reached in 2 steps]" in said)
    assert main([*base[:-2], "--seed", "2", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "holds another run" in err and "seed" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as unknown:
        main(["pretrain", "bert-tiny", "--out", str(tmp_path / "x"), "--stepz", "3"])
    assert unknown.value.code == 2
    assert "unrecognized arguments: --stepz" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("\n \n")
    assert main(["pretrain", "bert-tiny", "--corpus", str(tmp_path / "empty.txt"),
                 "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err
    assert "has no text" in err and "Traceback" not in err


@pytest.mark.slow  # ~45 s: four processes; the in-process test above checks the same lines
def test_out_dir_of_another_run_unknown_flag_and_empty_corpus_are_one_line_errors(tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    base = ["pretrain", "bert-tiny", "--corpus", str(corpus), "--steps", "2",
            "--checkpoint-every", "2", *TINY]
    first = keras_ctx(*base, "--out", str(tmp_path / "run"))
    assert first.wait(timeout=600) == 0
    other = keras_ctx(*base[:-2], "--seed", "2", "--out", str(tmp_path / "run"))
    output, _ = other.communicate(timeout=300)
    assert other.returncode == 2 and "holds another run" in output and "seed" in output
    assert "Traceback" not in output
    unknown = keras_ctx("pretrain", "bert-tiny", "--out", str(tmp_path / "x"), "--stepz", "3")
    output, _ = unknown.communicate(timeout=300)
    assert unknown.returncode == 2 and "unrecognized arguments: --stepz" in output
    (tmp_path / "empty.txt").write_text("\n \n")
    empty = keras_ctx("pretrain", "bert-tiny", "--corpus", str(tmp_path / "empty.txt"),
                      "--out", str(tmp_path / "y"))
    output, _ = empty.communicate(timeout=300)
    assert empty.returncode == 2 and "has no text" in output and "Traceback" not in output


MIRRORED = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_ctx.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # two replicas equal one device per objective in test_matrix.py (default run)
def test_mirrored_strategy_on_two_logical_cpus_matches_one_device(tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus)
    losses = {}
    for strategy in ("default", "mirrored"):
        out = tmp_path / strategy
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        result = subprocess.run(
            [sys.executable, "-c", MIRRORED, "pretrain", "bert-tiny", "--corpus", str(corpus),
             "--steps", "6", "--checkpoint-every", "6", "--strategy", strategy,
             "--set", "dropout=0.0", *TINY, "--out", str(out)],
            capture_output=True, text=True, env=env, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        line = next(l for l in result.stdout.splitlines() if l.startswith("Loss "))
        losses[strategy] = float(line.split("->")[1].split()[0])
    # The same global batch split over two replicas: the same data, model and loss
    # (to the 3 printed decimals; reading a batch to build the model once moved
    # the NSP sampling on by an epoch under the strategy: 4.957 against 4.996).
    assert abs(losses["mirrored"] - losses["default"]) <= 1e-3 + 1e-9, losses


def test_tensorflow_start_up_lines_hidden_unless_verbose():
    # TensorFlow enables oneDNN (and logs so at load) only on some CPUs (not on
    # AMD EPYC without AVX-512, say): forcing it on makes the line appear on
    # every x86 machine, so the test checks what our code controls, the hiding.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["TF_ENABLE_ONEDNN_OPTS"] = "1"

    def stderr_of(*args):
        result = subprocess.run([sys.executable, "-m", "keras_ctx.cli", *args], env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "bert-tiny" in result.stdout
        return result.stderr

    quiet = stderr_of("presets")
    for noise in ("cuInit", "oneDNN", "absl::InitializeLog", "cpu_feature_guard"):
        assert noise not in quiet, quiet[:2000]
    # --verbose brings TensorFlow's own lines back.
    assert "oneDNN" in stderr_of("--verbose", "presets")


@pytest.mark.slow  # ~35 s
def test_pretrain_says_what_it_is_doing_phase_by_phase(tmp_path):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    process = keras_ctx("pretrain", "bert-tiny", "--corpus", str(corpus), "--steps", "4",
                        "--checkpoint-every", "2", *TINY, "--out", str(tmp_path / "run"),
                        "--export", str(tmp_path / "export"))
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    phases = ["Reading the corpus and training the tokenizer", "Sampled",
              "sentences fed to the trainer in",
              "Learning the WordPiece vocabulary (Hugging Face tokenizers", "Learned the WordPiece vocabulary in",
              "Trained the tokenizer in",
              "Building bert-tiny", "Built bert-tiny:",
              # BERT's two stages (Devlin et al., A.2), the second not in a one-length run.
              "bert-tiny pretrains in 2 stages: 1. MLM + NSP from step 0 at length 128",
              "2. MLM + NSP from step 4 at length 512", "[not reached in 4 steps]",
              "Compiling the training step",
              "Compiled the training step in", "Step 2/4, about", "Step 4/4, about",
              "Saving the run to", "Exporting a SavedModel to", "Exported a SavedModel to",
              "One word, different contexts"]
    at = [output.find(phase) for phase in phases]
    assert -1 not in at, [p for p, i in zip(phases, at) if i == -1]
    assert at == sorted(at), output[:3000]


def test_progress_counts_rate_and_time_left_then_times_an_opaque_step():
    from keras_ctx.common import progress

    ticks = iter(range(100))  # a clock that moves 1 s per reading
    lines = []
    report = progress.Progress(lines.append, every=2, clock=lambda: next(ticks))
    items = list(report.count(range(10), "sentences", total=10, then=("Learning", "lib")))
    report.finish("Learned")
    assert items == list(range(10))
    # Began at 0, first item at 1; lines every 2 s after it: done / (now - 1) per
    # second, (10 - done) / rate left.
    assert lines == ["  3/10 sentences, 2/s, about 5 s left...",
                     "  5/10 sentences, 1/s, about 4 s left...",
                     "  7/10 sentences, 1/s, about 3 s left...",
                     "  9/10 sentences, 1/s, about 1 s left...",
                     "  10 sentences in 11 s.",
                     "Learning (lib; it shows no progress of its own)...",
                     "Learned in 1 s."]
    # Library code is silent unless a command turns reporting on.
    assert progress.current().say is None
    with progress.reporting(lines.append) as active:
        assert progress.current() is active and active.say is not None
    assert progress.current().say is None


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export")
def test_exporting_a_preset_says_its_weights_are_random(tmp_path, capsys, caplog):
    from keras_ctx.commands.export import export_run

    export_run("bert-tiny", str(tmp_path / "export"), sequence_length=8)
    # One log line (keras_ctx.handles), then the export's own line.
    said = [r.getMessage() for r in caplog.records]
    assert sum("weights are random (untrained)" in line for line in said) == 1
    assert "Exported a SavedModel" in capsys.readouterr().out

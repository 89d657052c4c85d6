"""Run directories under faults and hostile input (issue 38, the command half).

What a run directory records about its data, checks before a directory is
claimed, locks on every writer, and the CLI's one error path (Ctrl-C,
SIGTERM, full disks, files that are not UTF-8).
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_ctx
from keras_ctx import runs
from keras_ctx.common import files

from tests.cli_helpers import keras_ctx as keras_ctx_process
from tests.cli_helpers import write_corpus
from tests.cli_helpers import (TINY_SET, VOCAB, copy_run, make_run, one_line_error, run_cli,
                                    tiny_backbone)
from tests.sense_table_off import sense_table_off


@pytest.fixture(autouse=True)
def _no_sense_table():
    """The runs pretrained here are read for their files and refusals, not for pretrain's
    closing sense table (tests/sense_table_off)."""
    with sense_table_off():
        yield


def pretrain(capsys, corpus, out, *flags):
    return run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus), "--out",
                   str(out), *TINY_SET, *flags)


# ------------------------------------------------------------ silent wrong results

@pytest.mark.parametrize("given_once", [{"from": "hf://org/model"}, {"languages": ["en", "fr"]},
                                        {"glove": "glove.840B.300d.txt"}])
def test_a_rerun_that_leaves_out_a_setting_the_run_was_given_is_another_run(tmp_path,
                                                                            given_once):
    settings = {"model": "xlm-clm-enfr-1024", "corpus": "en.txt", "seed": 0}
    runs.claim(str(tmp_path), {**settings, **given_once})
    runs.claim(str(tmp_path), {**settings, **given_once})  # the same: resumes
    name = next(iter(given_once))
    for other in (settings, {**settings, name: "other"}):  # left out, or another value
        with pytest.raises(ValueError, match=f"holds another run .*different {name}"):
            runs.claim(str(tmp_path), other)


def test_a_run_refuses_to_resume_on_other_data_than_its_checkpoints(tmp_path):
    from keras_ctx.data import fingerprints

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    settings = {"model": "bert-tiny", "corpus": str(corpus)}
    data = {"corpus": fingerprints.corpus(str(corpus)), "tokenizer": "a" * 64}
    runs.claim(str(out), settings, data=data)
    model, batches = _regression()  # a real checkpoint at step 2 (claim checks it)
    keras_ctx.training.fit_resumable(model, batches, steps=2, out_dir=str(out),
                                     checkpoint_every=2, verbose=0)
    runs.claim(str(out), settings, data=data)  # the same data: resumes

    with open(corpus, "a", encoding="utf-8") as handle:
        handle.write("the cat sat on a mat.\n")
    changed = {"corpus": fingerprints.corpus(str(corpus)), "tokenizer": "a" * 64}
    with pytest.raises(ValueError, match="trained on another corpus") as error:
        runs.claim(str(out), settings, data=changed)
    assert f"changed {corpus}" in str(error.value)
    assert "--corpus-changed continue" in str(error.value)
    runs.claim(str(out), settings, data=changed, corpus_changed="continue")
    assert runs.read_settings(out)[runs.FINGERPRINT_KEY] == changed  # resumes from now on
    runs.claim(str(out), settings, data=changed)

    other_tokenizer = {**changed, "tokenizer": "b" * 64}
    for choice in ("refuse", "continue"):  # never under other ids
        with pytest.raises(ValueError, match="another tokenizer"):
            runs.claim(str(out), settings, data=other_tokenizer, corpus_changed=choice)
    assert (out / "checkpoints" / "step-000000002").is_dir()


@pytest.mark.slow
def test_resume_on_a_changed_corpus_is_refused_unless_asked(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    code, output = pretrain(capsys, corpus, out)
    assert code == 0, output[-2000:]
    recorded = json.loads((out / runs.SETTINGS_FILE).read_text())[runs.FINGERPRINT_KEY]
    assert recorded["corpus"]["files"][0]["size"] == corpus.stat().st_size
    assert len(recorded["tokenizer"]) == 64  # a SHA-256 of the tokenizer's files

    text = corpus.read_text()
    corpus.write_text(text + "\n" + text)  # more text of the same words
    code, output = pretrain(capsys, corpus, out, "--steps", "4")
    line = one_line_error(output)
    assert code == 2 and "another corpus" in line and str(corpus) in line
    assert "Resuming" not in output
    code, output = pretrain(capsys, corpus, out, "--steps", "4", "--corpus-changed",
                            "continue")
    assert code == 0 and "Resuming" in output, output[-2000:]
    assert (out / "checkpoints" / "step-000000004").is_dir()


def test_out_inside_the_corpus_directory_is_refused(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus / "a.txt", documents=10)
    for out in (corpus / "run", corpus):
        code, output = pretrain(capsys, corpus, out)
        assert code == 2 and "inside the corpus directory" in one_line_error(output)
    assert sorted(os.listdir(corpus)) == ["a.txt"]
    code, output = pretrain(capsys, f"{tmp_path}/**/*.txt", corpus / "run")
    assert code == 2 and "inside the corpus directory" in one_line_error(output)


def test_a_corpus_from_a_pipe_is_refused_clearly(tmp_path, capsys):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    code, output = pretrain(capsys, pipe, tmp_path / "run")
    line = one_line_error(output)
    assert code == 2 and "is a pipe" in line and "Save it to a file" in line
    assert "empty" not in line and not (tmp_path / "run").exists()


def test_corpus_fingerprint_sees_an_edit_that_keeps_the_size(tmp_path):
    from keras_ctx.data import fingerprints

    corpus = tmp_path / "c.txt"
    corpus.write_bytes(b"a" * 300_000)
    before = fingerprints.corpus(str(corpus))
    stat = corpus.stat()
    with open(corpus, "r+b") as handle:  # one byte in the middle, size and mtime kept
        handle.seek(150_000)
        handle.write(b"b")
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = fingerprints.corpus(str(corpus))
    assert before["files"][0]["size"] == after["files"][0]["size"]
    assert before["files"][0]["mtime_ns"] == after["files"][0]["mtime_ns"]
    assert before != after
    assert fingerprints.corpus(str(corpus)) == after  # deterministic


@pytest.mark.parametrize("flags, message", [
    (["--set", "vocabulary_size=10"], "use --vocabulary-size 10 instead"),
    (["--sequence-length", "1000"], "longer than the backbone's max_sequence_length 512"),
    (["--set", "max_sequence_length=8"], "--set max_sequence_length"),
    (["--set", "dropout=nan"], "--set dropout must be a number in [0, 1)"),
    (["--set", "dropout=1.5"], "--set dropout must be a number in [0, 1)"),
    (["--set", "layer_norm_epsilon=1e999"], "must be finite"),
])
def test_set_and_sizes_are_checked_before_the_run_dir_is_claimed(tmp_path, capsys, flags,
                                                                 message):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    code, output = pretrain(capsys, corpus, tmp_path / "run", *flags)
    assert code == 2 and message in one_line_error(output)
    assert not (tmp_path / "run").exists()


def test_export_onto_an_existing_file_is_refused_before_the_claim(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    (tmp_path / "model").write_text("the user's file")
    code, output = pretrain(capsys, corpus, tmp_path / "run", "--export", str(tmp_path / "model"))
    assert code == 2 and "is not a directory" in one_line_error(output)
    assert (tmp_path / "model").read_text() == "the user's file"
    assert not (tmp_path / "run").exists()


def test_an_override_the_backbone_did_not_take_is_reported():
    from keras_ctx.common import validation

    backbone = tiny_backbone()
    validation.check_overrides_applied("bert-tiny", backbone, {"hidden_size": 32})
    with pytest.raises(ValueError, match="--set hidden_size=64 was not applied.*hidden_size=32"):
        validation.check_overrides_applied("bert-tiny", backbone, {"hidden_size": 64})


def test_a_backbone_of_another_family_or_size_than_run_json_is_refused(tiny_run, tmp_path,
                                                                       capsys):
    gpt2 = copy_run(tiny_run, tmp_path / "gpt2")
    keras_ctx.models.from_preset("gpt2", num_layers=1, hidden_size=32, num_heads=2,
                                 intermediate_size=64, vocabulary_size=17).save(
        gpt2 / "backbone.keras")
    code, output = run_cli(capsys, "embed", str(gpt2), "the bank")
    line = one_line_error(output)
    assert code == 2 and "GPTBackbone" in line and "run.json says bert" in line

    bigger = copy_run(tiny_run, tmp_path / "bigger")
    keras_ctx.models.from_preset("bert-tiny", num_layers=2, hidden_size=32, num_heads=2,
                                 intermediate_size=64, vocabulary_size=17,
                                 max_sequence_length=32).save(bigger / "backbone.keras")
    code, output = run_cli(capsys, "embed", str(bigger), "the bank")
    line = one_line_error(output)
    assert code == 2 and "num_layers=2" in line and "num_layers=1" in line


def test_a_damaged_settings_file_is_not_another_run(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    (out / "checkpoints" / "step-000000002").mkdir(parents=True)
    (out / runs.SETTINGS_FILE).write_text('{"model": "bert-ti')  # truncated
    code, output = pretrain(capsys, corpus, out)
    line = one_line_error(output)
    assert code == 2 and "is damaged" in line and "checkpoints" in line
    assert "--no-resume" not in output and "another run" not in output
    assert (out / "checkpoints" / "step-000000002").is_dir()


# ------------------------------------------------------------ lost results

def test_finetune_and_convert_meet_the_run_lock(tiny_run, tmp_path, capsys):
    from keras_ctx.convert import to_huggingface

    train = tmp_path / "train.tsv"
    train.write_text("the film was good\tpos\nthe film was bad\tneg\n")
    source = tmp_path / "hf"
    to_huggingface(tiny_backbone(seed=5), str(source))
    out = tmp_path / "out"
    with files.RunLock(out):  # another process writing OUT (a separate flock)
        code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                               "--out", str(out), "--epochs", "1")
        assert code == 2 and "is in use by" in one_line_error(output)
        code, output = run_cli(capsys, "convert", str(source), str(out))
        assert code == 2 and "is in use by" in one_line_error(output)
    assert os.listdir(out) == [files.LOCK_FILE]


def test_a_convert_killed_before_run_json_can_be_run_again(tmp_path, capsys, monkeypatch):
    from keras_ctx.convert import to_huggingface

    source = tmp_path / "hf"
    to_huggingface(tiny_backbone(seed=5), str(source))
    dest = tmp_path / "dest"
    write_json = files.write_json

    def stopped_before_run_json(path, *args, **kwargs):
        if os.path.basename(path) == runs.RUN_FILE:
            raise KeyboardInterrupt  # Ctrl-C after backbone.keras is in place
        return write_json(path, *args, **kwargs)

    monkeypatch.setattr(files, "write_json", stopped_before_run_json)
    code, output = run_cli(capsys, "convert", str(source), str(dest))
    assert code == 130 and (dest / "backbone.keras").is_file(), output
    assert not (dest / "run.json").exists()
    monkeypatch.setattr(files, "write_json", write_json)
    code, output = run_cli(capsys, "convert", str(source), str(dest))
    assert code == 0, output
    assert runs.read_info(str(dest))["family"] == "bert"
    # A user's backbone.keras (no keras-ctx lock file beside it) is still never replaced.
    user = tmp_path / "user"
    user.mkdir()
    (user / "backbone.keras").write_text("mine")
    code, output = run_cli(capsys, "convert", str(source), str(user))
    assert code == 2 and "already holds" in one_line_error(output)
    assert (user / "backbone.keras").read_text() == "mine"


def test_a_failed_convert_leaves_no_directory_behind(tmp_path, capsys):
    code, output = run_cli(capsys, "convert", str(tmp_path / "missing"), str(tmp_path / "d"))
    assert code == 2 and "does not exist" in one_line_error(output)
    assert not (tmp_path / "d").exists()


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export (torch refuses it)")
def test_a_killed_exports_staging_directory_is_removed_by_the_next(tiny_run, tmp_path,
                                                                   capsys):
    stale = tmp_path / "export" / ".export-999999999-abcd"  # no such pid
    stale.mkdir(parents=True)
    (stale / "saved_model.pb").write_text("half")
    code, output = run_cli(capsys, "export", str(tiny_run), str(tmp_path / "export"))
    assert code == 0, output
    assert sorted(os.listdir(tmp_path / "export")) == ["1"]


# ------------------------------------------------------------ one error path

def test_files_users_give_that_are_not_utf8_are_named(tiny_run, tmp_path, capsys):
    bad = b"caf\xe9 good\tpos\nbad film\tneg\n"
    train = tmp_path / "train.tsv"
    train.write_bytes(bad)
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    line = one_line_error(output)
    assert code == 2 and f"{train} is not UTF-8" in line and "iconv" in line
    text = tmp_path / "text.txt"
    text.write_bytes(b"caf\xe9 au lait\n")
    train.write_text("good film\tpos\nbad film\tneg\n")
    code, output = run_cli(capsys, "ulmfit", "--text", str(text), "--train", str(train),
                           "--out", str(tmp_path / "u"))
    assert code == 2 and f"{text} is not UTF-8" in one_line_error(output)
    code, output = run_cli(capsys, "cvt", "--train", str(text), "--unlabelled", str(text),
                           "--out", str(tmp_path / "c"))
    assert code == 2 and f"{text} is not UTF-8" in one_line_error(output)


def test_cvt_refuses_a_three_field_line_naming_file_and_line(tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("We\tPRP\nrun\tVBP\tX\n")
    unlabelled = tmp_path / "u.txt"
    unlabelled.write_text("we run\n")
    code, output = run_cli(capsys, "cvt", "--train", str(train), "--unlabelled",
                           str(unlabelled), "--out", str(tmp_path / "c"))
    line = one_line_error(output)
    assert code == 2 and f"{train}:2: expected exactly token<TAB>tag" in line


@pytest.mark.parametrize("raised, code, message", [
    (TypeError("unsupported operand"), 2, "error: TypeError: unsupported operand"),
    (json.JSONDecodeError("Expecting value", "x", 0), 2, "error: JSONDecodeError: Expecting"),
    (AttributeError("'list' object has no attribute 'get'"), 2, "error: AttributeError"),
    (KeyboardInterrupt(), 130, "stopped; resume with the same command."),
])
def test_every_exception_is_one_line(monkeypatch, capsys, raised, code, message):
    from keras_ctx.commands import embed as word_vectors

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(word_vectors, "embed", fail)
    returned, output = run_cli(capsys, "embed", "run", "text")
    assert returned == code and message in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1


def test_a_full_disk_ends_in_one_line_and_the_same_command_resumes(tmp_path, capsys,
                                                                   monkeypatch):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    save = keras.Model.save

    def full_disk(model, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(keras.Model, "save", full_disk)
    code, output = pretrain(capsys, corpus, out)
    line = one_line_error(output)
    assert code == 2 and "no space left on the device writing" in line
    assert "run the same command again" in line
    assert not (out / "backbone.keras").exists() and not (out / "run.json").exists()
    assert not [n for n in os.listdir(out) if "partial" in n], os.listdir(out)
    monkeypatch.setattr(keras.Model, "save", save)
    code, output = pretrain(capsys, corpus, out)
    assert code == 0 and "Resuming" in output, output[-2000:]
    runs.load_run(str(out))


def _wait_for(path, process, seconds=600):
    deadline = time.time() + seconds
    while not os.path.exists(path):
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_print_one_line_and_the_run_resumes(tmp_path, signum, code):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    argv = ["pretrain", "bert-tiny", "--corpus", str(corpus), "--out", str(out),
            *TINY_SET[:-4], "--steps", "400", "--checkpoint-every", "2"]
    first = keras_ctx_process(*argv)
    _wait_for(out / "checkpoints" / "step-000000002", first)
    first.send_signal(signum)
    output, _ = first.communicate(timeout=120)
    assert first.returncode == code, output[-3000:]
    assert "Traceback" not in output
    assert output.strip().splitlines()[-1] == (
        "keras-ctx pretrain: stopped; resume with the same command.")
    second = keras_ctx_process(*argv[:-4], "--steps", "4", "--checkpoint-every", "2")
    output, _ = second.communicate(timeout=600)
    # A settings mismatch would refuse: --steps is not a setting, so this resumes.
    assert second.returncode == 0 and "Resuming" in output, output[-3000:]


@pytest.mark.slow
def test_two_finetunes_into_one_out_cannot_both_succeed(tiny_run, tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("".join(f"the film was good {i}\tpos\nthe film was bad {i}\tneg\n"
                             for i in range(200)))
    out = tmp_path / "clf"
    argv = ["finetune", str(tiny_run), "--train", str(train), "--out", str(out),
            "--epochs", "3"]
    processes = [keras_ctx_process(*argv) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    codes = sorted(p.returncode for p in processes)
    assert codes == [0, 2], outputs
    assert any("is in use by" in o or "already exists" in o for o in outputs), outputs


# ------------------------------------------------------------ issue 44: half states

_KILLED_CONVERT = """
import os, signal, sys
import keras
import numpy as np
from keras_ctx import cli

def killed(model, path, *args, **kwargs):
    with open(path, "wb") as handle:
        handle.write(b"PK half a zip")
    os.kill(os.getpid(), signal.SIGKILL)

keras.Model.save = killed
cli.main(["convert", sys.argv[1], sys.argv[2]])
"""


@pytest.mark.slow  # a TensorFlow subprocess (~15 s); the Ctrl-C convert test runs by default
def test_a_convert_killed_9_is_unfinished_and_converts_again(tmp_path, capsys):
    from keras_ctx.convert import to_huggingface

    source, dest = tmp_path / "hf", tmp_path / "dest"
    to_huggingface(tiny_backbone(seed=5), str(source))
    script = tmp_path / "killed.py"
    script.write_text(_KILLED_CONVERT)
    process = subprocess.run([sys.executable, str(script), str(source), str(dest)],
                             env=dict(os.environ, PYTHONPATH=os.getcwd()), timeout=300,
                             capture_output=True)
    assert process.returncode == -signal.SIGKILL and dest.is_dir()
    code, output = run_cli(capsys, "embed", str(dest), "the bank")
    line = one_line_error(output)
    assert code == 2 and "is an unfinished keras-ctx run" in line, line
    code, output = run_cli(capsys, "convert", str(source), str(dest))
    assert code == 0, output
    assert runs.read_info(str(dest))["family"] == "bert"
    assert not [n for n in os.listdir(dest) if "partial" in n]


def test_a_directory_left_by_a_stopped_write_is_named_unfinished(tiny_run, tmp_path, capsys):
    left = copy_run(tiny_run, tmp_path / "left")
    os.remove(left / runs.RUN_FILE)
    (left / files.LOCK_FILE).write_text('{"pid": 999999999}')
    code, output = run_cli(capsys, "embed", str(left), "the bank")
    line = one_line_error(output)
    assert code == 2 and "is an unfinished keras-ctx run" in line and "again" in line


@pytest.mark.parametrize("edit, message", [
    ({"sequence_length": "abc"}, "has sequence_length='abc', not an integer >= 1"),
    ({"sequence_length": -5}, "has sequence_length=-5, not an integer >= 1"),
    ({"family": 3}, "has family=3, not a string"),
    ({"sizes": {"vocabulary_size": "x"}}, "has sizes.vocabulary_size='x'"),
])
def test_a_hand_edited_run_json_names_file_and_field(tiny_run, tmp_path, capsys, edit,
                                                     message):
    run = copy_run(tiny_run, tmp_path / "run")
    info = json.loads((run / runs.RUN_FILE).read_text())
    (run / runs.RUN_FILE).write_text(json.dumps({**info, **edit}))
    for command in (["embed", str(run), "the bank"], ["export", str(run), str(tmp_path / "e")]):
        code, output = run_cli(capsys, *command)
        line = one_line_error(output)
        assert code == 2 and message in line and "run.json" in line, line
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("text", ['{"family": "bert", "sequ', "[" * 200_000 + "]" * 200_000])
def test_a_truncated_or_deeply_nested_run_json_names_the_file(tiny_run, tmp_path, capsys,
                                                              text):
    run = copy_run(tiny_run, tmp_path / "run")
    (run / runs.RUN_FILE).write_text(text)
    code, output = run_cli(capsys, "embed", str(run), "the bank")
    line = one_line_error(output)
    assert code == 2 and "run.json" in line and "RecursionError" not in line, line


def test_a_tokenizer_swapped_into_a_finished_run_is_refused(tiny_run, tmp_path, capsys):
    run = copy_run(tiny_run, tmp_path / "run")
    (vocabulary,) = (run / "tokenizer").rglob("vocabulary.txt")
    words = vocabulary.read_text().splitlines()
    words[-1], words[-2] = words[-2], words[-1]  # the same size, other ids
    vocabulary.write_text("\n".join(words) + "\n")
    code, output = run_cli(capsys, "embed", str(run), "the bank")
    assert code == 2 and "is not the tokenizer this run was saved" in one_line_error(output)


def _regression():
    from tests.cli_helpers import regression

    return regression()


def _snapshot(directory):
    return {os.path.relpath(os.path.join(root, name), directory):
            open(os.path.join(root, name), "rb").read()
            for root, _, names in os.walk(directory) for name in names}


def _claimed_run_with_a_checkpoint(out, **settings):
    model, data = _regression()
    runs.claim(str(out), {"model": "m", "learning_rate": 0.1, **settings})
    fit_resumable = keras_ctx.training.fit_resumable
    fit_resumable(model, data, steps=1, out_dir=str(out), checkpoint_every=1, verbose=0)
    return out


def test_a_resume_that_changes_the_learning_rate_says_so_and_records_it(tmp_path, capsys):
    out = _claimed_run_with_a_checkpoint(tmp_path / "run")
    capsys.readouterr()
    runs.claim(str(out), {"model": "m", "learning_rate": 0.01})
    said = capsys.readouterr().out
    assert "--learning-rate 0.01 (was 0.1)" in said and "from step 1" in said
    recorded = runs.read_settings(str(out))
    assert recorded["learning_rate"] == 0.01
    assert recorded["changes"] == [{"step": 1, "learning_rate": [0.1, 0.01]}]
    with pytest.raises(keras_ctx.common.errors.RunDirectoryError, match="different model"):
        runs.claim(str(out), {"model": "other", "learning_rate": 0.01})


def test_refusing_a_damaged_checkpoint_changes_nothing_in_the_run(tmp_path):
    out = _claimed_run_with_a_checkpoint(tmp_path / "run")
    weights = out / "checkpoints" / "step-000000001" / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    before = _snapshot(out)
    with pytest.raises(ValueError, match="cannot be restored"):
        runs.claim(str(out), {"model": "m", "learning_rate": 0.01})
    assert _snapshot(out) == before


def test_a_checkpoint_that_does_not_fit_on_the_disk_leaves_nothing(tmp_path, monkeypatch):
    import collections
    import shutil

    from keras_ctx.training import Checkpointer

    model, data = _regression()
    keras_ctx.training.fit_resumable(model, data, steps=1, out_dir=str(tmp_path),
                                     checkpoint_every=1, verbose=0)
    checkpoints = Checkpointer(str(tmp_path / "checkpoints"))
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 100, 100))
    with pytest.raises(OSError) as raised:
        checkpoints.save(model, 2)
    assert raised.value.errno == errno.ENOSPC
    monkeypatch.undo()

    def full(path, **arrays):  # the disk fills while the optimizer state is written
        with open(path, "wb") as handle:
            handle.write(b"PK half")
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError):
        checkpoints.save(model, 2)
    assert sorted(os.listdir(checkpoints.directory)) == ["step-000000001"]


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export (torch refuses it)")
def test_an_export_finishing_second_never_replaces_the_first(tiny_run, tmp_path, capsys,
                                                             monkeypatch):
    out = tmp_path / "export"
    archive = type(keras.export.ExportArchive())  # the backend's subclass
    write_out = archive.write_out

    def other_export_finishes_meanwhile(archive, path, *args, **kwargs):
        write_out(archive, path, *args, **kwargs)
        (out / "1").mkdir(exist_ok=True)
        (out / "1" / "saved_model.pb").write_text("the other export")

    monkeypatch.setattr(archive, "write_out", other_export_finishes_meanwhile)
    code, output = run_cli(capsys, "export", str(tiny_run), str(out))
    assert code == 2 and "was written by another export" in one_line_error(output)
    assert (out / "1" / "saved_model.pb").read_text() == "the other export"
    assert sorted(os.listdir(out)) == ["1"]


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export (torch refuses it)")
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_version_a_killed_overwrite_moved_aside_is_put_back(tiny_run, tmp_path, capsys,
                                                              overwrite):
    out = tmp_path / "export"
    leftover = out / ".export-999999999-abcd"  # no such pid: killed between its renames
    (leftover / "replaced").mkdir(parents=True)
    (leftover / "replaced" / "saved_model.pb").write_text("the old export")
    (leftover / "target").write_text("1")
    code, output = run_cli(capsys, "export", str(tiny_run), str(out),
                           *(["--overwrite"] if overwrite else []))
    assert sorted(os.listdir(out)) == ["1"]
    if overwrite:
        assert code == 0 and (out / "1" / "saved_model.pb").stat().st_size > 1000, output
    else:
        assert code == 2 and "already holds an export" in one_line_error(output)
        assert (out / "1" / "saved_model.pb").read_text() == "the old export"


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export (torch refuses it)")
@pytest.mark.parametrize("jit_compile", [False, True])
def test_every_id_input_is_checked_in_the_xla_serving_signatures(tmp_path, jit_compile):
    import tensorflow as tf

    from keras_ctx.export import export_saved_model

    path = export_saved_model(tiny_backbone(), str(tmp_path), sequence_length=8,
                              jit_compile=jit_compile)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    ids, ones = np.full((1, 8), 5, "int32"), np.ones((1, 8), "int32")
    assert serve(token_ids=ids, padding_mask=ones, segment_ids=ones)[
        "sequence_output"].shape == (1, 8, 32)
    for segment in (2, -1):  # bert-tiny has two segments
        segments = np.zeros((1, 8), "int32")
        segments[0, 4] = segment
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="input segment_ids must be in \\[0, 2\\)"):
            serve(token_ids=ids, padding_mask=ones, segment_ids=segments)


def test_a_backbone_config_claiming_a_huge_vocabulary_is_refused_before_building(
        tiny_run, tmp_path, capsys):
    import zipfile

    run = copy_run(tiny_run, tmp_path / "run")
    path = run / runs.BACKBONE_FILE
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["config"]["vocabulary_size"] = 10**10
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    began = time.time()
    code, output = run_cli(capsys, "embed", str(run), "the bank")
    line = one_line_error(output)
    assert code == 2 and "vocabulary_size = 10000000000 is more than" in line, line
    assert time.time() - began < 30


SAVER = """
import sys, keras, keras_ctx
from keras_ctx import runs
keras.utils.set_random_seed(1)
model = keras_ctx.models.from_preset("bert-tiny", num_layers=2, hidden_size=256,
                                     num_heads=4, intermediate_size=1024,
                                     vocabulary_size=20000)
print("ready", flush=True)
while True:
    runs.save_run(sys.argv[1], {"family": "bert", "sequence_length": 16}, model,
                  overwrite=True)
"""


def test_sigkill_while_saving_the_backbone_keeps_the_previous_one(tmp_path):
    run_dir = tmp_path / "run"
    make_run(run_dir)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for delay in (0.3, 0.9):
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(run_dir)], env=env,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(delay)  # the loop spends nearly all its time writing backbone.keras
        assert child.poll() is None, "the saving loop stopped before the kill"
        child.send_signal(signal.SIGKILL)
        child.wait()
        model = keras.saving.load_model(run_dir / "backbone.keras", compile=False)
        sizes = {model.get_layer("token_embedding").vocabulary_size}
        # Killed before the rename: the old backbone; after it: the whole new one.
        assert sizes <= {len(VOCAB), 20000}
    # The next save removes what the killed writers left beside the file.
    runs.save_run(
        str(run_dir), {"family": "bert", "sequence_length": 16}, tiny_backbone(),
        overwrite=True)
    assert sorted(os.listdir(run_dir)) == ["backbone.keras", "run.json"]


def test_no_resume_never_deletes_what_keras_ctx_did_not_write(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    user = tmp_path / "user"
    (user / "checkpoints").mkdir(parents=True)
    (user / "checkpoints" / "thesis.txt").write_text("years of work")
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(user), "--no-resume", *TINY_SET)
    assert code == 2 and "holds no keras-ctx run" in one_line_error(output)
    assert (user / "checkpoints" / "thesis.txt").read_text() == "years of work"

    # A keras-ctx run whose new arguments fail validation keeps its checkpoints.
    ours = tmp_path / "ours"
    step = ours / "checkpoints" / "step-000000002"
    step.mkdir(parents=True)
    (ours / runs.SETTINGS_FILE).write_text("{}")
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(ours), "--no-resume", *TINY_SET,
                           "--set", "num_layers=-1")
    assert code == 2 and "num_layers" in one_line_error(output)
    assert step.is_dir()


def test_pretrain_export_refuses_an_existing_export_before_any_work(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    for existing in ("export/1", "export-text/1"):
        (tmp_path / existing).mkdir(parents=True)
        (tmp_path / existing / "saved_model.pb").write_text("served in production")
        code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                               "--out", str(tmp_path / "run"), "--export",
                               str(tmp_path / "export"), *TINY_SET)
        assert code == 2 and "already holds an export" in one_line_error(output)
        assert "--overwrite" in output
        assert (tmp_path / existing / "saved_model.pb").read_text() == "served in production"
        assert not (tmp_path / "run").exists(), "nothing is claimed before validation"
        (tmp_path / existing / "saved_model.pb").unlink()
        (tmp_path / existing).rmdir()


def test_finetune_export_and_output_are_not_replaced_implicitly(tiny_run, tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("the film was good\tpos\nthe film was bad\tneg\n"
                     "it was good\tpos\nit was bad\tneg\n")
    (tmp_path / "export" / "1").mkdir(parents=True)
    (tmp_path / "export" / "1" / "saved_model.pb").write_text("served")
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1",
                           "--export", str(tmp_path / "export"))
    assert code == 2 and "already holds an export" in one_line_error(output)
    assert (tmp_path / "export" / "1" / "saved_model.pb").read_text() == "served"
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    assert code == 0, output
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    assert code == 2 and "--overwrite" in one_line_error(output)


def test_convert_into_an_existing_run_refuses_unless_overwrite(tiny_run, tmp_path, capsys):
    from keras_ctx.convert import to_huggingface

    source = tmp_path / "hf"
    to_huggingface(tiny_backbone(seed=5), str(source))
    run_dir = tmp_path / "run"
    make_run(run_dir, seed=0)
    before = (run_dir / "backbone.keras").read_bytes()
    code, output = run_cli(capsys, "convert", str(source), str(run_dir))
    assert code == 2 and "already holds a run" in one_line_error(output)
    assert (run_dir / "backbone.keras").read_bytes() == before
    code, output = run_cli(capsys, "convert", str(source), str(run_dir), "--overwrite")
    assert code == 0, output
    assert (run_dir / "backbone.keras").read_bytes() != before
    # No stale tokenizer from the replaced run: the source had none.
    assert not (run_dir / "tokenizer").exists()


HOLDER = """
import sys, time
from keras_ctx.common.files import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def test_second_process_on_a_locked_run_dir_names_the_holder(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)],
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=os.getcwd()))
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                               "--out", str(out), *TINY_SET)
        assert code == 2 and f"in use by process {holder.pid}" in one_line_error(output)
        assert not (out / runs.SETTINGS_FILE).exists()
    finally:
        holder.kill()
        holder.wait()
    # The holder died without releasing: its lock (naming a dead pid) is taken over.
    from keras_ctx.common.files import RunLock

    lock = RunLock(out)
    assert lock.holder() == holder.pid
    with lock:
        assert lock.holder() == os.getpid()


def test_tuple_overrides_round_trip_so_the_run_can_resume(tmp_path):
    settings = {"model": "elmo-tiny", "overrides": {"filters": ((1, 32), (2, 32))}}
    runs.claim(str(tmp_path / "run"), settings)
    runs.claim(str(tmp_path / "run"), settings)  # the same arguments again: resume


def test_failed_validation_does_not_poison_out_for_the_corrected_command(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(out), *TINY_SET, "--set", "num_layers=-1")
    assert code == 2
    assert not out.exists(), "a failed command claimed --out"
    runs.claim(str(out), {"model": "bert-tiny", "anything": "corrected"})


def test_broken_run_directories_are_one_line_errors(tiny_run, tmp_path, capsys):
    import shutil

    no_tokenizer = copy_run(tiny_run, tmp_path / "a")
    shutil.rmtree(no_tokenizer / "tokenizer")
    missing_keys = copy_run(tiny_run, tmp_path / "b")
    (missing_keys / "run.json").write_text('{"model": "bert-tiny"}')
    corrupt = copy_run(tiny_run, tmp_path / "c")
    (corrupt / "backbone.keras").write_bytes(b"PK\x03\x04 not really a zip")
    for directory, message in ((no_tokenizer, "has no tokenizer/"),
                               (missing_keys, "lacks the field 'family'"),
                               (corrupt, "backbone.keras is corrupt")):
        code, output = run_cli(capsys, "embed", str(directory), "the bank")
        assert code == 2 and message in one_line_error(output), output


def test_embed_save_reports_the_file_it_wrote(tiny_run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = run_cli(capsys, "embed", str(tiny_run), "the bank", "--save", "ro")
    assert code == 0 and "Saved to ro.npz." in output and (tmp_path / "ro.npz").is_file()
    code, output = run_cli(capsys, "embed", str(tiny_run), "the bank", "--save", "ro")
    assert code == 2 and "--overwrite" in one_line_error(output)

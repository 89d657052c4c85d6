"""Prepared data and corpora under faults (issue 44): fingerprints checked where they are used.

`keras-ctx prepare` records the corpus' fingerprint in settings.json, each
shard's checksum, source range and settings digest in its record, and the
tokenizer files' hash in tokenizer_record.json and the manifest; `prepare` (on a
re-run) and `pretrain --data` check them before using anything.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_ctx import runs
from keras_ctx.data import corpora, prepare

from tests.cli_helpers import one_line_error, run_cli
from tests.sense_table_off import sense_table_off

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron "
         "pi rho sigma tau upsilon phi chi psi omega").split()


def write_text(path, seed, documents=40):
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(documents):
            for _ in range(4):
                handle.write(" ".join(rng.choice(WORDS, 8)) + ".\n")
            handle.write("\n")


def prepare_args(corpus, out, *flags):
    return ["prepare", "bert-tiny", "--corpus", str(corpus), "--out", str(out),
            "--sequence-length", "16", "--vocabulary-size", "200", "--workers", "1",
            "--duplicate", "1", *flags]


def prepare_quietly(corpus, out):
    return prepare.prepare("bert-tiny", str(corpus), str(out), sequence_length=16,
                           vocabulary_size=200, workers=1, duplicate=1,
                           shard_bytes=4_000, say=lambda *_: None)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """(corpus, directory prepared from it)."""
    root = tmp_path_factory.mktemp("prepared")
    corpus = root / "a.txt"
    write_text(corpus, 0)
    prepare_quietly(corpus, root / "data")
    return corpus, root / "data"


def copy_of(prepared, tmp_path):
    shutil.copytree(prepared[1], tmp_path / "data")
    return tmp_path / "data"


# ------------------------------------------------------------ prepare, run again

def test_prepare_again_after_the_corpus_changed_is_refused(tmp_path, capsys):
    corpus, data = tmp_path / "c.txt", tmp_path / "data"
    write_text(corpus, 1, documents=10)
    code, _ = run_cli(capsys, *prepare_args(corpus, data))
    assert code == 0
    with open(corpus, "a", encoding="utf-8") as handle:
        handle.write("appended text that the old shards do not hold.\n\n")
    before = sorted(os.listdir(data))
    code, output = run_cli(capsys, *prepare_args(corpus, data))
    line = one_line_error(output)
    assert code == 2 and "The corpus changed since" in line and str(corpus) in line
    assert sorted(os.listdir(data)) == before


def test_a_truncated_shard_is_made_again_not_counted(prepared, tmp_path):
    corpus, data = prepared[0], copy_of(prepared, tmp_path)
    first = prepare.load_manifest(str(data))
    shard = data / first["shards"][0]["file"]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    manifest = prepare_quietly(corpus, data)
    assert manifest["examples"] == first["examples"]
    assert [s["sha256"] for s in manifest["shards"]] == [s["sha256"] for s in first["shards"]]
    prepare.load_manifest(str(data))  # every checksum holds


def _contents(directory):
    """{relative path: bytes} of every file under `directory`."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


def test_a_shard_copied_from_another_corpus_is_refused_naming_it_and_its_source(
        tmp_path, capsys):
    """The manifest deleted, a whole shard of other prepared data copied in: its record
    names another source. It was deleted and made again without a word; now refused,
    naming the shard and the source it was made from, with nothing changed."""
    corpus, other = tmp_path / "a.txt", tmp_path / "other.txt"
    write_text(corpus, 0, documents=10)
    write_text(other, 2, documents=10)
    for text, out in ((corpus, "data"), (other, "other")):
        assert run_cli(capsys, *prepare_args(text, tmp_path / out))[0] == 0
    data = tmp_path / "data"
    os.remove(data / prepare.MANIFEST)
    for name in ("shard-00000.tfrecord", "shard-00000.json"):
        shutil.copy(tmp_path / "other" / name, data / name)
    theirs = json.loads((data / "shard-00000.json").read_text())["source"]
    before = _contents(data)
    code, output = run_cli(capsys, *prepare_args(corpus, data))
    line = one_line_error(output)
    assert code == 2, output
    assert line == (
        f"keras-ctx prepare: error: {data / 'shard-00000.tfrecord'} was made from {other} "
        f"(bytes {theirs[1]}-{theirs[2]}), not from {corpus} (bytes {theirs[1]}-"
        f"{os.path.getsize(corpus)}): it belongs to other prepared data. Move it and "
        f"{data / 'shard-00000.json'} out of {data} (or delete them) and run `keras-ctx "
        "prepare` again; nothing was changed.")
    assert _contents(data) == before


def test_a_tokenizer_swapped_between_prepared_directories_is_refused(prepared, tmp_path,
                                                                     capsys):
    data = copy_of(prepared, tmp_path)
    (vocabulary,) = (data / "tokenizer").rglob("vocabulary.txt")
    words = vocabulary.read_text().splitlines()
    words[-1], words[-2] = words[-2], words[-1]  # the same size, other ids
    vocabulary.write_text("\n".join(words) + "\n")
    with pytest.raises(prepare.PreparedDataError, match="is not the tokenizer its shards"):
        prepare.load_manifest(str(data))
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--data", str(data), "--out",
                           str(tmp_path / "run"), "--sequence-length", "16", "--steps", "1")
    assert code == 2 and "is not the tokenizer its shards" in one_line_error(output)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags, message", [
    (["--vocabulary-size", "500"], "--vocabulary-size 500 cannot apply to"),
    (["--sequence-length", "32"], "was prepared for bert-tiny (bert) at sequence length 16"),
])
def test_a_flag_the_prepared_data_cannot_take_is_refused(prepared, tmp_path, capsys, flags,
                                                         message):
    out = tmp_path / "run"
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--data", str(prepared[1]),
                           "--out", str(out), "--sequence-length", "16", "--steps", "1",
                           *flags)
    assert code == 2 and message in one_line_error(output)
    assert not out.exists()


def test_a_run_on_prepared_data_resumes_to_the_weights_of_one_that_never_stopped(
        prepared, tmp_path, capsys):
    """--data names the prepared directory; its fingerprints are recorded beside it (they
    once shared the key "data", and every resume of a --data run was refused as
    "another run (different data)"). The earlier layout is read back by a rerun of the
    finished run (its checks, no step to compile)."""
    from tests.cli_helpers import final_weights

    def pretrain(out, steps):
        with sense_table_off():  # the weights are compared here, not the table
            return run_cli(capsys, "pretrain", "bert-tiny", "--data", str(prepared[1]),
                           "--out", str(out), "--sequence-length", "16", "--steps", str(steps),
                           "--checkpoint-every", "2", "--batch-size", "4",
                           "--set", "num_layers=1", "--set", "hidden_size=16",
                           "--set", "num_heads=2", "--set", "intermediate_size=32")

    assert pretrain(tmp_path / "straight", 4)[0] == 0
    assert pretrain(tmp_path / "stopped", 2)[0] == 0
    code, output = pretrain(tmp_path / "stopped", 4)
    assert code == 0 and "Resuming" in output, output[-2000:]
    for one, two in zip(final_weights(tmp_path / "straight"), final_weights(tmp_path / "stopped")):
        np.testing.assert_array_equal(two, one)

    # A settings file of the earlier layout (fingerprints under "data") still resumes.
    settings = tmp_path / "stopped" / runs.SETTINGS_FILE
    record = json.loads(settings.read_text())
    record["data"] = record.pop(runs.FINGERPRINT_KEY)
    settings.write_text(json.dumps(record))
    code, output = pretrain(tmp_path / "stopped", 4)
    assert code == 0 and "Resuming from step 4" in output, output[-2000:]
    assert runs.read_settings(tmp_path / "stopped")["data"] == str(prepared[1])


def _edit(data, edit):
    path = data / prepare.MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, message", [
    (lambda m: m["settings"].update(sequence_length="abc"),
     "has settings.sequence_length='abc', not an integer >= 1"),
    (lambda m: m["settings"].update(sequence_length=-5), "sequence_length=-5"),
    (lambda m: m["features"].update(token_ids="16"), "has features.token_ids='16'"),
    (lambda m: m["shards"][0].update(examples=-1), "has shards[0].examples=-1"),
    (lambda m: m["shards"][0].update(file="../../etc/passwd"), "not a file name in"),
    (lambda m: m.update(examples=m["examples"] + 1), "not the sum of its shards"),
    (lambda m: m.pop("shards"), "lacks the field 'shards'"),
])
def test_a_hand_edited_manifest_is_one_line_naming_file_and_field(prepared, tmp_path, capsys,
                                                                  damage, message):
    data = copy_of(prepared, tmp_path)
    _edit(data, damage)
    out = tmp_path / "run"
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--data", str(data), "--out",
                           str(out), "--sequence-length", "16", "--steps", "1")
    line = one_line_error(output)
    assert code == 2 and message in line and "manifest.json" in line, line
    assert not out.exists()


@pytest.mark.parametrize("text", ['{"version": 2, "settings": {', "[" * 200_000 + "]" * 200_000])
def test_a_truncated_or_deeply_nested_manifest_names_the_file(prepared, tmp_path, capsys, text):
    data = copy_of(prepared, tmp_path)
    (data / prepare.MANIFEST).write_text(text)
    with pytest.raises(prepare.PreparedDataError, match="manifest.json"):
        prepare.load_manifest(str(data))


# ------------------------------------------------------------ corpora on disk

def test_a_symlink_loop_in_a_corpus_directory_reads_each_file_once(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("one sentence.\n")
    os.symlink(".", corpus / "loop")
    os.symlink("a.txt", corpus / "same.txt")
    assert corpora.resolve_files(str(corpus)) == [str(corpus / "a.txt")]
    assert len(corpora.sample_sentences(str(corpus), 100)) == 1


def test_a_hard_link_and_a_loop_to_a_parent_are_read_once_and_said(tmp_path):
    from keras_ctx.common import progress

    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("one sentence.\n")
    os.link(corpus / "a.txt", corpus / "b.txt")
    os.symlink("..", corpus / "sub" / "up")
    (corpus / "sub" / "c.txt").write_text("another sentence.\n")
    lines = []
    with progress.reporting(lines.append):
        files = corpora.resolve_files(str(corpus))
        sentences = corpora.sample_sentences(str(corpus), 100)
    assert files == [str(corpus / "a.txt"), str(corpus / "sub" / "c.txt")]
    assert sorted(sentences) == ["another sentence.", "one sentence."]
    said = [line for line in lines if "by a second path" in line]
    assert said == [f"The corpus reaches 2 file(s) or folder(s) by a second path (a symlink, "
                    f"a hard link or a link loop); each is read once: {corpus}/sub/up/ is "
                    f"{corpus}/, and 1 more."]


def test_a_fifo_in_a_corpus_directory_is_refused_without_hanging(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_text(corpus / "a.txt", 0, documents=3)
    os.mkfifo(corpus / "b.txt")
    began = time.time()
    code, output = run_cli(capsys, *prepare_args(corpus, tmp_path / "data"))
    line = one_line_error(output)
    assert code == 2 and "b.txt is a pipe, device or socket" in line
    assert time.time() - began < 30 and not (tmp_path / "data").exists()


# ------------------------------------------------------------ children die with the parent

_PARENT = """
import multiprocessing, sys, time
from keras_ctx.common import files

def child(path):
    while True:
        with open(path, "a") as handle:
            handle.write("x")
        time.sleep(0.05)

if __name__ == "__main__":
    context = multiprocessing.get_context("fork")  # as quick as a test should be
    with __import__("concurrent.futures").futures.ProcessPoolExecutor(
            1, mp_context=context, initializer=files.die_with_parent) as pool:
        pool.submit(child, sys.argv[1])
        time.sleep(600)
"""


def test_a_killed_parents_workers_stop_writing(tmp_path):
    """The initializer `prepare` gives its workers: kill -9 of the parent ends them."""
    script, out = tmp_path / "parent.py", tmp_path / "written"
    script.write_text(_PARENT)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    parent = subprocess.Popen([sys.executable, str(script), str(out)], env=env)
    try:
        deadline = time.time() + 60
        while not (out.exists() and out.stat().st_size > 3) and time.time() < deadline:
            time.sleep(0.1)
        assert out.exists(), "the worker never started"
    finally:
        parent.kill()
        parent.wait(timeout=10)
    time.sleep(1)
    size = out.stat().st_size
    time.sleep(1)
    assert out.stat().st_size == size  # nothing writes any more


def test_a_200000_character_word_reaches_the_tokenizer_in_bounded_pieces(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a short sentence.\n" + "x" * 200_000 + " end.\n\nmore text.\n")
    sample = corpora.sample_sentences(str(corpus), 1000)
    words = [w for sentence in sample for w in sentence.split()]
    assert max(map(len, words)) == corpora.MAX_WORD_CHARS
    assert sum(len(w) for w in words if set(w) == {"x"}) == 200_000  # nothing lost


# ------------------------------------------------------------ a missing dependency

_WITHOUT_TENSORFLOW = """
import sys
from tests.backends import BlockTensorFlow
sys.meta_path.insert(0, BlockTensorFlow())
sys.argv = ["keras-ctx", *{args!r}]
from keras_ctx.cli import main
sys.exit(main())
"""


@pytest.mark.tensorflow_only("a subprocess on its own backend: the same run on every "
                             "backend's suite, so once, from TensorFlow's")
def test_prepare_without_tensorflow_is_one_line_and_writes_no_out(tmp_path):
    """On JAX without TensorFlow, `prepare` claimed --out (settings.json, a lock) and then
    failed at its first tf.data call."""
    pytest.importorskip("jax")
    corpus = tmp_path / "c.txt"
    write_text(corpus, 0, documents=3)
    out = tmp_path / "data"
    args = ["--backend", "jax", *prepare_args(corpus, out)]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", _WITHOUT_TENSORFLOW.format(args=args)],
                            cwd=root, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu"))
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors == ["keras-ctx prepare: error: ImportError: `keras-ctx prepare` (its shards "
                      "are TFRecords) needs TensorFlow, which is not installed: pip install "
                      '"tensorflow>=2.21,<2.22" (or, in the keras_ctx clone, pip install -e . '
                      "-c constraints.txt)."]
    assert not out.exists()

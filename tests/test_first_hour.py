"""What a new user tries first: presets by family, a preset name given to the
commands that read text, in one process (no subprocess, no training)."""

import os
import re

import pytest

from keras_ctx.cli import main
from keras_ctx.models.presets import get_preset, preset_names


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, [line for line in captured.err.splitlines() if line.strip()]


def _listed(out):
    return [line.split()[0] for line in out.splitlines()[1:-1]]


@pytest.mark.parametrize("family,expected", [
    ("bert", "bert"), ("BERT", "bert"), ("GPT-2", "gpt2"), ("gpt", "gpt"),
    ("GPT-Neo", "gpt_neo"), ("awd-lstm", "awd_lstm")])
def test_presets_family_lists_exactly_that_familys_presets(capsys, family, expected):
    code, out, err = run_cli(capsys, "presets", "--family", family)
    assert code == 0 and not err
    assert _listed(out) == sorted(n for n in preset_names() if get_preset(n).family.name == expected)


def test_presets_unknown_family_refuses_in_one_line_naming_the_families(capsys):
    code, out, err = run_cli(capsys, "presets", "--family", "foo")
    assert code == 2 and len(err) == 1 and "'foo'" in err[0]
    assert all(name in err[0] for name in ("albert", "bert", "gpt2", "xlnet"))


def test_presets_table_columns_align_for_long_names(capsys):
    code, out, _ = run_cli(capsys, "presets")
    rows = out.splitlines()[:-1]
    assert code == 0 and "bert-base-multilingual-uncased" in out
    # The parameter column ends at the same character in every row.
    ends = {row.index("  ", row.index(row.split()[2])) if i else row.index("parameters") + 10
            for i, row in enumerate(rows)}
    assert len(ends) == 1, rows[:3]


@pytest.mark.parametrize("argv", [
    ["embed", "bert-tiny", "Hello world"],
    ["embed", "bert-tiny", "Hello world", "--word", "world"],
    ["finetune", "bert-tiny", "--train", "{train}", "--out", "{out}"],
])
def test_commands_that_read_text_refuse_a_preset_name_in_one_line(capsys, tmp_path, argv):
    train = tmp_path / "t.tsv"
    train.write_text("good film\tpos\nbad film\tneg\n")
    argv = [a.format(train=train, out=tmp_path / "ft") for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and len(err) == 1, err
    assert "bert-tiny is a preset name" in err[0] and "no tokenizer" in err[0]
    assert not (tmp_path / "ft").exists()


@pytest.mark.slow  # trains and exports twice (38 s); the default run checks the rule below
def test_pretrain_with_export_runs_twice_and_says_what_it_did(tmp_path, capsys):
    """README's main command, small: the second run trains nothing, keeps the export."""
    from keras_ctx.commands.pretrain import pretrain
    from tests.test_cli import write_corpus

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    tiny = dict(corpus=str(corpus), steps=3, checkpoint_every=2, batch_size=4,
                sequence_length=16, vocabulary_size=200, show_contexts=False,
                overrides={"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                           "intermediate_size": 64}, export=str(tmp_path / "export"))
    pretrain("bert-tiny", str(tmp_path / "run"), **tiny)
    out = capsys.readouterr().out
    assert re.search(r"Built bert-tiny: [\d,]+ parameters \(its vocabulary is the trained "
                     r"tokenizer's [\d,]+ entries", out)
    # Two chunks (2 + 1 steps): the first step's loss, then the last chunk's.
    assert re.search(r"Loss \d+\.\d{3} at step 1 -> \d+\.\d{3} over steps 3-3\.", out), out
    assert "text-in copy" in out and (tmp_path / "export-text" / "1").is_dir()
    for _ in range(2):  # the run and its export left as they are, however often
        pretrain("bert-tiny", str(tmp_path / "run"), **tiny)
        out = capsys.readouterr().out
        assert "Compiling the training step" not in out and "Loss" not in out
        assert "Nothing left to train" in out and "already holds this run's export" in out
        assert "Saving the run" not in out
        assert sorted(os.listdir(tmp_path / "export")) == ["1"]


def test_a_finished_runs_own_export_is_recognised_and_nothing_else(tmp_path):
    from keras_ctx.commands.pretrain import _already_exported

    run, export = tmp_path / "run", tmp_path / "export"
    run.mkdir()
    (run / "backbone.keras").write_text("weights")
    (export / "1").mkdir(parents=True)
    (export / "1" / "saved_model.pb").write_text("model")
    os.utime(run / "backbone.keras", (1000, 1000))
    os.utime(export / "1", (2000, 2000))
    args = (str(run), str(export), 1)
    assert _already_exported(*args, steps=300, done=300, overwrite=False)
    assert not _already_exported(*args, steps=300, done=200, overwrite=False)  # will train
    assert not _already_exported(*args, steps=300, done=300, overwrite=True)
    assert not _already_exported(str(run), str(export), 2, steps=300, done=300,
                                 overwrite=False)
    os.utime(export / "1", (500, 500))  # older than the run: someone else's export
    assert not _already_exported(*args, steps=300, done=300, overwrite=False)


def test_sizes_read_as_people_write_them():
    from keras_ctx.common.progress import size

    assert [size(b) for b in (0, 1023, 1024, 27362, 247463936, 5 * 2**40)] == [
        "0 B", "1023 B", "1.0 KB", "26.7 KB", "236.0 MB", "5.0 TB"]


def test_prepare_says_how_much_it_wrote_and_why(tmp_path, monkeypatch):
    from keras_ctx.commands import prepare as command

    def fake_prepare(preset, corpus, out, say=print, **kwargs):
        for name, n in (("shard-00000.tfrecord", 3000), ("shard-00001.tfrecord", 2120)):
            (tmp_path / name).write_bytes(b"x" * n)
        return {"copies": 10, "corpus_bytes": 512,
                "shards": [{"file": "shard-00000.tfrecord"}, {"file": "shard-00001.tfrecord"}]}

    monkeypatch.setattr(command.data_prepare, "prepare", fake_prepare)
    said = []
    command.prepare("bert-tiny", "corpus.txt", str(tmp_path), say=said.append)
    assert said[-1] == ("Wrote 5.0 KB of records for 512 B of corpus (10x): 10 copies of each "
                        "instance, each with its own static masks (--duplicate, BERT's "
                        "dupe_factor).")

"""What a new user tries first: presets by family, a preset name given to the
commands that read text, in one process (no subprocess, no training)."""

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
    assert _listed(out) == sorted(n for n in preset_names() if get_preset(n).family == expected)


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

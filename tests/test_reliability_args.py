"""Every command's arguments, checked in one place before anything is written (issue 44).

`keras_ctx.common.validation.FLAGS` holds the range of every numeric flag of every
command; the CLI checks a command's flags against it before the command
runs, and `--set` keys and value types are checked for every command that
builds a model (pretrain, ulmfit, cvt).
"""

import argparse

import pytest

from keras_ctx import cli
from keras_ctx.common import validation

from tests.test_reliability import one_line_error, run_cli


def _numeric_options():
    """(command, dest) of every option of every command that parses an int or a float."""
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        for action in command._actions:
            if action.type in (int, float):
                yield name, action.dest


def test_every_numeric_flag_of_every_command_has_a_checked_range():
    missing = sorted(f"{name} --{dest}" for name, dest in _numeric_options()
                     if dest not in validation.FLAGS)
    assert not missing
    assert len(list(_numeric_options())) >= 30  # the table covers every command


@pytest.mark.parametrize("argv, message", [
    (["prepare", "bert-tiny", "--corpus", "builtin", "--tokenizer-sample", "0"],
     "--tokenizer-sample must be a positive integer, got 0"),
    (["prepare", "bert-tiny", "--corpus", "builtin", "--tokenizer-sample", "-5"],
     "--tokenizer-sample must be a positive integer"),
    (["prepare", "bert-tiny", "--corpus", "builtin", "--workers", "-2"],
     "--workers must be a positive integer, got -2"),
    (["prepare", "bert-tiny", "--corpus", "builtin", "--duplicate", "0"],
     "--duplicate must be a positive integer"),
    (["prepare", "bert-tiny", "--corpus", "builtin", "--shard-mb", "-1"],
     "--shard-mb must be a positive integer"),
    (["prepare", "bert-tiny", "--corpus", "builtin", "--seed", "-1"],
     "--seed must be an integer >= 0"),
    (["export", "bert-tiny", "OUT", "--sequence-length", "0"],
     "--sequence-length must be a positive integer, got 0"),
    (["export", "bert-tiny", "OUT", "--sequence-length", "-1"],
     "--sequence-length must be a positive integer, got -1"),
    (["export", "bert-tiny", "OUT", "--version", "0"], "--version must be a positive"),
    (["cvt", "--train", "t", "--unlabelled", "u", "--warm-up-steps", "0"],
     "--warm-up-steps must be a positive integer"),
    (["ulmfit", "--text", "t", "--train", "t", "--lm-epochs", "-1"],
     "--lm-epochs must be a positive integer"),
    (["cvt-tag", "RUN", "--input", "i", "--batch-size", "0"],
     "--batch-size must be a positive integer"),
    (["generate", "RUN", "hi", "--max-length", "0"], "--max-length must be a positive"),
    (["finetune", "RUN", "--train", "t", "--learning-rate", "inf"],
     "--learning-rate must be a positive finite number"),
    # --set: keys (typos name the closest), value types and ranges, for every model builder.
    (["ulmfit", "--text", "t", "--train", "t", "--set", "hiden_size=8"],
     "Unknown config key 'hiden_size' for ulmfit's AwdLstmBackbone (did you mean "
     "'hidden_size'?)"),
    (["ulmfit", "--text", "t", "--train", "t", "--set", "hidden_size=abc"],
     "takes hidden_size as an integer"),
    (["ulmfit", "--text", "t", "--train", "t", "--set", "weight_dropout=1.5"],
     "--set weight_dropout must be a number in [0, 1)"),
    (["cvt", "--train", "t", "--unlabelled", "u", "--set", "first_layer_size=abc"],
     "takes first_layer_size as an integer"),
    (["cvt", "--train", "t", "--unlabelled", "u", "--set", "frist_layer_size=8"],
     "did you mean 'first_layer_size'?"),
    (["cvt", "--train", "t", "--unlabelled", "u", "--set", "vocabulary_size=99"],
     "use --vocabulary-size 99 instead"),
    (["pretrain", "bert-tiny", "--set", "num_layers=abc"], "takes num_layers as an integer"),
    (["pretrain", "bert-tiny", "--set", "hidden_size=-4"],
     "--set hidden_size must be a positive integer"),
])
def test_bad_arguments_of_every_command_name_the_flag_before_out_is_touched(
        tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    argv = [str(out) if a == "OUT" else a for a in argv]
    if argv[0] in ("prepare", "pretrain", "cvt", "ulmfit", "finetune"):
        argv += ["--out", str(out)]
    code, output = run_cli(capsys, *argv)
    assert code == 2 and message in one_line_error(output)
    assert not out.exists()

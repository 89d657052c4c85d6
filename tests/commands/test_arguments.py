"""The Python functions the commands run check their arguments as the CLI does: an empty
text is not "not given", a number that makes no sense is refused naming the flag, before
anything is read or written (issue 53). `keras_ctx.common.validation.FLAGS` holds the
range of every numeric flag of every command (issue 44), and `--set` keys and value types
are checked for every command that builds a model (pretrain, ulmfit, cvt)."""

import argparse

import numpy as np
import pytest

import keras_ctx
from keras_ctx import cli
from keras_ctx.common import validation
from keras_ctx.common.errors import ConfigError

from tests.cli_helpers import TINY_SET, one_line_error, run_cli, write_corpus


def _pretrain_bert_tiny(out, **kwargs):
    from keras_ctx.commands.pretrain import pretrain

    return pretrain("bert-tiny", str(out), **kwargs)


def _finetune(out, **kwargs):
    from keras_ctx.commands.finetune import finetune

    return finetune("no-such-run", "no-such.tsv", str(out), **kwargs)


def _embed(out, **kwargs):
    from keras_ctx.commands.embed import embed

    return embed("no-such-run", ["a text"], **kwargs)


def _ulmfit(out, **kwargs):
    from keras_ctx.commands.ulmfit import ulmfit_from_files

    return ulmfit_from_files("no-such.tsv", "no-such.txt", str(out), **kwargs)


def _prepare(out, **kwargs):
    from keras_ctx.commands.prepare import prepare

    return prepare("bert-tiny", kwargs.pop("corpus", "builtin"), kwargs.pop("out", str(out)),
                   say=lambda line: None, **kwargs)


@pytest.mark.parametrize("command, arguments, message", [
    (_prepare, dict(corpus=""), "--corpus is empty ('')"),
    (_pretrain_bert_tiny, dict(export=""), "--export is empty ('')"),
    (_pretrain_bert_tiny, dict(data=" "), "--data is empty (' ')"),
    (_finetune, dict(export=""), "--export is empty ('')"),
    (_embed, dict(word=""), "--word is empty ('')"),
    (_embed, dict(save=""), "--save is empty ('')"),
    (_ulmfit, dict(general_text=""), "--general-text is empty ('')"),
    (_pretrain_bert_tiny, dict(learning_rate=float("nan")),
     "--learning-rate must be a positive finite"),
    (_finetune, dict(learning_rate=float("-inf")), "--learning-rate must be a positive finite"),
    (_finetune, dict(epochs=2.5), "--epochs must be a positive integer, got 2.5"),
    (_ulmfit, dict(lm_epochs=True), "--lm-epochs must be a positive integer, got True"),
])
def test_the_command_functions_refuse_before_anything_is_read_or_written(
        tmp_path, command, arguments, message):
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as error:
        command(out, **arguments)
    assert message in str(error.value)
    assert not out.exists()


def _export(out, **kwargs):
    from keras_ctx.commands.export import export_run

    return export_run("no-such-model", str(out), **kwargs)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"], ids=repr)
@pytest.mark.parametrize("command, export", [(_export, False), (_pretrain_bert_tiny, True)],
                         ids=["export", "pretrain --export"])
def test_the_export_version_is_one_rule_in_one_message(tmp_path, command, export, value):
    # Checked where the command checks its arguments, before the model is looked up
    # (an unknown model would be named otherwise) and before anything is written.
    out, target = tmp_path / "out", tmp_path / "export"
    with pytest.raises(ConfigError) as error:
        command(out, version=value, **({"export": str(target)} if export else {}))
    assert str(error.value) == f"--version must be a positive integer, got {value!r}."
    assert not out.exists() and not target.exists()


@pytest.mark.parametrize("argv, message", [
    (["pretrain", "bert-tiny", "--learning-rate", "nan"], "--learning-rate must be a positive"),
    (["finetune", "RUN", "--train", "t", "--learning-rate", "1e999"],
     "--learning-rate must be a positive finite number, got inf"),
    (["cvt", "--train", "t", "--unlabelled", "u", "--learning-rate", "-0.5"],
     "--learning-rate must be a positive finite number"),
    (["pretrain", "bert-tiny", "--checkpoint-every", "0"], "--checkpoint-every must be a pos"),
])
def test_numbers_that_make_no_sense_are_refused_on_the_command_line(tmp_path, capsys, argv,
                                                                    message):
    out = tmp_path / "out"
    code, output = run_cli(capsys, *argv, "--out", str(out))
    assert code == 2 and message in one_line_error(output)
    assert not out.exists()


def test_numpy_integers_are_integers_and_floats_are_not():
    validation.check_args(steps=np.int64(3), batch_size=np.int32(2), learning_rate=np.float32(1))
    with pytest.raises(ConfigError, match="--steps must be a positive integer, got 3.0"):
        validation.check_args(steps=3.0)


@pytest.mark.parametrize("argv", [
    ["pretrain", "bert-tiny", "--seed", str(2 ** 32)],
    ["cvt", "--train", "t", "--unlabelled", "u", "--seed", str(2 ** 40)],
])
def test_a_seed_beyond_32_bits_is_refused_naming_the_flag(tmp_path, capsys, argv):
    out = tmp_path / "out"
    code, output = run_cli(capsys, *argv, "--out", str(out))
    assert code == 2
    assert f"--seed must be at most {2 ** 32 - 1}, got {argv[-1]}" in one_line_error(output)
    assert not out.exists()


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


def test_from_preset_typos_raise_naming_the_closest_key():
    with pytest.raises(ValueError, match="'num_layer'.*did you mean 'num_layers'"):
        keras_ctx.models.from_preset("bert-tiny", num_layer=1)
    with pytest.raises(ValueError, match="'hiden_size'.*did you mean 'hidden_size'"):
        keras_ctx.models.from_preset("bert-tiny", hiden_size=64)


@pytest.mark.parametrize("flags, message", [
    (["--set", "foo=1"], "Unknown config key 'foo'"),
    (["--learning-rate", "-1"], "--learning-rate must be a positive"),
    (["--learning-rate", "nan"], "--learning-rate must be a positive"),
    (["--vocabulary-size", "5"], "--vocabulary-size must be at least"),
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--batch-size", "0"], "--batch-size must be a positive integer"),
    (["--set", "num_heads=0"], "--set num_heads must be a positive integer"),
])
def test_bad_flags_are_one_line_errors_before_the_run_dir_is_claimed(tmp_path, capsys,
                                                                     flags, message):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(tmp_path / "run"), *TINY_SET, *flags)
    assert code == 2 and message in one_line_error(output)
    assert not (tmp_path / "run").exists()

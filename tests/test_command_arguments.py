"""The Python functions the commands run check their arguments as the CLI does: an empty
text is not "not given", a number that makes no sense is refused naming the flag, before
anything is read or written (issue 53)."""

import numpy as np
import pytest

from keras_ctx.common import validation
from keras_ctx.common.errors import ConfigError

from tests.test_reliability import one_line_error, run_cli


def _pretrain(out, **kwargs):
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
    (_pretrain, dict(export=""), "--export is empty ('')"),
    (_pretrain, dict(data=" "), "--data is empty (' ')"),
    (_finetune, dict(export=""), "--export is empty ('')"),
    (_embed, dict(word=""), "--word is empty ('')"),
    (_embed, dict(save=""), "--save is empty ('')"),
    (_ulmfit, dict(general_text=""), "--general-text is empty ('')"),
    (_pretrain, dict(learning_rate=float("nan")), "--learning-rate must be a positive finite"),
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

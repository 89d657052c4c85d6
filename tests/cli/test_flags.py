"""How the `keras-ctx` command reads its flags: every spelling argparse would accept either
works or is refused in one line naming the flag (issue 53)."""

import os
import subprocess
import sys

import pytest

from keras_ctx import cli

pytestmark = pytest.mark.backend_neutral("argparse: how the command line is read")


def refusal(capsys, argv):
    """(exit status, the one line printed) of a command line argparse refuses."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, lines
    return stop.value.code, lines[0]


@pytest.mark.parametrize("argv, flag, meant", [
    (["--back", "jax", "presets"], "--back", "--backend"),
    (["--back=jax", "presets"], "--back", "--backend"),
    (["--verb", "presets"], "--verb", "--verbose"),
    (["presets", "--fam", "bert"], "--fam", "--family"),
    (["pretrain", "bert-tiny", "--out", "OUT", "--step", "3"], "--step", "--steps"),
    (["finetune", "RUN", "--train", "t.tsv", "--out", "OUT", "--learning", "1e-3"],
     "--learning", "--learning-rate"),
    # A typo is reported as itself, not as the error it would cause next: `jax` read as
    # the command, --out said to be missing.
    (["--bakend", "jax", "presets"], "--bakend", "--backend"),
    (["pretrain", "bert-tiny", "--ot", "OUT"], "--ot", "--out"),
])
def test_an_abbreviated_or_mistyped_flag_is_refused_naming_it(
        capsys, tmp_path, argv, flag, meant):
    out = tmp_path / "out"
    argv = [str(out) if a == "OUT" else a for a in argv]
    code, line = refusal(capsys, argv)
    assert code == 2
    assert f"unrecognized arguments: {flag} (did you mean '{meant}'?)" in line
    assert not out.exists()


@pytest.mark.parametrize("argv, flag", [
    (["pretrain", "bert-tiny", "--out", "OUT", "--export", ""], "--export"),
    (["pretrain", "bert-tiny", "--out", "OUT", "--data", ""], "--data"),
    (["pretrain", "bert-tiny", "--out", "OUT", "--corpus", " "], "--corpus"),
    (["finetune", "RUN", "--train", "t.tsv", "--out", "OUT", "--export", ""], "--export"),
    (["embed", "RUN", "a text", "--word", ""], "--word"),
    (["embed", "RUN", "a text", "--save", ""], "--save"),
    (["ulmfit", "--text", "t", "--train", "t", "--out", "OUT", "--general-text", ""],
     "--general-text"),
    (["pretrain", "bert-tiny", "--out", ""], "--out"),
])
def test_an_empty_value_is_refused_not_taken_as_not_given(capsys, tmp_path, argv, flag):
    out = tmp_path / "out"
    argv = [str(out) if a == "OUT" else a for a in argv]
    code, line = refusal(capsys, argv)
    assert code == 2 and f"argument {flag}: got an empty value" in line
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["--backend", "jax", "presets"],
    ["--backend=jax", "presets"],
    ["presets", "--backend", "jax"],
    ["presets", "--backend=jax"],
    ["--backend", "torch", "presets", "--backend", "jax"],  # the last one given, as argparse
])
def test_the_global_flags_are_read_before_or_after_the_command(argv):
    args = cli.build_parser().parse_args(argv)
    assert args.backend == "jax" and args.command == "presets"
    assert cli.build_parser().parse_args(["layers", "--verbose"]).verbose is True
    assert cli.build_parser().parse_args(["--verbose", "layers"]).verbose is True
    assert cli.build_parser().parse_args(["layers"]).verbose is False


PROBE = """
import sys
sys.argv[0] = "keras-ctx"  # the command's console script: keras_ctx defers Keras
import keras_ctx.cli as cli

def layers(args):
    import keras
    print("backend", keras.backend.backend())
    return 0

cli._layers = layers
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv", [
    ["--backend=jax", "layers"], ["layers", "--backend", "jax"], ["layers", "--backend=jax"]])
def test_every_accepted_spelling_of_backend_chooses_keras_backend(argv):
    pytest.importorskip("jax")
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, text=True,
                            capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["backend", "jax"]


def test_an_unknown_command_is_named_before_the_flags_after_it(capsys):
    code, line = refusal(capsys, ["pretrian", "--steps", "3"])
    assert code == 2 and "argument command: invalid choice: 'pretrian'" in line

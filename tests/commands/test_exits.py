"""The one error path's messages say what was found, where, and what to do, for the
command that ran (issue 53)."""

import errno
import importlib

import pytest

from tests.cli_helpers import one_line_error, run_cli


@pytest.mark.parametrize("argv, module, function, said, not_said", [
    # A command that writes nothing of its own spoke of checkpoints and --out.
    (["generate", "run", "hi"], "generate", "generate",
     "writes no files of its own", ("checkpoint", "--out")),
    (["presets"], "presets", "presets", "writes no files of its own", ("checkpoint", "--out")),
    (["embed", "run", "a text", "--save", "v.npz"], "embed", "embed",
     "give --save a path on another disk", ("checkpoint", "--out")),
    (["export", "run", "OUT"], "export", "export_run", "give OUT a path on another disk",
     ("checkpoint", "--out")),
    (["finetune", "run", "--train", "t.tsv", "--out", "o"], "finetune", "finetune",
     "give --out a path on another disk", ("checkpoint",)),
    (["pretrain", "bert-tiny", "--out", "o"], "pretrain", "pretrain",
     "training resumes from its last checkpoint", ()),
])
def test_a_full_disk_is_reported_in_the_terms_of_the_command_that_ran(
        capsys, monkeypatch, argv, module, function, said, not_said):
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/somewhere/file")

    monkeypatch.setattr(importlib.import_module(f"keras_ctx.commands.{module}"), function,
                        full_disk)
    code, output = run_cli(capsys, *argv)
    line = one_line_error(output)
    assert code == 2 and len(output.strip().splitlines()) == 1
    assert "no space left on the device writing /somewhere/file" in line and said in line
    assert not [word for word in not_said if word in line], line


def _backend_errors(message):
    """The same refusal as each backend's runtime raises it."""
    errors = [RuntimeError(message)]  # PyTorch raises Python's RuntimeError
    try:
        import tensorflow as tf

        errors.append(tf.errors.InvalidArgumentError(None, None, message))
    except ImportError:
        pass
    try:
        import jax

        errors.append(jax.errors.JaxRuntimeError(f"INVALID_ARGUMENT: {message}"))
    except (ImportError, AttributeError):
        pass
    return errors


def test_a_refusal_raised_by_any_backend_reads_the_same(capsys, monkeypatch):
    from keras_ctx.commands import embed

    reason = "token id 99 is outside the vocabulary of 50 ids (token_ids, row 0)"
    lines = set()
    for error in _backend_errors(reason):
        def fail(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(embed, "embed", fail)
        code, output = run_cli(capsys, "embed", "run", "text")
        assert code == 2 and len(output.strip().splitlines()) == 1
        lines.add(one_line_error(output))
    assert lines == {f"keras-ctx embed: error: {reason}"}

    def other(*args, **kwargs):
        raise KeyError("token_ids")  # Python's own type still says what it is

    monkeypatch.setattr(embed, "embed", other)
    code, output = run_cli(capsys, "embed", "run", "text")
    assert one_line_error(output) == "keras-ctx embed: error: KeyError: token_ids"

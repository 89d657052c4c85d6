"""The one error path of the `keras-ctx` command: every failure ends as one line.

`run_command` runs a command's function and turns what it raises into the
line the user reads and the exit status scripts test:

    0    done
    2    an error: "keras-ctx CMD: error: <what, which file, the fix>"
    3    training diverged (non-finite loss or weights)
    130  Ctrl-C (SIGINT): "keras-ctx CMD: stopped; resume with the same command."
    143  SIGTERM: the same line

No traceback is printed unless `--verbose` (then after the line). A command
stopped by a signal leaves what it wrote whole (every file is written
beside and renamed into place), so running it again resumes.
"""

import errno
import re
import signal
import sys
import traceback


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt (not an Exception)."""


def _raise_terminated(signum, frame):
    raise Terminated()


# Where each command writes (the argument to move to another disk) and what a rerun
# after a full disk does; a command absent here writes nothing of its own.
WRITES = {
    "pretrain": ("--out", "training resumes from its last checkpoint"),
    "prepare": ("--out", "preparing resumes from its last finished shard"),
    "finetune": ("--out", "fine-tuning starts again"),
    "adapter-language": ("--out", "training resumes from its last checkpoint"),
    "ulmfit": ("--out", "training starts again"),
    "cvt": ("--out", "training starts again"),
    "export": ("OUT", "the export is written again"),
    "convert": ("DEST", "the conversion starts again"),
    "embed": ("--save", "the vectors are computed again"),
}


def _no_space(error, command):
    where = f" writing {error.filename}" if error.filename else ""
    if command not in WRITES:
        return (f"no space left on the device{where} (keras-ctx {command} writes no files of "
                "its own: a temporary or cache directory is full). Free some space there "
                "(TMPDIR, ~/.cache) and run the same command again.")
    flag, rerun = WRITES[command]
    return (f"no space left on the device{where}. Free some space (or give {flag} a path on "
            f"another disk) and run the same command again: nothing half-written is left "
            f"in place, and {rerun}.")


def _describe(error, command):
    from keras_ctx.common.errors import KerasCtxError, one_line

    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return _no_space(error, command)
    if isinstance(error, UnicodeDecodeError):
        return (f"a file is not UTF-8 text ({one_line(error)}); convert it to UTF-8 "
                "(e.g. iconv -f latin1 -t utf-8).")
    message = one_line(error)
    if isinstance(error, (KerasCtxError, OSError)) or type(error) is ValueError:
        return message
    if _from_a_backend(error):
        # The same refusal reads the same on every backend: without the runtime's type
        # (InvalidArgumentError, JaxRuntimeError, torch's RuntimeError) and XLA's status.
        return _XLA_STATUS.sub("", message)
    # Another library's or Python's own type: its name says more than the message alone.
    return f"{type(error).__name__}: {message}"


# XLA's status code before a runtime error's message (JAX): "INVALID_ARGUMENT: ...".
_XLA_STATUS = re.compile(r"^[A-Z_]+: ")
_BACKEND_MODULES = ("tensorflow", "jax", "jaxlib", "torch")


def _from_a_backend(error):
    """Whether `error` is a backend runtime's own (TensorFlow's, JAX's, PyTorch's, which
    raises Python's RuntimeError), not Python's or another library's."""
    module = type(error).__module__.split(".")[0]
    return module in _BACKEND_MODULES or type(error) is RuntimeError


def _diverged(error):
    # Only a process that imported keras_ctx.training can have trained: the command's
    # function imports Keras itself, so a failure while it does still ends in one line.
    training = sys.modules.get("keras_ctx.training")
    return training is not None and isinstance(error, training.TrainingDiverged)


def run_command(function, args, command, verbose=False):
    """Runs `function(args)`; returns the exit status (see the module docstring)."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return function(args)
    except (KeyboardInterrupt, Terminated) as stop:
        print(f"keras-ctx {command}: stopped; resume with the same command.", file=sys.stderr,
              flush=True)
        return 130 if isinstance(stop, KeyboardInterrupt) else 143
    except Exception as error:  # noqa: BLE001  (the one place every error is reported)
        if _diverged(error):
            print(f"keras-ctx {command}: stopped: {error}", file=sys.stderr)
            return 3
        print(f"keras-ctx {command}: error: {_describe(error, command)}", file=sys.stderr,
              flush=True)
        if verbose:
            traceback.print_exc()
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)

"""Start-up of the `keras-ctx` command: a caching allocator, TensorFlow's load-time lines hidden.

Standard library only: keras_ctx/__init__.py imports it before TensorFlow.
"""

import contextlib
import os
import sys


def invoked_as_cli():
    """Whether this process is the `keras-ctx` command: its console script, or
    `python [OPTIONS] -m keras_ctx.cli ...`. A Python user who imports keras_ctx keeps
    TensorFlow's own logging and gets the whole package at `import keras_ctx`."""
    script = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    return script == "keras-ctx" or _run_module() == "keras_ctx.cli"


def _run_module():
    """The module of `python [OPTIONS] -m MODULE ...`, or None (a script or `-c`)."""
    arguments = iter(getattr(sys, "orig_argv", [])[1:])
    for argument in arguments:
        if argument == "-m":
            return next(arguments, None)
        if argument.startswith("-m"):
            return argument[2:]
        if argument in ("-X", "-W"):  # an option with its value in the next argument
            next(arguments, None)
        elif argument == "-c" or not argument.startswith("-"):
            return None
    return None


def use_backend_flag():
    """`keras-ctx --backend jax ...` sets KERAS_BACKEND, which Keras reads once, at import.

    Only for the `keras-ctx` command, before keras is imported (the flag
    overrides the environment variable).
    """
    argv = sys.argv[1:]
    if invoked_as_cli() and "--backend" in argv[:-1]:
        os.environ["KERAS_BACKEND"] = argv[argv.index("--backend") + 1]


# The backends keras_ctx runs on (docs/backends.md); Keras knows more (numpy, openvino).
BACKENDS = ("tensorflow", "jax", "torch")


def unsupported_backend(flag=None):
    """One line naming a chosen Keras backend keras_ctx does not run on, and the fix; None
    for tensorflow, jax and torch (whether installed is `cli.missing_backend`'s question).

    Args:
        flag: `--backend`'s value, or None for KERAS_BACKEND's (else tensorflow).
    """
    name = flag or os.environ.get("KERAS_BACKEND") or "tensorflow"
    if name in BACKENDS:
        return None
    chosen = f"--backend {name}" if flag else f"KERAS_BACKEND={name!r}"
    hint = (f" (written {name.strip().lower()!r})" if name.strip().lower() in BACKENDS
            else "")
    return (f"{chosen}: keras_ctx runs on Keras' {', '.join(BACKENDS[:-1])} or {BACKENDS[-1]} "
            f"backend{hint}; set KERAS_BACKEND to one of them (or pass --backend NAME).")


# TensorFlow's BFC allocator for host memory: it keeps the buffers XLA:CPU
# allocates each step instead of glibc handing them back to the kernel and
# faulting them in again (about 115,000 page faults per bert-mini step;
# docs/notes/speed.md, benchmarks/RESULTS.md).
CACHING_ALLOCATOR = ("TF_CPU_ALLOCATOR_USE_BFC", "true")


def use_caching_allocator():
    """Sets `TF_CPU_ALLOCATOR_USE_BFC=true` unless the user set it; before TensorFlow starts.

    Only for the `keras-ctx` command: a Python user's process is theirs
    (docs/notes/speed.md gives them the one line). TensorFlow reads the
    variable when it creates its CPU allocator, so this must run first.
    """
    if invoked_as_cli():
        os.environ.setdefault(*CACHING_ALLOCATOR)


def _hides_load_lines():
    if "--verbose" in getattr(sys, "orig_argv", sys.argv):
        return False
    # TensorFlow ignores TF_CPP_MIN_LOG_LEVEL for the INFO lines it logs while
    # loading (before absl::InitializeLog); a process that set it to hide INFO
    # lines (tests/conftest.py does) gets those hidden too.
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0").strip()
    return invoked_as_cli() or level not in ("", "0")


@contextlib.contextmanager
def quiet_startup():
    """Hides TensorFlow's start-up lines for the `keras-ctx` command (not --verbose), and
    for a process that set TF_CPP_MIN_LOG_LEVEL above 0 before importing keras_ctx.

    keras_ctx/__init__.py imports TensorFlow inside this context. Two kinds of
    lines need two measures: those logged before absl::InitializeLog (oneDNN,
    cudart stub, CPU features; printed once per TensorFlow shared library)
    ignore TF_CPP_MIN_LOG_LEVEL, so stderr's file descriptor points at
    /dev/null while TensorFlow loads; `failed call to cuInit` (an E line at
    the first op, on machines without a GPU) needs TF_CPP_MIN_LOG_LEVEL=3,
    which TensorFlow reads at import. A value the user set is kept.
    """
    if not _hides_load_lines():
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

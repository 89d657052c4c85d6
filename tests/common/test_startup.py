"""The start of a process: TensorFlow's load-time lines stay hidden where the process asked
for quiet, and the `keras-ctx` command answers `--help` and argument errors at once."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_neutral(
    "how the keras-ctx process starts, in subprocesses that choose their backend")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_tensorflow_load_lines_are_hidden_when_tf_cpp_min_log_level_is_set():
    """TensorFlow prints its oneDNN / cuda-driver INFO lines while loading, before
    absl::InitializeLog, whatever TF_CPP_MIN_LOG_LEVEL says (tests/conftest.py sets 2)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run([sys.executable, "-c", "import keras_ctx"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def _imported(stderr):
    """Top-level names of the modules a `-X importtime` run imported (its stderr's table)."""
    return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


HEAVY = {"tensorflow", "keras", "keras_hub", "jax", "torch"}


@pytest.mark.parametrize("how", ["python -m keras_ctx.cli", "console script"])
@pytest.mark.parametrize("args", [["--help"], ["pretrain", "--help"], ["pretrian", "--steps", "3"]],
                         ids=["help", "command help", "unknown command"])
def test_help_and_argument_errors_answer_without_importing_keras(how, args):
    if how == "console script":
        script = os.path.join(os.path.dirname(sys.executable), "keras-ctx")
        if not os.path.exists(script):
            pytest.skip(f"no keras-ctx console script beside {sys.executable}")
        command = [script, *args]
    else:
        command = [sys.executable, "-m", "keras_ctx.cli", *args]
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1", PYTHONPATH=ROOT)
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    imported = _imported(result.stderr)
    assert "keras_ctx" in imported and "argparse" in imported, result.stderr[-2000:]
    assert not imported & HEAVY, f"{' '.join(args)} imported {sorted(imported & HEAVY)}"
    if args[-1] == "--help":
        assert result.returncode == 0, result.stderr[-2000:]
        wanted = (["pretrain", "finetune", "embed", "export", "convert", "presets"]
                  if args == ["--help"] else ["--corpus", "--out", "--steps"])
        for name in wanted:
            assert name in result.stdout, result.stdout
    else:
        assert result.returncode == 2
        errors = [line for line in result.stderr.splitlines()
                  if not line.startswith("import time:")]
        assert errors[-1].startswith("keras-ctx: error: argument command: invalid choice: "
                                     "'pretrian'"), errors


# Runs the command as its console script does, with `module` absent as if not installed.
WITHOUT = """
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
sys.argv = ["keras-ctx", *{args!r}]
from keras_ctx.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize("module,args,env,chosen", [
    ("jax", ["--backend", "jax", "presets"], {}, "--backend jax"),
    ("jaxlib", ["--backend", "jax", "presets"], {}, "--backend jax"),
    ("jax", ["presets"], {"KERAS_BACKEND": "jax"}, "KERAS_BACKEND=jax"),
    ("torch", ["--backend", "torch", "presets"], {}, "--backend torch"),
])
def test_a_backend_that_is_not_installed_is_named_in_one_line(module, args, env, chosen):
    extra = "torch" if module == "torch" else "jax"
    code = WITHOUT.format(module=module, args=args)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=300, text=True,
                            capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT, **env))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"keras-ctx presets: error: {chosen} needs {module}, which is "
                               f'not installed: pip install -e ".[{extra}]" -c constraints.txt')


def test_a_package_missing_while_the_command_imports_keras_ctx_is_one_line():
    code = WITHOUT.format(module="keras", args=["presets"])
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=300, text=True,
                            capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT,
                                                          TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        "keras-ctx presets: error: ModuleNotFoundError: No module named 'keras': pip install "
        "-e . -c constraints.txt (from the root of the keras_ctx clone)"]


def test_tensorflow_found_but_not_importable_under_the_default_backend_is_one_line():
    """tests/backends.py's blocker: `find_spec` finds TensorFlow, importing it fails (a
    broken install), so the check before Keras passes and `import keras` fails."""
    code = ("import sys\nfrom tests.backends import BlockTensorFlow\n"
            "sys.meta_path.insert(0, BlockTensorFlow())\nsys.argv = ['keras-ctx', 'presets']\n"
            "from keras_ctx.cli import main\nsys.exit(main())\n")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=300, text=True,
                            capture_output=True, env=dict(env, PYTHONPATH=ROOT))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        "keras-ctx presets: error: ModuleNotFoundError: No module named 'tensorflow': pip "
        'install "tensorflow>=2.21,<2.22" (or, in the keras_ctx clone, pip install -e . -c '
        "constraints.txt)"]


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_command_on_another_backend_hides_tensorflows_load_lines(backend, tmp_path):
    """The text path loads TensorFlow under --backend jax or torch too: its oneDNN / cudart
    lines printed there (twice), though the command hides them on TensorFlow."""
    pytest.importorskip(backend)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The bank approved the loan today.\nWe sat on the bank of the river.\n\n"
                      "It will set the value.\nYou can set the timeout now.\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                            "KERAS_BACKEND")}
    result = subprocess.run(
        [sys.executable, "-m", "keras_ctx.cli", "--backend", backend, "prepare", "bert-tiny",
         "--corpus", str(corpus), "--out", str(tmp_path / "prepared"), "--workers", "1",
         "--sequence-length", "32", "--vocabulary-size", "200", "--duplicate", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Prepared 3 examples" in result.stdout
    assert result.stderr == "", result.stderr[-3000:]


@pytest.mark.parametrize("flag, env, line", [
    (None, "foo", "KERAS_BACKEND='foo': keras_ctx runs on Keras' tensorflow, jax or torch "
                  "backend; set KERAS_BACKEND to one of them (or pass --backend NAME)."),
    (None, "JAX", "KERAS_BACKEND='JAX': keras_ctx runs on Keras' tensorflow, jax or torch "
                  "backend (written 'jax'); set KERAS_BACKEND to one of them (or pass "
                  "--backend NAME)."),
    (None, "openvino", "KERAS_BACKEND='openvino': keras_ctx runs on Keras' tensorflow, jax or "
                       "torch backend; set KERAS_BACKEND to one of them (or pass --backend "
                       "NAME)."),
    ("numpy", "jax", "--backend numpy: keras_ctx runs on Keras' tensorflow, jax or torch "
                     "backend; set KERAS_BACKEND to one of them (or pass --backend NAME)."),
    (None, "jax", None), (None, "", None), ("torch", "foo", None),
])
def test_a_backend_keras_ctx_does_not_run_on_is_named_with_the_fix(monkeypatch, flag, env,
                                                                    line):
    """Keras said "Unable to import backend : foo" (or "No module named 'openvino'")."""
    from keras_ctx.common.startup import unsupported_backend

    monkeypatch.setenv("KERAS_BACKEND", env)
    assert unsupported_backend(flag) == line


def test_the_command_names_an_unsupported_backend_in_one_line(monkeypatch, capsys):
    """`KERAS_BACKEND=JAX keras-ctx presets`: the command's own check, before Keras starts."""
    from keras_ctx.cli import main

    monkeypatch.setenv("KERAS_BACKEND", "JAX")
    assert main(["presets"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["keras-ctx presets: error: KERAS_BACKEND='JAX': keras_ctx runs on Keras' "
                   "tensorflow, jax or torch backend (written 'jax'); set KERAS_BACKEND to "
                   "one of them (or pass --backend NAME)."]

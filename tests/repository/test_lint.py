"""ruff's pyflakes rules (ruff.toml) report nothing: an undefined name (the
`ops` that Seq2SeqPretrainer once called without importing) fails here, in CI,
before a user's batch finds it."""

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_neutral("ruff on the sources")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_the_lint_catches_an_undefined_name(tmp_path):
    """The configuration really selects pyflakes' undefined-name rule."""
    broken = tmp_path / "broken.py"
    broken.write_text("def f(x):\n    return ops.cast(x, 'float32')\n")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache",
                             "--config", str(ROOT / "ruff.toml"), str(broken)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "F821" in result.stdout, result.stdout

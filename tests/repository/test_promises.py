"""The repository's promises: README's test command is what CI runs, and the
documentation's command list is the parser's."""

import argparse
import pathlib
import re

import pytest

pytestmark = pytest.mark.backend_neutral("the repository's files and the parser")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_commands():
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    assert len(commands) >= 2, commands
    test_command = commands[1].strip()
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines(), (
        f"README's test command {test_command!r} is not a line of .ci/run"
    )


def test_getting_started_repeats_readmes_setup_commands():
    text = (ROOT / "docs" / "getting-started.md").read_text()
    guide = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    assert guide[:2] == readme_commands()[:2]


def test_readme_test_command_installs_the_docs_and_onnx_extras():
    """So that tests/repository/test_docs.py builds the site and the ONNX export tests
    (tests/export/test_export_onnx.py, TensorFlow's tf2onnx and torch's writer) run in CI
    instead of skipping."""
    assert ".[test,docs,onnx]" in readme_commands()[1]


def test_ci_treats_no_tests_collected_as_failure():
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"$status" -eq 5' in ci and "exit 1" in ci


def _option(command, name):
    match = re.search(rf"{name}\s+(\S+)", command)
    assert match, f"README's main job has no {name}: {command!r}"
    return match.group(1)


def test_main_job_writes_only_ignored_paths():
    """The main job must not overwrite tracked files (saved_models/ ships exports)."""
    import subprocess

    main_job = readme_commands()[0]
    assert "keras-ctx pretrain" in main_job
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    for name in ("--out", "--export"):
        path = _option(main_job, name).rstrip("/")
        # --export also writes its `-text` sibling.
        for target in {path, path + "-text"} if name == "--export" else {path}:
            ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index",
                                      target + "/1/saved_model.pb"], cwd=ROOT)
            assert ignored.returncode == 0, f"{name} {target} is not ignored by git"
            inside = [f for f in tracked if f.startswith(target + "/")]
            assert not inside, f"{name} {target} would overwrite tracked files {inside[:3]}"


def test_cli_page_names_every_command_and_flag_of_the_parser():
    from keras_ctx.cli import build_parser

    block = re.search(r"# The command line\n\n```bash\n(.*?)```",
                      (ROOT / "docs" / "cli.md").read_text(), re.S).group(1)
    documented = {}  # command -> its README lines (first line and continuations)
    for line in block.splitlines():
        if line.startswith("keras-ctx "):
            command = line.split()[1]
            documented[command] = line
        else:
            documented[command] += "\n" + line
    parser = build_parser()
    global_flags = [o for a in parser._actions for o in a.option_strings if o != "-h"
                    and o != "--help"]
    for flag in global_flags:
        assert f"keras-ctx {flag}" in block, f"docs/cli.md's command list lacks {flag}"
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, subparser in commands.choices.items():
        assert name in documented, f"docs/cli.md's command list lacks `keras-ctx {name}`"
        for action in subparser._actions:
            for flag in action.option_strings:
                # The global flags (also accepted after the command) are listed once.
                if flag.startswith("--") and flag != "--help" and flag not in global_flags:
                    assert re.search(rf"{re.escape(flag)}\b", documented[name]), (
                        f"docs/cli.md's `keras-ctx {name}` lacks {flag}")


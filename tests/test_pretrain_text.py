"""`pretrain` resolves its corpus once and passes the result down (issue 46)."""

import pytest

import keras_ctx
from keras_ctx import runs
from keras_ctx.commands import pretrain, pretrain_checks
from keras_ctx.data import fingerprints
from tests.test_cli import write_corpus
from tests.test_recipes import ENCODER


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
    from tests.test_reliability import regression

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


def test_a_run_that_changes_the_record_after_the_early_check_is_compared_again(tmp_path):
    # The early check's result is trusted at the claim only while the run
    # directory still records what it was checked against.
    from tests.test_reliability import regression

    corpus, out = tmp_path / "corpus.txt", tmp_path / "run"
    write_corpus(corpus, documents=10)
    settings = {"model": "bert-tiny", "corpus": str(corpus)}
    first = {"corpus": fingerprints.corpus(str(corpus)), "tokenizer": "a" * 64}
    runs.claim(str(out), settings, data=first)
    model, batches = regression()
    keras_ctx.training.fit_resumable(model, batches, steps=2, out_dir=str(out),
                                     checkpoint_every=2, verbose=0)
    text = pretrain_checks.resolve_text(str(corpus), str(out))  # the same corpus: passes
    assert text.recorded == first and text.corpus == str(corpus) and not text.prepared
    # Another process resumes the run on other text between the early check and the claim.
    other = {"corpus": {"source": "builtin"}, "tokenizer": "a" * 64}
    runs.claim(str(out), settings, data=other, corpus_changed="continue")
    with pytest.raises(ValueError, match="trained on another corpus"):
        runs.claim(str(out), settings, data={**text.fingerprint, "tokenizer": "a" * 64},
                   checked=text.recorded)

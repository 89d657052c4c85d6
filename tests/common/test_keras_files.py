"""Every loader of a user's Keras file goes through the checked one (issue 44, third pass).

A saved text task, a `keras-ctx cvt` tagger and a run's run.json each claim
things about the weights beside them (sizes, a sequence length, how many
weights there are): a partial, mismatched or hand-edited file is refused in
one line naming the file, before a model or input of the claimed size is
built. Also: `prepare` says how far it is while it shards.
"""

import json
import shutil
import zipfile

import h5py
import numpy as np
import pytest

from keras_ctx import cli, runs
from keras_ctx.common import progress
from keras_ctx.common.errors import KerasCtxError
from keras_ctx.tasks import text

from tests.tasks.text_fixtures import backbone, tokenizer
from tests.cli_helpers import cli_output, copy_run, one_line_error, run_cli
from tests.keras_archives import h5_datasets, rewrite_keras


def _as_int8(handle):
    name = next(n for n in h5_datasets(handle) if handle[n].ndim == 2)
    values = handle[name][...]
    del handle[name]
    handle.create_dataset(name, data=np.full(values.shape, 7, "int8"))


def _drop_one(handle):
    del handle[h5_datasets(handle)[-1]]


# ------------------------------------------------------------ a saved text task

@pytest.fixture(scope="module")
def saved_task(tmp_path_factory):
    directory = tmp_path_factory.mktemp("task") / "clf"
    text.TextClassifier(backbone("bert"), tokenizer("bert"), num_classes=2,
                        sequence_length=16).save(str(directory))
    return directory


@pytest.mark.parametrize("edit, message", [
    (lambda d: rewrite_keras(d / "model.keras", edit_weights=_as_int8), "has dtype int8"),
    (lambda d: rewrite_keras(d / "model.keras", edit_weights=_drop_one),
     "model.keras cannot be loaded"),
    (lambda d: rewrite_keras(
        d / "model.keras", edit_config=lambda c: _set_everywhere(c, "vocabulary_size", 10**6)),
     "vocabulary_size = 1000000 is more than"),
    (lambda d: _edit_json(d / "task.json", sequence_length=10**5),
     "task.json: sequence_length = 100000 is more than"),
    (lambda d: _edit_json(d / "task.json", sequence_length="abc"),
     "task.json has sequence_length='abc'"),
    (lambda d: (d / "task.json").write_text('{"task": "TextClass'), "task.json"),
])
def test_a_saved_task_that_does_not_fit_its_weights_is_refused(saved_task, tmp_path, edit,
                                                               message):
    directory = tmp_path / "clf"
    shutil.copytree(saved_task, directory)
    edit(directory)
    with pytest.raises(KerasCtxError) as raised:
        text.TextClassifier.load(str(directory))
    line = str(raised.value)
    assert message in line and "\n" not in line, line


def test_a_damaged_task_json_is_one_line_where_a_generator_is_looked_up(saved_task,
                                                                        tmp_path):
    from keras_ctx.tasks.text.generators import language_model

    directory = tmp_path / "clf"
    shutil.copytree(saved_task, directory)
    (directory / "task.json").write_text('{"task": "Causal')
    with pytest.raises(KerasCtxError, match="task.json .* is not valid JSON"):
        language_model(str(directory))


def test_a_saved_task_still_loads_whole(saved_task):
    task = text.TextClassifier.load(str(saved_task))
    assert task.predict(["a fine film"]).shape == (1, 2)


def _set_everywhere(config, key, value):
    if isinstance(config, dict):
        for name, item in config.items():
            if name == key:
                config[name] = value
            else:
                _set_everywhere(item, key, value)
    elif isinstance(config, list):
        for item in config:
            _set_everywhere(item, key, value)


def _edit_json(path, **fields):
    record = json.loads(path.read_text())
    record.update(fields)
    path.write_text(json.dumps(record))


# ------------------------------------------------------------ a `keras-ctx cvt` tagger

@pytest.fixture(scope="module")
def saved_tagger(tmp_path_factory):
    from keras_ctx.models.cvt import CvtEncoder
    from keras_ctx.pretraining.cvt import CrossViewTrainer
    from keras_ctx.tasks.cvt_tagger import save_cvt_tagger

    encoder = CvtEncoder(8, embedding_size=8, first_layer_size=8, second_layer_size=6,
                         filters=[[2, 4]], character_embedding_size=4,
                         max_characters_per_token=50, dropout=0.0, lstm_implementation="loop")
    run = tmp_path_factory.mktemp("cvt") / "run"
    save_cvt_tagger(CrossViewTrainer(encoder, 3, hidden_size=8), ["the", "river", "bank"],
                    ["A", "B", "O"], str(run))
    return run


def _other_tagger(run):
    """tagger.weights.h5 of a tagger with 4 tags over the same encoder."""
    from keras_ctx.common import keras_files
    from keras_ctx.pretraining.cvt import CrossViewTrainer

    encoder = keras_files.load_model(run / "encoder.keras")
    (run / "tagger.weights.h5").unlink()
    CrossViewTrainer(encoder, 4, hidden_size=8).save_weights(str(run / "tagger.weights.h5"))


def _with_weights(edit):
    def apply(run):
        with h5py.File(run / "tagger.weights.h5", "r+") as handle:
            edit(handle)
    return apply


@pytest.mark.parametrize("edit, message", [
    (lambda run: _edit_json(run / "vocabulary.json", hidden_size=10**6),
     "vocabulary.json: hidden_size = 1000000 is more than"),
    (lambda run: _edit_json(run / "vocabulary.json", words=["w"] * 50),
     "vocabulary.json lists 50 words but encoder.keras has 8 rows"),
    (lambda run: _edit_json(run / "vocabulary.json", tags="ABO"),
     "vocabulary.json has tags='ABO', not a list"),
    (lambda run: (run / "vocabulary.json").write_text('{"words": ["the"'),
     "vocabulary.json (a CVT vocabulary) is not valid JSON"),
    (_with_weights(_drop_one), "tagger.weights.h5 holds"),
    (_with_weights(_as_int8), "has dtype int8"),
    (_other_tagger, "tagger.weights.h5 holds"),
    (lambda run: rewrite_keras(run / "encoder.keras", edit_weights=_drop_one),
     "encoder.keras cannot be loaded"),
])
def test_a_cvt_tagger_that_does_not_fit_its_weights_is_one_line(saved_tagger, tmp_path,
                                                                capsys, edit, message):
    run = tmp_path / "run"
    shutil.copytree(saved_tagger, run)
    edit(run)
    sentences = tmp_path / "in.txt"
    sentences.write_text("the river bank\n", encoding="utf-8")
    code, output = run_cli(capsys, "cvt-tag", str(run), "--input", str(sentences))
    line = one_line_error(output)
    assert code == 2 and message in line, line


def test_a_whole_cvt_tagger_still_tags(saved_tagger, tmp_path, capsys):
    sentences = tmp_path / "in.txt"
    sentences.write_text("the river bank\n", encoding="utf-8")
    code, output = run_cli(capsys, "cvt-tag", str(saved_tagger), "--input", str(sentences))
    assert code == 0 and output.split()[0].startswith("the/"), output


# ------------------------------------------------------------ run.json's claims

@pytest.mark.parametrize("edit, message", [
    ({"sizes": {"vocabulary_size": 10**9}},
     "run.json: vocabulary_size = 1000000000 is more than the longest stored weight axis"),
    ({"sizes": {"hidden_size": 10**9}}, "run.json: hidden_size = 1000000000 is more than"),
    ({"sizes": {"max_sequence_length": 10**9}},
     "run.json: max_sequence_length = 1000000000 is more than"),
    # Inputs this long would be padded to before any model call (10**9: out of memory).
    ({"sequence_length": 10**5},
     "run.json: sequence_length = 100000 is more than the model's max_sequence_length (32"),
])
@pytest.mark.parametrize("command", ["embed", "finetune", "export"])
def test_run_json_claims_are_checked_against_the_stored_weights(tiny_run, tmp_path, capsys,
                                                                edit, message, command):
    run = copy_run(tiny_run, tmp_path / "run")
    info = json.loads((run / runs.RUN_FILE).read_text())
    for key, value in edit.items():
        info[key] = {**info[key], **value} if isinstance(value, dict) else value
    (run / runs.RUN_FILE).write_text(json.dumps(info))
    train = tmp_path / "t.tsv"
    train.write_text("".join(f"the bank {i}\t{i % 2}\n" for i in range(8)))
    argv = {"embed": ["embed", str(run), "the bank"],
            "finetune": ["finetune", str(run), "--train", str(train), "--out",
                         str(tmp_path / "ft")],
            "export": ["export", str(run), str(tmp_path / "e")]}[command]
    code, output = run_cli(capsys, *argv)
    line = one_line_error(output)
    assert code == 2 and message in line and "corrupt" not in line, line
    assert not (tmp_path / "ft").exists() and not (tmp_path / "e").exists()


@pytest.fixture(scope="module")
def finetuned(tiny_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("finetuned") / "ft"
    train = out.parent / "t.tsv"
    train.write_text("".join(f"the bank {i}\t{i % 2}\n" for i in range(8)))
    code, output = cli_output(["finetune", str(tiny_run), "--train", str(train), "--out",
                             str(out), "--epochs", "1"])
    assert code == 0, output
    return out


@pytest.mark.parametrize("damage, message", [
    (lambda path: _edit_json(path, sequence_length=10**5),
     "finetune.json: sequence_length = 100000 is more than"),
    # Damaged, not absent: it must not read as a classifier saved before finetune.json.
    (lambda path: path.write_text('{"run": "x", "family": "bert", "sequence_len'),
     "finetune.json (a fine-tuned classifier's finetune.json) is not valid JSON"),
    (lambda path: path.write_text("[1, 2]"), "finetune.json holds list, not a JSON object"),
    (lambda path: _edit_json(path, sequence_length="32"),
     "finetune.json has sequence_length='32', not an integer >= 1"),
    (lambda path: path.write_text(json.dumps({"run": "x", "family": "bert"})),
     "finetune.json lacks the field 'sequence_length'"),
])
def test_a_damaged_finetune_json_is_refused_by_export_in_one_line(finetuned, tmp_path, capsys,
                                                                 damage, message):
    tuned = tmp_path / "ft"
    shutil.copytree(finetuned, tuned)
    damage(tuned / runs.FINETUNE_FILE)
    code, output = run_cli(capsys, "export", str(tuned), str(tmp_path / "e"))
    line = one_line_error(output)
    assert code == 2 and message in line, line
    assert not (tmp_path / "e").exists()
    if "finetune.json:" not in message:  # unreadable: also where a run was expected
        code, output = run_cli(capsys, "embed", str(tuned), "the bank")
        assert code == 2 and message in one_line_error(output), output


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export")
def test_a_classifier_saved_before_finetune_json_still_exports(finetuned, tmp_path, capsys):
    tuned = tmp_path / "ft"
    shutil.copytree(finetuned, tuned)
    (tuned / runs.FINETUNE_FILE).unlink()
    # A fixed length: JAX's export serves one.
    code, output = run_cli(capsys, "export", str(tuned), str(tmp_path / "e"),
                           "--sequence-length", "8")
    assert code == 0, output


def test_a_damaged_claimed_tokenizer_sample_is_refused_on_resume(tmp_path):
    """A resumed pretrain reuses the tokenizer its run claimed, with the sample counts
    beside it; damaged, that record must not read as "no counts"."""
    out = tmp_path / "run"
    out.mkdir()
    (out / runs.SETTINGS_FILE).write_text(json.dumps({"model": "bert-tiny"}))
    runs.save_claimed_tokenizer(str(out), tokenizer("bert"), {"tokenizer_sample": {"sentences": 1}})
    assert runs.claimed_tokenizer(str(out))[1] == {"tokenizer_sample": {"sentences": 1}}
    (out / runs.TOKENIZER_DIR / runs.CLAIMED_SAMPLE_FILE).write_text('{"tokenizer_sa')
    with pytest.raises(KerasCtxError, match="sample.json .the claimed tokenizer's sample. is "
                                            "not valid JSON.*pretrain again in a new --out"):
        runs.claimed_tokenizer(str(out))


def test_a_backbone_config_claiming_a_long_position_table_is_refused(tiny_run, tmp_path,
                                                                     capsys):
    run = copy_run(tiny_run, tmp_path / "run")
    rewrite_keras(run / runs.BACKBONE_FILE,
                  edit_config=lambda c: c["config"].update(max_sequence_length=10**5))
    code, output = run_cli(capsys, "embed", str(run), "the bank")
    line = one_line_error(output)
    assert code == 2 and "max_sequence_length = 100000 is more than" in line, line


# ------------------------------------------------------------ prepare's progress

def test_prepare_says_how_far_it_is_while_it_shards(tmp_path, capsys, monkeypatch):
    from keras_ctx.commands import prepare as prepare_command

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"The river bank {i} was wide. The bank lent money {i}.\n\n"
                              for i in range(200)))
    monkeypatch.setattr(prepare_command, "PROGRESS_EVERY", 0.0)  # a line per document
    code = cli.main(["prepare", "bert-tiny", "--corpus", str(corpus), "--out",
                     str(tmp_path / "data"), "--vocabulary-size", "200", "--workers", "1",
                     "--duplicate", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    written = [line for line in out.splitlines() if " examples written, " in line]
    assert len(written) >= 2 and "/s" in written[-1], out
    assert " examples written in " in out and " sentences tokenized in " in out, out
    assert progress.current().say is None  # reporting ends with the command


def test_a_key_given_twice_in_a_keras_files_config_is_named(tmp_path):
    """json keeps the last of two values without a word: the file is ambiguous."""
    import keras

    from keras_ctx.common.errors import CheckpointError
    from keras_ctx.common.keras_files import load_model

    inputs = keras.Input((3,), name="x")
    path = tmp_path / "model.keras"
    keras.Model(inputs, keras.layers.Dense(2)(inputs)).save(path)
    edited = tmp_path / "edited.keras"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(edited, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                data = b'{"class_name": "Sequential", ' + data[1:]
            target.writestr(item, data)
    with pytest.raises(CheckpointError, match=r"edited\.keras is not a readable \.keras file "
                                              r"\(DuplicateKey: the key 'class_name' appears "
                                              r"twice in one object\)"):
        load_model(edited)

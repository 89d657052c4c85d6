"""Renamed and moved task classes (issue 55): the old names answer one more release with
a DeprecationWarning naming the new one, and files saved under them still load."""

import importlib
import json
import os
import zipfile

import keras
import numpy as np
import pytest

from keras_ctx import pretraining, tasks
from keras_ctx.models import GPTBackbone
from keras_ctx.runs import RunDirectoryError
from keras_ctx.tasks import heads, text
from tests.tasks.text_fixtures import backbone, tokenizer


@pytest.mark.parametrize("module, old, new", [
    ("keras_ctx.tasks.text", "TokenClassifier", "WordClassifier"),
    ("keras_ctx.tasks.text", "SpanQuestionAnswerer", "QuestionAnswerer"),
    ("keras_ctx.tasks.text.classifiers", "TokenClassifier", "WordClassifier"),
    ("keras_ctx.tasks.text.question_answering", "SpanQuestionAnswerer", "QuestionAnswerer"),
])
def test_a_text_tasks_old_name_is_the_new_class_with_a_warning_naming_it(module, old, new):
    with pytest.warns(DeprecationWarning, match=rf"^{module}\.{old} is now {module}\.{new};"):
        found = getattr(importlib.import_module(module), old)
    assert found is getattr(text, new)


def test_one_name_one_class_and_the_id_level_models_keep_theirs():
    with pytest.raises(AttributeError, match="has no attribute 'SpanQuestionAnswerer'"):
        text.classifiers.SpanQuestionAnswerer  # noqa: B018  (only the renamed class's module)
    assert tasks.TokenClassifier is heads.TokenClassifier
    assert tasks.SpanQuestionAnswerer is heads.SpanQuestionAnswerer
    assert (tasks.WordClassifier, tasks.QuestionAnswerer) == (text.WordClassifier,
                                                             text.QuestionAnswerer)
    public = [getattr(tasks, name) for name in tasks.__all__ if isinstance(
        getattr(tasks, name), type)]
    names = [cls.__name__ for cls in public]
    assert len(set(names)) == len(names), names


def _saved_before_the_rename(directory, old):
    """task.json as the code before the rename wrote it: the same fields, `task` naming the
    class, which was `old` (a directory saved at 739f312 holds exactly that)."""
    path = os.path.join(directory, "task.json")
    with open(path) as handle:
        info = json.load(handle)
    info["task"] = old
    with open(path, "w") as handle:
        json.dump(info, handle)


def test_task_directories_saved_under_the_old_names_load_as_the_new_classes(tmp_path):
    bert = backbone("bert", seed=1)
    tagger = text.WordClassifier(bert, tokenizer("bert"), ["O", "LOC"], sequence_length=16)
    reader = text.QuestionAnswerer(bert, tokenizer("bert"), sequence_length=24,
                                   max_answer_tokens=5)
    for task, old, loader in ((tagger, "TokenClassifier", text.TextTask),
                              (reader, "SpanQuestionAnswerer", text.QuestionAnswerer)):
        directory = str(tmp_path / old)
        task.save(directory)
        _saved_before_the_rename(directory, old)
        loaded = loader.load(directory)
        assert type(loaded) is type(task) and loaded._settings() == task._settings()
        assert (loaded.family, loaded.sequence_length) == (task.family, task.sequence_length)
        for got, want in zip(loaded.model.get_weights(), task.model.get_weights(), strict=True):
            np.testing.assert_array_equal(got, want)
    with pytest.raises(RunDirectoryError, match="holds a 'SpanQuestionAnswerer', not a "
                       r"TextClassifier; load it with keras_ctx\.tasks\.text\.QuestionAnswerer"):
        text.TextClassifier.load(str(tmp_path / "SpanQuestionAnswerer"))


def _with_config(path, target, **fields):
    """A copy of the .keras file `path` at `target` with `fields` set in its config.json."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w") as copy:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "config.json":
                data = json.dumps(dict(json.loads(data), **fields)).encode()
            copy.writestr(item, data)
    return target


def test_a_gpt_finetuner_saved_in_tasks_loads_from_pretraining(tmp_path):
    """GPTFineTuner moved from keras_ctx.tasks.gpt_finetuner to keras_ctx.pretraining; a
    .keras written before (739f312) names that module, and the Keras name it was
    registered under, keras_ctx>GPTFineTuner."""
    keras.utils.set_random_seed(0)
    gpt = GPTBackbone(vocabulary_size=30, num_layers=1, num_heads=2, hidden_size=8,
                      intermediate_size=16, max_sequence_length=8, dropout=0.0)
    model = pretraining.GPTFineTuner(gpt, num_classes=3, dropout=0.0)
    inputs = {"token_ids": np.array([[1, 2, 3, 4, 0, 0, 0, 0]], "int32"),
              "padding_mask": np.array([[1, 1, 1, 1, 0, 0, 0, 0]], "int32")}
    want = keras.ops.convert_to_numpy(model(inputs))
    model.save(str(tmp_path / "now.keras"))
    with zipfile.ZipFile(tmp_path / "now.keras") as saved:
        config = json.loads(saved.read("config.json"))
    assert config["registered_name"] == "keras_ctx>GPTFineTuner"
    assert config["module"] == "keras_ctx.pretraining.gpt_finetuner"
    old = _with_config(tmp_path / "now.keras", tmp_path / "before.keras",
                       module="keras_ctx.tasks.gpt_finetuner")
    loaded = keras.saving.load_model(old)
    assert type(loaded) is pretraining.GPTFineTuner is tasks.GPTFineTuner
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(inputs)), want)

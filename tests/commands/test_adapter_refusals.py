"""MAD-X's stages on the command line refuse in one line, before anything trains: a
missing or foreign adapter file, one made for another backbone, a language adapter without
a task adapter, a classifier with no language adapter to replace, a model without adapter
sites (the stages themselves: test_adapter_stages.py, slow)."""

import os

import keras
import numpy as np
import pytest

from keras_ctx import models, peft, registry
from keras_ctx.commands import adapter, adapter_stack
from keras_ctx.commands.export import export_run
from keras_ctx.commands.finetune import finetune
from keras_ctx.common import files
from keras_ctx.common.errors import ConfigError
from tests.cli_helpers import VOCAB, one_line_error, run_cli, tiny_backbone


def _madx_classifier(directory):
    """A classifier over a tiny BERT with an "en" language adapter under a task adapter,
    recorded in `directory` as `finetune --task-adapter --language-adapter` records it."""
    from keras_ctx.tasks import SequenceClassifier

    backbone = tiny_backbone()
    peft.add_adapter(backbone, "en", "madx_language")
    peft.add_adapter(backbone, adapter_stack.TASK_ADAPTER, "madx_task")
    os.makedirs(directory, exist_ok=True)
    files.write_json(os.path.join(directory, adapter_stack.ADAPTERS_FILE),
                     {"language_adapter": "en", "task_adapter": adapter_stack.TASK_ADAPTER})
    return SequenceClassifier(backbone, num_classes=2)


def _saved_language_adapter(backbone, name, path):
    peft.add_adapter(backbone, name, "madx_language", activate=False)
    peft.save_adapter(backbone, name, path)
    return path


def test_finetune_and_export_refuse_adapter_flags_before_loading(tmp_path):
    missing = str(tmp_path / "missing.safetensors")
    train = tmp_path / "train.tsv"
    train.write_text("a good film\tpos\na bad film\tneg\n", encoding="utf-8")
    de = _saved_language_adapter(tiny_backbone(), "de", str(tmp_path / "de.safetensors"))
    # No model named "no-such-run" exists: each refusal comes before it is looked for.
    with pytest.raises(ConfigError, match="--language-adapter .*missing.safetensors: no such "
                                          "file"):
        finetune("no-such-run", str(train), str(tmp_path / "a"), task_adapter=True,
                 language_adapter=missing)
    with pytest.raises(ConfigError, match="add --task-adapter"):
        finetune("no-such-run", str(train), str(tmp_path / "a"), language_adapter=de)
    with pytest.raises(ConfigError, match="not a safetensors file"):
        finetune("no-such-run", str(train), str(tmp_path / "a"), task_adapter=True,
                 language_adapter=str(train))
    with pytest.raises(ConfigError, match="no such file"):
        export_run("no-such-run", str(tmp_path / "e"), language_adapter=missing)
    with pytest.raises(ConfigError, match="no `keras-ctx finetune` --out directory"):
        export_run("bert-tiny", str(tmp_path / "e"), language_adapter=de)
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "e")


def test_a_language_adapter_of_another_backbone_leaves_the_classifier_as_it_was(tmp_path):
    classifier = _madx_classifier(tmp_path / "task")
    other = models.from_preset("bert-tiny", num_layers=1, hidden_size=32, num_heads=2,
                               intermediate_size=64, vocabulary_size=len(VOCAB) + 1,
                               max_sequence_length=32)
    fr = _saved_language_adapter(other, "fr", str(tmp_path / "fr.safetensors"))
    weights = [np.array(w) for w in classifier.weights]
    with pytest.raises(ConfigError, match="--language-adapter .*vocabulary_size=18, and this "
                                          "model has vocabulary_size=17"):
        adapter_stack.with_language_adapter(classifier, str(tmp_path / "task"), fr)
    assert peft.active_adapters(classifier.backbone) == ["en", adapter_stack.TASK_ADAPTER]
    for value, weight in zip(weights, classifier.weights):
        np.testing.assert_array_equal(value, np.array(weight))
    # A task adapter file is no language adapter: its place (no invertible adapter) differs.
    task = str(tmp_path / "task.safetensors")
    peft.save_adapter(classifier, adapter_stack.TASK_ADAPTER, task)
    with pytest.raises(ConfigError, match="invertible=False, and 'en' has invertible=True"):
        adapter_stack.with_language_adapter(classifier, str(tmp_path / "task"), task)
    # A classifier fine-tuned without a language adapter has none to replace.
    os.makedirs(tmp_path / "plain")
    de = _saved_language_adapter(tiny_backbone(), "de", str(tmp_path / "de.safetensors"))
    with pytest.raises(ConfigError, match="not fine-tuned on a language adapter"):
        adapter_stack.with_language_adapter(classifier, str(tmp_path / "plain"), de)


def test_a_model_without_adapter_sites_is_refused_in_one_line():
    with keras.StatelessScope():  # its shapes only: no initializer runs
        backbone = models.from_preset("elmo-small", **registry.get("elmo").tiny)  # LSTMs
    with pytest.raises(ConfigError, match="elmo-run cannot take a MAD-X language adapter: "
                                          "ElmoBackbone has no keras_ctx transformer blocks"):
        adapter.add_language_adapter(backbone, "en", 2, "elmo-run")


def test_adapter_language_refuses_its_arguments_in_one_line(tmp_path, capsys):
    text = tmp_path / "en.txt"
    text.write_text("the bank of the river.\n", encoding="utf-8")
    common = ["--out", str(tmp_path / "l")]
    cases = [(["--text", str(tmp_path / "missing.txt"), "--language", "en"], "missing.txt"),
             (["--text", str(text), "--language", "pt-BR"], "letters, digits and _"),
             (["--text", str(text), "--language", "en", "--reduction-factor", "0"],
              "--reduction-factor"),
             (["--text", str(text), "--language", "en", "--learning-rate", "nan"],
              "learning")]
    for flags, message in cases:
        code, output = run_cli(capsys, "adapter-language", "no-such-run", *flags, *common)
        assert code == 2 and message in one_line_error(output), output
    assert not os.path.exists(tmp_path / "l")

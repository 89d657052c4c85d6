"""The family registry is the one table of families: presets, recipes, framing, pooling."""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import families, recipes
from keras_ctx.models import BertBackbone, from_preset, list_presets
from keras_ctx.models.presets import get_preset, preset_names
from keras_ctx.preprocessing import TextPreprocessor
from keras_ctx.tasks import SequenceClassifier

ROOT = os.path.join(os.path.dirname(__file__), "..", "keras_ctx")
TINY = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32)


def test_every_preset_resolves_to_its_family_through_its_own_data():
    assert len(preset_names()) >= 30
    for name in preset_names():
        preset = get_preset(name)
        family = families.get(preset.family)
        assert name in family.presets
        assert preset.backbone_cls is family.backbone


def test_the_published_families_are_registered_once_each():
    assert set(families.names()) >= {"bert", "roberta", "albert", "spanbert", "electra",
                                     "xlnet", "gpt", "gpt2", "t5", "bart", "elmo", "cove"}
    with pytest.raises(ValueError, match="registered twice"):
        families.register_family(families.get("bert"))


def test_gpt_and_gpt2_share_a_class_but_not_a_family():
    gpt = from_preset("gpt", vocabulary_size=50, max_sequence_length=8, **TINY)
    gpt2 = from_preset("gpt2", vocabulary_size=50, max_sequence_length=8, **TINY)
    assert families.of_backbone(gpt).name == "gpt"
    assert families.of_backbone(gpt2).name == "gpt2"
    assert families.of_huggingface("openai-gpt").name == "gpt"


def test_ernie_and_bert_share_a_class_but_a_preset_keeps_its_family():
    ernie = from_preset("ernie-1.0-base", vocabulary_size=50, max_sequence_length=8, **TINY)
    bert = from_preset("bert-tiny", vocabulary_size=50, max_sequence_length=8, **TINY)
    assert type(ernie) is type(bert) is BertBackbone
    assert families.of_backbone(ernie).name == "ernie"
    assert families.of_backbone(bert).name == "bert"


@keras.saving.register_keras_serializable(package="tests")
class ToyBackbone(BertBackbone):
    """A new family's backbone (here BERT's network under another name)."""


def _toy_dataset(documents, tokenizer, run):
    from keras_ctx.data import pipelines

    return pipelines.roberta_dataset(documents, tokenizer, run.batch_size,
                                     sequence_length=run.sequence_length, seed=run.seed)


@pytest.fixture
def toy_family():
    from keras_ctx.data import tokenizers
    from keras_ctx.pretraining import MaskedLMPretrainer

    family = families.register_family(families.Family(
        "toy", ToyBackbone, {"toy-tiny": (dict(vocabulary_size=64, **TINY), "a toy")},
        train_tokenizer=tokenizers.train_wordpiece, framing=families.WORDPIECE_FRAMING,
        pooling=("sequence_output", "padding_mask", "mean"), dataset=_toy_dataset,
        pretrainer=lambda backbone, tokenizer, run: MaskedLMPretrainer(backbone)))
    yield family
    families.unregister_family("toy")


def test_a_new_family_is_one_registry_entry(toy_family):
    # from_preset, list_presets, the recipe, the text path and pooling all find it.
    assert isinstance(from_preset("toy-tiny"), ToyBackbone)
    assert [row[0] for row in list_presets("toy")] == ["toy-tiny"]
    assert families.of_preset("toy-tiny") is toy_family
    lines = ["the bank of the river is green", "money in the bank is safe"] * 20
    documents = tf.data.Dataset.from_tensor_slices(
        [[line, line] for line in lines])
    run = families.Run("toy-tiny", batch_size=2, sequence_length=16, vocabulary_size=60)
    backbone, pretrainer, dataset, tokenizer, extra = recipes.build("toy-tiny", documents, run)
    assert isinstance(backbone, ToyBackbone) and extra == {}
    assert backbone.vocabulary_size == tokenizer.vocabulary_size()
    batch = next(iter(dataset))
    assert batch["token_ids"].shape == (2, 16)
    inputs = TextPreprocessor(tokenizer, 8, "toy")(tf.constant(["the bank"]))
    assert inputs["token_ids"].shape == (1, 8)
    classifier = SequenceClassifier(backbone, num_classes=2)
    assert classifier.get_config()["pooling"] == "mean"


def test_no_family_name_branches_outside_the_registry():
    # `family == "bert"`, `in ("gpt", ...)`, {"xlnet": ...}[family]: the registry's job.
    names = "|".join(re.escape(n) for n in families.names())
    branch = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']|\{{\s*["']({names})["']\s*:""")
    offenders = []
    for folder in ("", "data", "pretraining", "tasks"):
        directory = os.path.join(ROOT, folder)
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".py") or name == "families.py":
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    if branch.search(line):
                        offenders.append(f"{folder}/{name}:{number}: {line.strip()}")
    assert not offenders, offenders


def test_presets_are_not_registered_outside_the_registry():
    for name in sorted(os.listdir(os.path.join(ROOT, "models"))):
        if name.endswith(".py") and name != "presets.py":
            with open(os.path.join(ROOT, "models", name), encoding="utf-8") as handle:
                assert "register_preset(" not in handle.read(), name


def test_pooling_comes_from_the_family():
    for family in families.names():
        output, mask, mode, *transform = families.get(family).pooling
        assert mode in ("pooled", "first", "last", "mean", "concat"), family
        assert transform in ([], ["tanh"]), family
    np.testing.assert_equal(families.get("xlnet").pooling[2], "last")

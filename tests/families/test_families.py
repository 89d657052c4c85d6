"""The family registry is the one table of families: presets, recipes, framing, pooling."""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import families
from keras_ctx.commands import pretrain
from keras_ctx.models import BertBackbone, from_preset, list_presets
from keras_ctx.models.presets import get_preset, preset_names
from keras_ctx.preprocessing import TextPreprocessor
from keras_ctx.tasks import SequenceClassifier

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "keras_ctx")
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32)


def test_every_preset_resolves_to_its_family_through_its_own_data():
    assert len(preset_names()) >= 30
    for name in preset_names():
        preset = get_preset(name)
        family = preset.family
        assert family is families.get(family.name) and name in family.presets
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
    backbone, pretrainer, dataset, tokenizer, extra = pretrain.build("toy-tiny", documents, run)
    # run.json's extras: only how the tokenizer sampled the corpus (no family files).
    assert isinstance(backbone, ToyBackbone) and set(extra) == {"tokenizer_sample"}
    assert backbone.vocabulary_size == tokenizer.vocabulary_size()
    batch = next(iter(dataset))
    assert batch["token_ids"].shape == (2, 16)
    inputs = TextPreprocessor(tokenizer, 8, "toy")(tf.constant(["the bank"]))
    assert inputs["token_ids"].shape == (1, 8)
    classifier = SequenceClassifier(backbone, num_classes=2)
    assert classifier.get_config()["pooling"] == "mean"


def _package_sources(skip=()):
    """(relative path, text) of every keras_ctx module outside `skip` (folders or files)."""
    for folder, _, files in sorted(os.walk(ROOT)):
        for name in sorted(files):
            path = os.path.relpath(os.path.join(folder, name), ROOT)
            if name.endswith(".py") and not any(path == s or path.startswith(s + os.sep)
                                                for s in skip):
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    yield path, handle.read()


def _role(path):
    """The layer a module belongs to: its first folder, except in a family's folder
    (models/<family>/), where family.py is the families layer and convert*.py convert."""
    parts = path.split(os.sep)
    if len(parts) == 3 and parts[0] == "models":
        for prefix, role in (("family", "families"), ("convert", "convert")):
            if parts[2].startswith(prefix):
                return role
    return parts[0]


def _listed_names():
    """Every name a family claims: its own, its model_types, keras-hub classes, TF layouts."""
    found = set()
    for family in map(families.get, families.names()):
        found.add(family.name)
        found.update(spec.model_type for spec in family.huggingface)
        found.update(spec.class_name for spec in family.keras_hub)
        if family.tf_checkpoint is not None:
            found.add(family.tf_checkpoint.name)
    return found


def test_no_module_outside_the_families_lists_or_branches_on_families():
    # `family == "bert"`, `in ("gpt", ...)`, {"xlnet": ...}, a `"bert": ...` entry of a
    # multi-line table, `register_converter("bert")`: the family modules' job.
    def alternatives(found):
        return "|".join(re.escape(n) for n in sorted(found, key=len, reverse=True))

    names = alternatives(_listed_names())
    # Preset names ("gpt2") may key the presets' own data and name a preset in an example.
    only = alternatives(_listed_names() - set(preset_names()))
    listing = re.compile(
        rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']"""  # a branch
        rf"""|\{{\s*["']({names})["']\s*:"""  # a dict keyed by family
        rf"""|^\s*["']({only})["']\s*:"""  # a further line of such a dict
        rf"""|\w\(\s*["']({only})["']\s*\)""")  # registration under one name
    offenders = [f"{path}:{number}: {line.strip()}"
                 for path, text in _package_sources(skip=("families", "registry.py"))
                 if _role(path) != "families"
                 for number, line in enumerate(text.splitlines(), 1) if listing.search(line)]
    assert not offenders, offenders


# What the family modules import (the commands above them may read them freely).
BELOW_THE_FAMILIES = ("layers", "models", "data", "pretraining", "convert", "preprocessing.py")


def test_the_registry_is_a_leaf_and_registration_flows_one_way():
    import ast

    def imports(text):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                yield node.module
                yield from (f"{node.module}.{alias.name}" for alias in node.names)

    sources = dict(_package_sources())
    assert not [m for m in imports(sources["registry.py"]) if m.startswith("keras_ctx")]
    for path, text in sources.items():
        found = set(imports(text))
        # What the families build on never reaches back into them.
        if _role(path) in BELOW_THE_FAMILIES:
            assert not {m for m in found if m.startswith("keras_ctx.families")}, path
        if path.startswith("layers"):  # layers never reach up to models
            assert not {m for m in found if m.startswith("keras_ctx.models")}, path
    # The presets read the registry, imported where its dependency shows: at the top.
    top = ast.parse(sources[os.path.join("models", "presets.py")]).body
    assert any(isinstance(node, ast.ImportFrom) and node.module == "keras_ctx"
               and "registry" in [a.name for a in node.names] for node in top)


def test_pooling_comes_from_the_family():
    for family in families.names():
        output, mask, mode, *transform = families.get(family).pooling
        assert mode in ("pooled", "first", "last", "mean", "concat"), family
        assert transform in ([], ["tanh"]), family
    np.testing.assert_equal(families.get("xlnet").pooling[2], "last")


# A toy family's converter: BERT's Hugging Face layout under model_type "toy-bert".
def _toy_export(backbone):
    from keras_ctx.convert.base import check_class
    from keras_ctx.models.bert.convert import bert_config_to_huggingface, bert_weight_map
    from keras_ctx.convert.mapping import export_weight_map

    check_class(backbone, "ToyBackbone", "toy-bert")
    config = bert_config_to_huggingface(backbone, "toy-bert", "ToyModel")
    return config, export_weight_map(bert_weight_map(backbone))


@pytest.fixture
def toy_with_converter():
    from keras_ctx.convert import config_fields
    from keras_ctx.models.bert.convert import bert_config_from_huggingface, bert_weight_map
    from keras_ctx.convert.huggingface import mapped_converter

    family = families.register_family(families.Family(
        "toy", ToyBackbone, {"toy-tiny": (dict(vocabulary_size=64, **TINY), "a toy")},
        framing=families.WORDPIECE_FRAMING,
        huggingface=(families.HuggingFace(
            "toy-bert", mapped_converter(ToyBackbone, bert_config_from_huggingface,
                                         bert_weight_map, config_fields.BERT,
                                         prefixes=("toy.", "")),
            _toy_export),)))
    yield family
    families.unregister_family("toy")


def test_a_new_family_brings_its_converter_in_its_one_entry(toy_with_converter, tmp_path):
    from keras_ctx.convert import from_huggingface, to_huggingface
    from keras_ctx.convert.formats import convert

    ours = from_preset("toy-tiny", max_sequence_length=8)
    to_huggingface(ours, tmp_path / "hf")  # the family's first model_type by default
    with open(tmp_path / "hf" / "config.json", encoding="utf-8") as handle:
        assert '"model_type": "toy-bert"' in handle.read()
    back = from_huggingface(tmp_path / "hf")
    assert type(back) is ToyBackbone and back.family == "toy"
    for mine, theirs in zip(ours.weights, back.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(mine),
                                      keras.ops.convert_to_numpy(theirs))
    ids = np.array([[2, 5, 9, 3]], "int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
    np.testing.assert_allclose(keras.ops.convert_to_numpy(back(inputs)["sequence_output"]),
                               keras.ops.convert_to_numpy(ours(inputs)["sequence_output"]),
                               atol=1e-6)
    # `keras-ctx convert` records the family the model_type names.
    assert convert(tmp_path / "hf", tmp_path / "run")["family"] == "toy"


def test_a_model_type_is_claimed_by_one_family_only(toy_with_converter, tmp_path):
    import json

    from keras_ctx.convert import CheckpointError, from_huggingface

    clash = families.Family("clash", ToyBackbone, {"clash-tiny": ({}, "")},
                            huggingface=(families.HuggingFace("bert", _toy_export),))
    with pytest.raises(ValueError, match="'bert' is registered twice"):
        families.register_family(clash)
    assert "clash" not in families.names()
    assert "clash-tiny" not in preset_names()  # nothing half-registered
    # Unregistered, the toy's model_type is unknown again: no second table remembers it.
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "toy-bert"}))
    families.unregister_family("toy")
    try:
        with pytest.raises(CheckpointError, match="model_type 'toy-bert' is not supported"):
            from_huggingface(tmp_path, load_weights=False)
    finally:
        families.register_family(toy_with_converter)


def test_a_backbone_without_a_recorded_family_is_its_owners_whatever_the_order():
    """BertBackbone is BERT's, and mBERT, SpanBERT and ERNIE borrow it: said in their
    entries (`borrows_backbone`), not by which module registered first."""
    bare = BertBackbone(vocabulary_size=50, max_sequence_length=8, **TINY)
    assert families.of_backbone(bare).name == "bert"
    borrowers = {n for n in families.names() if families.get(n).backbone is BertBackbone}
    assert borrowers == {"bert", "mbert", "spanbert", "ernie"}
    bert = families.get("bert")
    families.unregister_family("bert")
    try:
        families.register_family(bert)  # now registered after its borrowers
        assert families.of_backbone(bare) is bert
    finally:
        families.unregister_family("bert")
        families.register_family(bert)


def test_two_families_owning_one_backbone_class_are_refused():
    with pytest.raises(ValueError, match="both own BertBackbone: give the one that reuses it "
                                         "borrows_backbone=True"):
        families.register_family(families.Family("toy-owner", BertBackbone))
    assert "toy-owner" not in families.names()
    families.register_family(families.Family("toy-owner", BertBackbone, borrows_backbone=True))
    families.unregister_family("toy-owner")


def test_every_backbone_keeps_its_registered_keras_name_and_old_files_load(tmp_path):
    """Saved `.keras` files name classes `keras_ctx>ClassName`: the move of each family into
    its folder kept those names, and a file that records the old module still loads."""
    import json
    import zipfile

    classes = {families.get(n).backbone for n in families.names()}
    assert {keras.saving.get_registered_name(c) for c in classes} == {
        f"keras_ctx>{c.__name__}" for c in classes}
    assert {c.__name__ for c in classes} >= {
        "BertBackbone", "RobertaBackbone", "AlbertBackbone", "ElectraBackbone",
        "XLNetBackbone", "GPTBackbone", "T5Backbone", "BartBackbone", "ElmoBackbone",
        "CoveBackbone", "XLMBackbone", "AwdLstmBackbone"}
    model = BertBackbone(vocabulary_size=50, max_sequence_length=8, **TINY)
    model.save(tmp_path / "new.keras")
    # The same file as saved before the move: its config names module keras_ctx.models.bert.
    with zipfile.ZipFile(tmp_path / "new.keras") as new, \
            zipfile.ZipFile(tmp_path / "old.keras", "w") as old:
        for item in new.infolist():
            data = new.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                assert config["module"] == "keras_ctx.models.bert.backbone"
                config["module"] = "keras_ctx.models.bert"
                data = json.dumps(config).encode()
            old.writestr(item, data)
    loaded = keras.saving.load_model(tmp_path / "old.keras")
    assert type(loaded) is BertBackbone
    for mine, theirs in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(mine),
                                      keras.ops.convert_to_numpy(theirs))


# --- a family is one folder (docs/design.md, "Where new code goes") ---------------------

MODELS = os.path.join(ROOT, "models")


def _design_family_files():
    """The files docs/design.md says a family's folder holds."""
    with open(os.path.join(ROOT, "..", "docs", "design.md"), encoding="utf-8") as handle:
        text = handle.read()
    bullet = text[text.index("- **A new family**"):text.index("- **A new objective**")]
    return set(re.findall(r"`models/<family>/([a-z_*]+\.py)`", bullet))


def test_each_family_folder_holds_the_files_the_design_lists():
    import fnmatch

    listed = _design_family_files()
    assert {"backbone.py", "family.py", "convert.py"} <= listed, listed
    folders = sorted(name for name in os.listdir(MODELS)
                     if os.path.isfile(os.path.join(MODELS, name, "family.py")))
    for folder in folders:
        files = {n for n in os.listdir(os.path.join(MODELS, folder)) if n.endswith(".py")}
        strays = {n for n in files - {"__init__.py"}
                  if not any(fnmatch.fnmatch(n, pattern) for pattern in listed)}
        assert not strays, f"models/{folder}/ holds files docs/design.md does not list: {strays}"
    # One line in keras_ctx/families/__init__.py per folder, and nothing else lists one.
    with open(os.path.join(ROOT, "families", "__init__.py"), encoding="utf-8") as handle:
        lines = re.findall(r"^from keras_ctx\.models\.(\w+) import family\b", handle.read(),
                           flags=re.M)
    assert sorted(lines) == folders and len(lines) == len(set(lines))
    # Every registered family is registered by a family.py of a folder.
    import sys

    registered_in = {name: next(module for module, value in sys.modules.items()
                                if module.startswith("keras_ctx.models.")
                                and module.endswith(".family")
                                and families.get(name) in vars(value).values())
                     for name in families.names()}
    assert {m.split(".")[2] for m in registered_in.values()} == set(folders)


TOY_FILES = {
    "__init__.py": '"""A toy family, one folder (tests/test_families.py)."""\n',
    "backbone.py": '''"""The toy model: BERT's network under another name."""
import keras

from keras_ctx.models.bert.backbone import BertBackbone

TOY_PRESETS = {"toyfolder-tiny": (dict(vocabulary_size=64, num_layers=1, num_heads=2,
                                       hidden_size=16, intermediate_size=32), "a toy")}


@keras.saving.register_keras_serializable(package="tests_toyfolder")
class ToyFolderBackbone(BertBackbone):
    pass
''',
    "convert.py": '''"""The toy's checkpoint map: BERT's under model_type "toyfolder"."""
from keras_ctx.convert import config_fields
from keras_ctx.convert.huggingface import mapped_converter
from keras_ctx.models.bert.convert import bert_config_from_huggingface, bert_weight_map
from keras_ctx.models.toyfolder.backbone import ToyFolderBackbone
from keras_ctx.registry import HuggingFace

HUGGINGFACE = (HuggingFace("toyfolder", mapped_converter(
    ToyFolderBackbone, bert_config_from_huggingface, bert_weight_map, config_fields.BERT)),)
''',
    "family.py": '''"""The toy's registry entry."""
from keras_ctx.families.common import POOLED, TINY_TRANSFORMER, WORDPIECE_FRAMING, pipeline
from keras_ctx.families.common import pretrainer
from keras_ctx.data import pipelines, tokenizers
from keras_ctx.models.toyfolder import backbone, convert
from keras_ctx.pretraining import RobertaPretrainer
from keras_ctx.registry import Family, register_family

TOY = register_family(Family(
    "toyfolder", backbone.ToyFolderBackbone, backbone.TOY_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.roberta_dataset),
    pretrainer=pretrainer(RobertaPretrainer), huggingface=convert.HUGGINGFACE,
    tiny=TINY_TRANSFORMER, objective=(RobertaPretrainer, ())))
''',
}


def test_a_new_family_is_one_folder_and_one_line(tmp_path, monkeypatch):
    """A toy family written as docs/design.md lists (its folder's files) and imported
    by its one line: the registry, presets, converters and the tests' tables find it."""
    import importlib
    import runpy
    import sys

    import keras_ctx.models

    folder = tmp_path / "toyfolder"
    folder.mkdir()
    # decoder.py: only a causal backbone that does not decode by itself has one (XLM's CLM).
    assert set(TOY_FILES) == _design_family_files() - {"convert*.py", "decoder.py"}
    for name, text in TOY_FILES.items():
        (folder / name).write_text(text)
    monkeypatch.setattr(keras_ctx.models, "__path__", [*keras_ctx.models.__path__, str(tmp_path)])
    try:
        importlib.import_module("keras_ctx.models.toyfolder.family")  # the registry line
        family = families.get("toyfolder")
        backbone = from_preset("toyfolder-tiny")
        assert families.of_preset("toyfolder-tiny") is family
        assert families.of_backbone(backbone) is family
        assert families.of_huggingface("toyfolder") is family
        assert [row[0] for row in list_presets("toyfolder")] == ["toyfolder-tiny"]
        # What the tests' tables read (tiny sizes, the paper's objective) is in the entry,
        # and the tables, built from the registry, list the toy with no line of theirs
        # edited (run afresh: the imported ones were built before the toy existed).
        assert family.tiny == families.TINY_TRANSFORMER
        assert family.objective[0].__name__ == "RobertaPretrainer"
        tables = {name: runpy.run_path(os.path.join(TESTS, name + ".py"))
                  for name in ("tiny_backbones", "tiny_recipes")}
        assert tables["tiny_backbones"]["TINY"]["toyfolder"] == dict(
            families.TINY_TRANSFORMER, vocabulary_size=50)
        assert tables["tiny_recipes"]["FAMILIES"]["toyfolder-tiny"] == [
            f"{key}={value}" for key, value in families.TINY_TRANSFORMER.items()]
        # Its recipe builds the objective its entry declares, from its tiny sizes.
        lines = ["the bank of the river is green", "money in the bank is safe"] * 10
        documents = tf.data.Dataset.from_tensor_slices([[line, line] for line in lines])
        run = families.Run("toyfolder-tiny", batch_size=2, sequence_length=16,
                           vocabulary_size=60)
        backbone, pretrainer, _, _, _ = pretrain.build("toyfolder-tiny", documents, run,
                                                       overrides=dict(family.tiny))
        assert type(backbone).__name__ == "ToyFolderBackbone" and backbone.num_layers == 1
        assert type(pretrainer) is family.objective[0]
    finally:
        if "toyfolder" in families.names():
            families.unregister_family("toyfolder")
        for module in [m for m in sys.modules if m.startswith("keras_ctx.models.toyfolder")]:
            del sys.modules[module]


def test_one_family_reads_allennlp_files_and_the_converters_reach_it_by_its_entry():
    # keras_ctx.convert imports no model: its from_allennlp is the registered family's.
    from keras_ctx import convert
    from keras_ctx.models.elmo import convert as elmo_convert

    assert families.allennlp() is families.get("elmo").allennlp
    assert families.allennlp().convert is elmo_convert.from_allennlp
    assert convert.from_allennlp.__module__ == "keras_ctx.convert.allennlp"
    clash = families.Family("toy-elmo", ToyBackbone, allennlp=families.get("elmo").allennlp)
    with pytest.raises(ValueError, match="Reader of allennlp files 'allennlp' is registered "
                                         "twice \\(families 'elmo' and 'toy-elmo'\\)"):
        families.register_family(clash)
    elmo = families.get("elmo")
    families.unregister_family("elmo")
    try:
        with pytest.raises(ValueError, match="No registered family reads allennlp files"):
            convert.from_allennlp("options.json", "weights.hdf5")
    finally:
        families.register_family(elmo)

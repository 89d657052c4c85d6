"""An XLM model reads text in the language it is told (keras_ctx/preprocessing.py
`text_language`): `--language` on embed / finetune / export and TextPreprocessor's
`language=` give both the Moses rules (French elision, Romanian's extra step) and the language
id of the model's `languages` (XLM's id2lang, kept in its config). Against transformers'
XLMTokenizer(lang) ids and XLMModel(langs=...) outputs on one tiny random checkpoint."""

import json
import re

import numpy as np
import pytest

from keras_ctx import handles, registry
from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from keras_ctx.data import tokenizers
from keras_ctx.preprocessing import TextPreprocessor, text_language
from tests.cli_helpers import cli_output, one_line_error
from tests.data.xlm_vocabulary import write_xlm_vocabulary

LANG2ID = {"en": 0, "fr": 1, "ro": 2}
# Where the languages' rules read other words: French elision ("l'" "homme" in French,
# "l" "'homme" in English), Romanian's cedilla and comma letters (transformers'
# romanian_preprocessing, kept in a cased model: "Şi" is "Si" in Romanian only).
TEXTS = {"fr": "L'homme l'a vu aujourd'hui .", "ro": "Şi ţara a plătit ."}
LINES = [text for text in TEXTS.values()] + [
    "L' homme l' a vu aujourd' hui .", "l 'homme l 'a vu", "Si tara a platit .",
    "The man's dog isn't here ."] * 12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(directory, transformers' XLMModel, XLMTokenizer): a cased 3-language checkpoint
    (XLM-17/100's do_lowercase_and_remove_accent False) with lang2id in its config."""
    import torch
    from transformers import XLMConfig, XLMModel, XLMTokenizer

    directory = tmp_path_factory.mktemp("xlm-enfrro")
    ours = tokenizers.train_xlm_bpe(LINES, 120, lowercase_and_remove_accent=False)
    files = write_xlm_vocabulary(ours, directory)
    with open(directory / "tokenizer_config.json", "w") as handle:
        json.dump({"do_lowercase_and_remove_accent": False}, handle)
    config = XLMConfig(vocab_size=ours.vocabulary_size(), emb_dim=16, n_layers=2, n_heads=2,
                       n_langs=3, max_position_embeddings=64, lang2id=LANG2ID,
                       id2lang={i: code for code, i in LANG2ID.items()})
    torch.manual_seed(0)
    model = XLMModel(config).eval()
    model.save_pretrained(directory)
    return str(directory), model, XLMTokenizer(*files, do_lowercase_and_remove_accent=False)


def _reference_ids(reference, text, language):
    # transformers 5.24's tokenize() does not hand `lang` on to XLM's _tokenize.
    pieces = reference._tokenize(text, lang=language)
    return reference.build_inputs_with_special_tokens(reference.convert_tokens_to_ids(pieces))


def _reference_output(model, ids, language):
    import torch

    ids = torch.tensor([ids])
    with torch.no_grad():
        out = model(ids, langs=torch.full_like(ids, LANG2ID[language]))
    return out.last_hidden_state[0].numpy()


@pytest.mark.parametrize("language", ["fr", "ro"])
def test_the_preprocessor_reads_each_language_as_transformers_xlm(checkpoint, language):
    directory, model, reference = checkpoint
    resolved = handles.resolve(directory, need_tokenizer=True)
    backbone, tokenizer = resolved.backbone, resolved.tokenizer
    assert backbone.languages == ("en", "fr", "ro")  # config.json's id2lang order
    text = TEXTS[language]
    want = _reference_ids(reference, text, language)
    preprocess = TextPreprocessor(tokenizer, 24, "xlm", language=language,
                                  languages=backbone.languages)
    inputs = {k: np.asarray(v) for k, v in preprocess(np.array([text], object)).items()}
    n = len(want)
    assert inputs["token_ids"][0, :n].tolist() == want
    assert (inputs["language_ids"] == LANG2ID[language]).all()
    got = np.asarray(backbone.predict(inputs, verbose=0)["sequence_output"])[0, :n]
    np.testing.assert_allclose(got, _reference_output(model, want, language), atol=1e-4)
    # What every command read before: English rules under id 0, another input.
    old = _reference_ids(reference, text, "en")
    assert old != want


def test_embed_language_is_the_reference_and_not_the_old_default(checkpoint, tmp_path):
    directory, model, reference = checkpoint
    text = TEXTS["fr"]
    save = tmp_path / "fr.npz"
    code, output = cli_output(["embed", directory, text, "--language", "fr", "--save",
                               str(save)])
    assert code == 0, output[-2000:]
    want = _reference_ids(reference, text, "fr")
    got = np.load(save)["vectors"][0, :len(want)]
    np.testing.assert_allclose(got, _reference_output(model, want, "fr"), atol=1e-4)
    old_ids = _reference_ids(reference, text, "en")  # the old silent default: en, id 0
    old = _reference_output(model, old_ids, "en")
    assert not np.allclose(got[:min(len(want), len(old_ids))],
                           old[:min(len(want), len(old_ids))], atol=1e-2)
    # A model of several languages and none given: refused, naming the flag and choices.
    code, output = cli_output(["embed", directory, text])
    error = one_line_error(output)
    assert code == 2 and "--language CODE" in error and "one of en, fr, ro" in error, error
    code, output = cli_output(["embed", directory, text, "--language", "de"])
    error = one_line_error(output)
    assert code == 2 and "'de' is not one of the model's languages (en, fr, ro)" in error


def test_export_language_needs_a_text_signature_that_a_saved_model_can_hold(checkpoint,
                                                                           tmp_path):
    code, output = cli_output(["export", checkpoint[0], str(tmp_path / "out"), "--language",
                               "fr"])
    assert code == 2 and "add --with-text" in one_line_error(output)
    # XLM's Moses rules run in Python (tf.py_function): a loaded SavedModel's serve_text
    # failed ("Could not find callback"), so it is refused instead of written.
    code, output = cli_output(["export", checkpoint[0], str(tmp_path / "out"), "--language",
                               "fr", "--with-text"])
    assert code == 2 and "XLMBPETokenizer runs Python" in one_line_error(output)
    assert not (tmp_path / "out").exists()


def test_which_language_a_model_reads():
    xlm, bert = registry.get("xlm"), registry.get("bert")
    assert text_language(xlm, ("de", "fr"), "fr") == ("fr", 1)
    assert text_language(xlm, ("fr",), None) == ("fr", 0)  # one language: no flag needed
    assert text_language(xlm, None, None) == (None, 0)  # a model that names none: as before
    for languages, language, refusal in [
            (("de", "fr"), None, "give the text's language with --language CODE"),
            (("de", "fr"), "en", "'en' is not one of the model's languages (de, fr)"),
            (None, "fr", "The model names no languages")]:
        with pytest.raises(ValueError, match=re.escape(refusal)):
            text_language(xlm, languages, language)
    with pytest.raises(ValueError, match="bert family's models read no language ids"):
        text_language(bert, None, "fr")
    assert text_language(bert, None, None) == (None, 0)


def test_the_languages_round_trip_through_hugging_face_configs(checkpoint, tmp_path):
    from transformers import XLMConfig

    backbone = from_huggingface(checkpoint[0])
    out = to_huggingface(backbone, tmp_path / "out")
    written = XLMConfig.from_pretrained(out)
    assert written.lang2id == LANG2ID
    assert {int(i): code for i, code in written.id2lang.items()} == {0: "en", 1: "fr", 2: "ro"}
    assert from_huggingface(out).languages == ("en", "fr", "ro")
    config = json.loads(open(f"{checkpoint[0]}/config.json").read())
    tensors = f"{checkpoint[0]}/model.safetensors"
    for number, (change, refusal) in enumerate([({"id2lang": {"0": "fr", "1": "en", "2": "ro"}}, "disagree"),
                            ({"lang2id": {"en": 0, "fr": 2}, "id2lang": None}, "not 0..1"),
                            ({"n_langs": 2}, "ids cannot hold the 3 languages")]):
        bad = tmp_path / f"bad{number}"
        bad.mkdir()
        (bad / "config.json").write_text(json.dumps({**config, **change}))
        (bad / "model.safetensors").symlink_to(tensors)
        with pytest.raises(CheckpointError, match=refusal):
            from_huggingface(str(bad))


def _tokenizer_side_checkpoint(checkpoint, directory, tokenizer_fields, config_fields=None):
    """The fixture's checkpoint in `directory` with config.json's languages replaced by
    `config_fields` and tokenizer_config.json's fields `tokenizer_fields` (XLMTokenizer's
    lang2id / id2lang, as transformers saves a tokenizer built with them)."""
    import shutil

    from transformers import XLMTokenizer

    source = checkpoint[0]
    directory.mkdir()
    config = json.loads(open(f"{source}/config.json").read())
    config = {k: v for k, v in config.items() if k not in ("lang2id", "id2lang")}
    (directory / "config.json").write_text(json.dumps({**config, **(config_fields or {})}))
    (directory / "model.safetensors").symlink_to(f"{source}/model.safetensors")
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(f"{source}/{name}", directory / name)
    XLMTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"),
                 do_lowercase_and_remove_accent=False, **tokenizer_fields
                 ).save_pretrained(str(directory))
    return str(directory)


def test_the_languages_only_in_tokenizer_config_are_read_as_transformers_does(checkpoint,
                                                                              tmp_path):
    """A checkpoint whose lang2id / id2lang sit in tokenizer_config.json alone reads its
    languages from there (was: a model of no languages, every text read as id 0)."""
    _, model, _ = checkpoint
    id2lang = {i: code for code, i in LANG2ID.items()}
    directory = _tokenizer_side_checkpoint(checkpoint, tmp_path / "moved", {
        "lang2id": LANG2ID, "id2lang": id2lang})
    from transformers import XLMTokenizer

    reference = XLMTokenizer.from_pretrained(directory)  # transformers' own reading
    assert reference.lang2id == LANG2ID
    resolved = handles.resolve(directory, need_tokenizer=True)
    assert resolved.backbone.languages == ("en", "fr", "ro")
    text = TEXTS["fr"]
    want = _reference_ids(reference, text, "fr")
    preprocess = TextPreprocessor(resolved.tokenizer, 24, "xlm", language="fr",
                                  languages=resolved.backbone.languages)
    inputs = {k: np.asarray(v) for k, v in preprocess(np.array([text], object)).items()}
    assert inputs["token_ids"][0, :len(want)].tolist() == want
    assert (inputs["language_ids"] == reference.lang2id["fr"]).all()
    got = np.asarray(resolved.backbone.predict(inputs, verbose=0)["sequence_output"])
    np.testing.assert_allclose(got[0, :len(want)], _reference_output(model, want, "fr"),
                               atol=1e-4)
    # Both files naming them: equal is read, different refused naming both files.
    same = _tokenizer_side_checkpoint(checkpoint, tmp_path / "same", {"lang2id": LANG2ID},
                                      {"id2lang": {str(i): c for i, c in id2lang.items()}})
    assert from_huggingface(same, load_weights=False).languages == ("en", "fr", "ro")
    other = _tokenizer_side_checkpoint(checkpoint, tmp_path / "other", {
        "lang2id": {"fr": 0, "en": 1, "ro": 2}}, {"lang2id": LANG2ID})
    with pytest.raises(CheckpointError, match=re.escape(
            "config.json names the languages en, fr, ro (in id order), tokenizer_config.json "
            "fr, en, ro")):
        from_huggingface(other, load_weights=False)
    bad = _tokenizer_side_checkpoint(checkpoint, tmp_path / "bad", {
        "lang2id": {"en": 0, "fr": 2}})
    with pytest.raises(CheckpointError, match=r"tokenizer_config.json: lang2id numbers"):
        from_huggingface(bad, load_weights=False)


def _train_file(directory):
    train = directory / "train.tsv"
    train.write_text(f"{TEXTS['fr']}\tyes\nLe chat .\tno\n")
    return str(train)


def test_finetune_of_a_model_of_several_languages_needs_the_language(checkpoint, tmp_path):
    out = tmp_path / "tuned"
    code, output = cli_output(["finetune", checkpoint[0], "--train", _train_file(tmp_path),
                               "--out", str(out)])
    error = one_line_error(output)
    assert code == 2 and "--language CODE" in error and "en, fr, ro" in error, error
    assert not (out / "classifier.keras").exists()


@pytest.mark.slow  # ~10 s on a loaded machine: a classifier compiled and fitted
def test_finetune_reads_the_training_text_in_its_language(checkpoint, tmp_path,
                                                          monkeypatch):
    from keras_ctx.commands import finetune

    directory, _, reference = checkpoint
    train, out = _train_file(tmp_path), tmp_path / "tuned"
    seen, real = [], finetune.text_inputs
    monkeypatch.setattr(finetune, "text_inputs", lambda *a: seen.append(real(*a)) or seen[-1])
    code, output = cli_output(["finetune", directory, "--train", train, "--out", str(out),
                               "--language", "fr", "--epochs", "1"])
    assert code == 0, output[-2000:]
    (inputs, _), = seen
    want = _reference_ids(reference, TEXTS["fr"], "fr")
    assert inputs["token_ids"][0, :len(want)].tolist() == want
    assert (inputs["language_ids"] == LANG2ID["fr"]).all()


def test_a_run_keeps_its_languages_in_id_order():
    from keras_ctx.models import from_preset

    family = registry.get("xlm")
    run = registry.Run("xlm-mlm-enfr-1024", 4, 32, 200,
                       inputs=(("languages", ("fr", "de")),))
    config = family.recipe_config(run)
    assert config["languages"] == ["de", "fr"]  # XLM's sorted ids: de 0, fr 1
    backbone = from_preset("xlm-mlm-enfr-1024", num_layers=1, hidden_size=16, num_heads=2,
                           intermediate_size=32, vocabulary_size=50, **config)
    again = type(backbone).from_config(backbone.get_config())  # as backbone.keras keeps it
    assert again.languages == ("de", "fr")
    for languages, refusal in [(["de", "de"], "names a language twice"),
                               ("de", "lists language codes in id order")]:
        with pytest.raises(ValueError, match=refusal):
            type(backbone).from_config({**backbone.get_config(), "languages": languages})
    # Without --languages the one corpus is read by the tokenizer's (English) rules, id 0.
    assert family.recipe_config(registry.Run("xlm-mlm-en-2048", 4, 32, 200))["languages"] == [
        "en"]


@pytest.mark.slow  # ~10 s: a tiny two-language run, then embed
def test_a_pretrained_run_reads_each_language_by_its_own_id(corpora, tmp_path):
    from keras_ctx.commands.embed import TextModel
    from tests.cli_helpers import XLM_TINY

    en, fr, _ = corpora
    out, save = str(tmp_path / "run"), tmp_path / "fr.npz"
    # The English corpus named German: XLM's sorted ids make it 0, French 1.
    code, output = cli_output(["pretrain", "xlm-mlm-enfr-1024", "--corpus", fr, "--corpus",
                               en, "--languages", "fr,de", "--out", out, "--steps", "2",
                               *XLM_TINY])
    assert code == 0, output[-2000:]
    assert "No sense table: its sentences are English" in output  # not read as de or fr
    model = TextModel(out)
    assert model.languages == ("de", "fr")
    text = "le chat assis sur un tapis ."
    code, output = cli_output(["embed", out, text, "--language", "fr", "--save", str(save)])
    assert code == 0, output[-2000:]
    preprocess = TextPreprocessor(model.tokenizer, 32, "xlm", language="fr",
                                  languages=model.languages)
    ids = {k: np.asarray(v) for k, v in preprocess(np.array([text], object)).items()}
    assert (ids["language_ids"] == 1).all()
    want = np.asarray(model.backbone.predict(ids, verbose=0)["sequence_output"])
    np.testing.assert_allclose(np.load(save)["vectors"], want, atol=1e-5)
    as_german = dict(ids, language_ids=np.zeros_like(ids["language_ids"]))
    assert not np.allclose(np.asarray(model.backbone.predict(as_german, verbose=0)[
        "sequence_output"]), want, atol=1e-4)
    code, output = cli_output(["embed", out, text])
    assert code == 2 and "one of de, fr" in one_line_error(output)


def test_madx_and_monolingual_transfer_refuse_a_model_of_several_language_ids(checkpoint,
                                                                                 tmp_path):
    """Their masked LM feeds no language id: an XLM model of several languages would read
    every text as its language 0 ("en" here), where French was meant."""
    from keras_ctx.commands import adapter, transfer
    from keras_ctx.common.errors import ConfigError

    directory = str(checkpoint[0])
    text = tmp_path / "fr.txt"
    text.write_text(TEXTS["fr"] + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="reads a language id with each token"):
        adapter.language_adapter(directory, str(text), "fr", str(tmp_path / "a"), steps=1)
    with pytest.raises(ConfigError, match="a model of 3 languages"):
        transfer.transfer_vocabulary(directory, str(text), str(tmp_path / "t"), steps=1)
    assert not (tmp_path / "a" / adapter.LANGUAGE_ADAPTER_FILE).exists()
    assert not (tmp_path / "t" / "run.json").exists()

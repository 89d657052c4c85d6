"""Every family x every command that takes a run directory, on tiny runs (issue 24).

Each family with a pretraining recipe pretrains once (two steps, tiny sizes);
then embed, embed --word, finetune, export, and export / embed of the
directory finetune wrote each exit 0, or exit 2 with one `keras-ctx` line.
"""

import os

import keras
import numpy as np
import pytest

from keras_ctx import families
from keras_ctx.cli import main
from tests.cli_helpers import write_corpus
from tests.sense_table_off import sense_table_off
from tests.tiny_recipes import FAMILIES as TINY_PRESETS

TINY_PRESETS = dict(TINY_PRESETS, **{
    "gpt3-small": ["num_layers=2", "num_heads=2", "hidden_size=32", "intermediate_size=64"],
    "gpt-neo-125m": ["num_layers=2", "num_heads=2", "hidden_size=32", "intermediate_size=64"],
})
PRESET_OF = {families.of_preset(p).name: p for p in TINY_PRESETS}
RECIPES = sorted(n for n in families.names() if families.get(n).dataset is not None
                 and not getattr(families.get(n).dataset, "needs", ""))  # CoVe's: its own file
FAST = {"bert", "elmo"}  # the others with -m slow (~30 s each)
TEXTS = ["the bank of the river", "a bank loan of money"]
# A classifier's text export (~10 s each): WordPiece, byte-level BPE, and ELMo's refusal.
TEXT_EXPORTS = ("bert", "roberta", "elmo")
# Every command includes export: a SavedModel, TensorFlow's and JAX's (torch refuses it in one
# line: tests/export/test_export.py).
EXPORTS = pytest.mark.runs_on("tensorflow", "jax", reason="every command includes SavedModel "
                              "export")


def _params():
    return [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in RECIPES]


def test_every_family_with_a_recipe_has_a_tiny_preset_here():
    assert set(RECIPES) <= set(PRESET_OF)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    write_corpus(root / "corpus.txt", documents=30)
    with open(root / "train.tsv", "w", encoding="utf-8") as handle:
        for i in range(8):
            handle.write(f"{TEXTS[i % 2]} {i}\t{'pos' if i % 2 else 'neg'}\n")
    return root


def run_command_checked(capsys, *args):
    """(exit code, stdout); a refusal must be exit 2 with exactly one keras-ctx line."""
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code in (0, 2), (code, captured.err)
    if code == 2:
        assert len(lines) == 1 and lines[0].startswith("keras-ctx"), captured.err
        with capsys.disabled():
            print("REFUSED", args[0], lines[0])
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def pretrained(workdir):
    """family -> its run, pretrained once (without the closing sense table, not read here)."""
    made = {}

    def get(family):
        if family not in made:
            preset = PRESET_OF[family]
            overrides = [a for item in TINY_PRESETS[preset] for a in ("--set", item)]
            out = workdir / f"run-{family}"
            with sense_table_off():
                code = main(["pretrain", preset, "--corpus", str(workdir / "corpus.txt"),
                             "--steps", "2", "--checkpoint-every", "2", "--vocabulary-size",
                             "200", "--sequence-length", "16", "--batch-size", "4",
                             *overrides, "--out", str(out)])
            assert code == 0
            made[family] = out
        return made[family]

    return get


@pytest.fixture(scope="module")
def finetuned(workdir):
    """tag -> (exit code, stdout, stderr, directory) of `finetune` on a run, run once per
    run: the command matrix and ELMo's pooling test read the same classifier."""
    made = {}

    def get(capsys, run, tag):
        if tag not in made:
            tuned = workdir / f"tuned-{tag}"
            made[tag] = (*run_command_checked(capsys, "finetune", run, "--train", workdir / "train.tsv",
                                  "--out", tuned, "--epochs", 1, "--batch-size", 4), tuned)
        return made[tag]

    return get


def check_commands(capsys, run, workdir, tag, finetuned):
    """Every run-directory command on `run`; returns {command: exit code}."""
    codes = {}
    codes["embed"], out, _ = run_command_checked(capsys, "embed", run, *TEXTS)
    if codes["embed"] == 0:
        assert "sequence_output: shape (2," in out, out
    codes["embed --word"], out, _ = run_command_checked(capsys, "embed", run, *TEXTS, "--word", "bank")
    if codes["embed --word"] == 0:
        assert "cosine(0, 1) = " in out
    codes["finetune"], out, _, tuned = finetuned(capsys, run, tag)
    if codes["finetune"] == 0:
        assert os.path.isfile(tuned / "classifier.keras")
        # It says what it does before each long phase (it was silent until the first epoch).
        phases = ["Loading the backbone and tokenizer of", "Tokenizing ", "Fine-tuning ",
                  "Saving the classifier to", "Saved the classifier"]
        assert -1 not in [out.find(p) for p in phases], out[-2000:]
        assert [out.find(p) for p in phases] == sorted(out.find(p) for p in phases)
    codes["export"], out, _ = run_command_checked(capsys, "export", run, workdir / f"export-{tag}")
    if codes["export"] == 0:
        assert os.path.isdir(workdir / f"export-{tag}" / "1")
    if codes["finetune"] == 0:
        # With a text signature where the family has one: the same export, and its ids
        # signature is the one the text signature is compared with.
        text_export = tag in TEXT_EXPORTS and _check_text_export(
            capsys, tuned, workdir / f"export-tuned-{tag}")
        codes["export tuned"] = 0 if text_export else run_command_checked(
            capsys, "export", tuned, workdir / f"export-tuned-{tag}")[0]
        if codes["export tuned"] == 0:
            assert os.path.isdir(workdir / f"export-tuned-{tag}" / "1")
        codes["embed tuned"], _, err = run_command_checked(capsys, "embed", tuned, *TEXTS)
        if codes["embed tuned"] == 2:  # names the run to give instead, and export
            assert "fine-tuned classifier" in err and str(run) in err, err
            assert "keras-ctx export" in err, err
    return codes


def _check_text_export(capsys, tuned, out):
    """A fine-tuned classifier exported with --with-text answers strings with the
    probabilities its id-level signature gives for the same text's ids (it was refused).
    Returns whether it exported (False: refused in one line, nothing written)."""
    import tensorflow as tf

    from keras_ctx.commands.export import _finetuned_preprocessor
    from keras_ctx import runs

    code, said, err = run_command_checked(capsys, "export", tuned, out, "--with-text")
    if code == 2:  # ELMo reads characters: no text signature, said in one line
        assert "has no TextPreprocessor" in err and len(err.strip().splitlines()) == 1, err
        assert not os.path.exists(out)
        return False
    assert code == 0 and "serve_text" in said, err
    served = tf.saved_model.load(str(out / "1"))
    texts = tf.constant(TEXTS)
    by_text = served.signatures["serve_text"](texts)["probabilities"].numpy()
    info, _ = runs.load_finetuned(str(tuned))
    ids = _finetuned_preprocessor(str(tuned), info, info["sequence_length"])(texts)
    by_ids = served.signatures["serving_default"](**{
        k: tf.cast(v, tf.int32) for k, v in ids.items()
        if k in served.signatures["serving_default"].structured_input_signature[1]})
    np.testing.assert_allclose(by_text, by_ids["probabilities"].numpy(), atol=1e-6)
    return True


@EXPORTS
@pytest.mark.parametrize("family", _params())
def test_every_command_on_a_pretrained_run(family, pretrained, finetuned, workdir, capsys):
    codes = check_commands(capsys, pretrained(family), workdir, family, finetuned)
    print(family, codes)
    # What every family must support: its vectors, a classifier, an export.
    assert codes["embed"] == codes["embed --word"] == codes["finetune"] == 0, codes
    assert codes["export"] == 0 and codes["export tuned"] == 0, codes
    assert codes["embed tuned"] == 2, codes  # refused: embed the run it came from


@pytest.mark.parametrize("family", sorted(FAST))
def test_a_pretrained_run_loads_as_its_family_and_its_words_take_their_context(family,
                                                                              pretrained):
    """tests/commands/test_recipes.py's checks of a recipe's run, on this module's runs of the
    families it pretrains by default (there, they run with -m slow; T5's: the next test):
    not pretrained twice."""
    from keras_ctx import runs
    from keras_ctx.commands.embed import word_vectors

    run = pretrained(family)
    info, _, tokenizer = runs.load_run(run)
    assert info["family"] == family
    assert (tokenizer is None) == (families.get(family).inputs == "characters")
    vectors = word_vectors(run, TEXTS, "bank")
    assert vectors.shape[0] == 2 and np.all(np.isfinite(vectors))
    assert not np.allclose(vectors[0], vectors[1])  # the context changes the vector


@pytest.mark.parametrize("family", ["t5", pytest.param("bart", marks=pytest.mark.slow)])
def test_encoder_decoder_word_vectors_are_the_encoders(family, pretrained):
    """A word's vector is the encoder state over its pieces (the decoder's are shifted);
    the run loads as its family, with its tokenizer (tests/commands/test_recipes.py's check)."""
    from keras_ctx import runs
    from keras_ctx.preprocessing import word_positions
    from keras_ctx.commands.embed import word_vectors
    from keras_ctx.preprocessing import text_inputs

    run = pretrained(family)
    info, backbone, tokenizer = runs.load_run(run)
    assert info["family"] == family and tokenizer is not None
    inputs, preprocessor = text_inputs(families.get(family), tokenizer, TEXTS, 16)
    encoder = keras.ops.convert_to_numpy(backbone({k: v for k, v in inputs.items() if k in backbone.input})
                         ["encoder_sequence_output"])
    expected = [encoder[i, word_positions(tokenizer, text, "bank",
                                          offset=len(preprocessor.start_ids))].mean(0)
                for i, text in enumerate(TEXTS)]
    np.testing.assert_allclose(word_vectors(run, TEXTS, "bank"), expected, atol=1e-5)


def test_elmo_classifier_pools_only_real_words(pretrained, finetuned, capsys):
    """ELMo's mean pooling masks padded words (all-zero character rows)."""
    from keras_ctx import runs
    from keras_ctx.preprocessing import character_inputs

    code, _, err, tuned = finetuned(capsys, pretrained("elmo"), "elmo")
    assert code == 0, err
    _, classifier = runs.load_finetuned(tuned)
    short = keras.ops.convert_to_numpy(classifier(character_inputs(["the bank"], 4)))
    padded = keras.ops.convert_to_numpy(classifier(character_inputs(["the bank"], 12)))
    np.testing.assert_allclose(short, padded, atol=1e-5)


@EXPORTS
def test_converted_huggingface_run_takes_every_command(pretrained, finetuned, workdir, capsys):
    """A Hugging Face BERT directory, converted, embeds like the run it came from."""
    from keras_ctx import runs
    from keras_ctx.convert import to_huggingface

    _, backbone, tokenizer = runs.load_run(pretrained("bert"))
    backbone.tokenizer = tokenizer
    to_huggingface(backbone, workdir / "hf-bert")
    converted = workdir / "converted-bert"
    assert run_command_checked(capsys, "convert", workdir / "hf-bert", converted)[0] == 0
    codes = check_commands(capsys, converted, workdir, "converted", finetuned)
    assert codes == {"embed": 0, "embed --word": 0, "finetune": 0, "export": 0,
                     "export tuned": 0, "embed tuned": 2}, codes
    from keras_ctx.commands.embed import word_vectors

    np.testing.assert_allclose(word_vectors(converted, TEXTS, "bank"),
                               word_vectors(pretrained("bert"), TEXTS, "bank"), atol=1e-4)

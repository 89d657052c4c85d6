"""`keras-ctx pretrain cove-base` runs CoVe's one stage, translation (issue 54): the MT-LSTM
encoder over fixed --glove vectors under an attentional decoder, on --parallel pairs
(keras_ctx/data/cove_recipe.py)."""

import collections
import sys

import keras
import numpy as np
import pytest

from keras_ctx import registry, runs
from keras_ctx.data import cove_recipe as recipe
from keras_ctx.models import presets
from tests.cli_helpers import cli_output, first_and_last_loss, one_line_error

WORDS = "red green blue cyan pink gold grey teal black white".split()
DIMENSION = 8
# A tiny MT-LSTM: 1 biLSTM layer of 16 a direction over the 8-dimensional --glove vectors.
TINY = ["--set", "hidden_size=16", "--set", "num_layers=1", "--vocabulary-size", "64",
        "--sequence-length", "8", "--batch-size", "16"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(pairs.tsv, glove.txt): "translation" reverses the words and spells them in another
    vocabulary; GloVe has 8 of the 10 words (grey and white read zeros)."""
    root = tmp_path_factory.mktemp("cove")
    rng = np.random.default_rng(0)
    pairs, glove = root / "pairs.tsv", root / "glove.txt"
    with open(pairs, "w", encoding="utf-8") as handle:
        for _ in range(200):
            words = list(rng.choice(WORDS, size=int(rng.integers(2, 6))))
            handle.write(" ".join(words) + "\t" + " ".join(f"{w}x" for w in reversed(words))
                         + "\n")
    vectors = {w: rng.normal(size=DIMENSION).round(4) for w in WORDS if w not in ("grey",
                                                                                 "white")}
    with open(glove, "w", encoding="utf-8") as handle:
        for word, vector in vectors.items():
            handle.write(word + " " + " ".join(map(str, vector)) + "\n")
        handle.write(". . . " + " ".join(["0.5"] * DIMENSION) + "\n")  # glove.840B has such
    return str(pairs), str(glove), vectors


def _cove_run(*pairs, glove=None):
    return registry.Run("cove-base", 2, 6, 64, inputs=(("parallel", pairs), ("glove", glove)))


# The released pipeline's words (salesforce/cove OpenNMT-py/README.md @9a0d90b:
# tokenizer.perl -no-escape -l $l, lowercase.perl), written out by tokenizer.perl's rules:
# English splits a contraction before its apostrophe ("don 't"), German around it
# ("ist ' s"); a word of letters and inner periods keeps its final one ("u.s.", "z.b.");
# a comma or period between digits stays ("1,000.5"); no -a: hyphens stay ("river-side").
# BERT's split (the recipe's before) gave "don ' t", "u . s .", "1 , 000 . 5", "river - side".
MOSES_LINES = [
    ("en", "Don't stop: the U.S. paid $1,000.5 (net).",
     ["don", "'t", "stop", ":", "the", "u.s.", "paid", "$", "1,000.5", "(", "net", ")", "."]),
    ("en", "The bank's river-side, (a) café.",
     ["the", "bank", "'s", "river-side", ",", "(", "a", ")", "café", "."]),
    ("de", "Das ist's, z.B. im Jahr 2017 - river-side!",
     ["das", "ist", "'", "s", ",", "z.b.", "im", "jahr", "2017", "-", "river-side", "!"]),
]


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_words_are_the_released_pipelines_moses_words_lower_cased():
    sacremoses = pytest.importorskip("sacremoses")
    for language, line, words in MOSES_LINES:
        counts = recipe.word_counts([line], language)
        assert counts == collections.Counter(words), line
        # sacremoses' tokenizer.perl, as the README runs it (no -a), then lower cased.
        moses = sacremoses.MosesTokenizer(lang=language).tokenize(line, escape=False)
        assert [w.lower() for w in moses] == words
        # Every counted word is one id of a tokenizer over them, none <unk> (id 1).
        tokenizer = recipe.word_tokenizer(recipe.most_frequent(counts, 64,
                                                               recipe.SOURCE_SPECIALS),
                                          language=language)
        ids = np.asarray(tokenizer(line)).tolist()
        assert [tokenizer.id_to_token(i) for i in ids] == words
    # The run's tokenizer learns from "LANGUAGE<TAB>sentence" lines (`tokenizer_text`).
    tokenizer = recipe.train_word_tokenizer([f"de\t{MOSES_LINES[2][1]}"], 64)
    assert tokenizer.language == "de" and "z.b." in tokenizer.get_vocabulary()
    saved = type(tokenizer).from_config(tokenizer.get_config())
    assert saved.language == "de"


@pytest.mark.backend_neutral("argument checks before any model is built")
def test_a_run_without_sacremoses_is_refused_in_one_line(files, monkeypatch):
    from keras_ctx.data import cove_words

    pairs, glove, _ = files
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # import sacremoses fails
    cove_words._tokenizer.cache_clear()
    try:
        with pytest.raises(ImportError, match="CoVe's recipe splits words with Moses' rules, "
                                              "which needs sacremoses: pip install"):
            recipe.check_inputs(recipe.corpora.BUILTIN, (), [f"en-de={pairs}"], glove)
    finally:
        cove_words._tokenizer.cache_clear()


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_the_batches_are_teacher_forcing_rows_of_the_pairs(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b c\tz y\n\nb a\tz z y x\nc c c c c c c\tz\n", encoding="utf-8")
    run = _cove_run(("en", "de", str(pairs)))
    # The tokenizer learns from the source side (counted as test_words_... shows).
    assert list(recipe.tokenizer_text(run)) == ["en\ta b c", "en\tb a", "en\tc c c c c c c"]
    tokenizer = recipe.word_tokenizer(["c", "a", "b"])
    # de: z 4, y 2, x 1 times (after <pad> <s> </s> <unk>).
    assert recipe.target_vocabulary(run) == ["<pad>", "<s>", "</s>", "<unk>", "z", "y", "x"]
    batch = next(recipe.cove_dataset(None, tokenizer, run).as_numpy_iterator())
    inputs, labels = batch
    rows = {tuple(row): i for i, row in enumerate(inputs["encoder_token_ids"])}
    # The third pair's source has 7 words, over a side of 6: dropped (preprocess.py).
    assert set(rows) == {(3, 4, 2, 0, 0, 0), (4, 3, 0, 0, 0, 0)}
    first, second = rows[(3, 4, 2, 0, 0, 0)], rows[(4, 3, 0, 0, 0, 0)]
    # The decoder's rows are one longer than a side (<s> y, y </s>: preprocess.py keeps a
    # target of -seq_length words).
    np.testing.assert_array_equal(inputs["decoder_token_ids"][first], [1, 4, 5, 0, 0, 0, 0])
    np.testing.assert_array_equal(labels[first], [4, 5, 2, 0, 0, 0, 0])  # y </s>
    np.testing.assert_array_equal(inputs["decoder_token_ids"][second], [1, 4, 4, 5, 6, 0, 0])
    np.testing.assert_array_equal(labels[second], [4, 4, 5, 6, 2, 0, 0])
    np.testing.assert_array_equal(inputs["encoder_padding_mask"][second], [1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(inputs["decoder_padding_mask"][second],
                                  [1, 1, 1, 1, 1, 0, 0])


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_a_resumed_run_keeps_its_target_vocabulary_when_the_pairs_change(tmp_path):
    from keras_ctx.data import token_counts

    pairs, out = tmp_path / "pairs.tsv", tmp_path / "run"
    pairs.write_text("a\tz z y\nb\tz x\n", encoding="utf-8")
    tokenizer = recipe.word_tokenizer(["a", "b"])

    def vocabulary(resume):
        run = registry.Run("cove-base", 2, 6, 64, inputs=(("parallel", (("en", "de", str(
            pairs)),)),))
        with token_counts.kept_in(out, None, resume):  # as `pretrain` claims its run
            return recipe.target_vocabulary(run, tokenizer)

    started = vocabulary(True)  # a new run: counted, kept in the run once claimed
    assert started == ["<pad>", "<s>", "</s>", "<unk>", "z", "y", "x"]
    assert (out / recipe.TARGET_FILE).is_file()
    tokenizer("a b")  # the saved tokenizer was called (built) first: the same fingerprint
    # The file changed (--corpus-changed continue): x is the most frequent now, w is new.
    pairs.write_text("a\tx x x y\nb\tw w x\nb\ty\n", encoding="utf-8")
    assert vocabulary(True) == started  # the resumed run's ids are its checkpoints'
    # A run started over counts the new file.
    assert vocabulary(False) == ["<pad>", "<s>", "</s>", "<unk>", "x", "y", "w"]


def test_the_encoder_reads_the_glove_vectors_fixed(files):
    pairs, glove, vectors = files
    family = registry.get("cove")
    run = _cove_run(("en", "de", pairs), glove=glove)
    tokenizer = recipe.word_tokenizer(WORDS)
    # The released -dropout 0.2 in the encoder too (OpenNMT-py's Encoder, onmt/Models.py).
    assert family.recipe_config(run) == {"embedding_size": DIMENSION, "dropout": 0.2}
    backbone = presets.build("cove-base", vocabulary_size=tokenizer.vocabulary_size(),
                             **family.recipe_config(run), hidden_size=4, num_layers=1)
    model = family.pretrainer(backbone, tokenizer, run)
    table = keras.ops.convert_to_numpy(backbone.token_embedding.embeddings)
    for i, word in enumerate(tokenizer.get_vocabulary()):
        expected = vectors.get(word, np.zeros(DIMENSION))  # zeros: <pad>, <unk>, grey, white
        np.testing.assert_allclose(table[i], expected, rtol=1e-6, err_msg=word)
    assert not backbone.token_embedding.trainable
    # The released run's decoder: as wide as the encoder's output, as deep, dropout 0.2.
    assert (model.decoder_units, model.num_decoder_layers, model.dropout,
            model.target_dropout) == (8, 1, 0.2, 0.2)
    assert model.target_vocabulary_size == len(recipe.target_vocabulary(run)) == 14


def test_the_encoders_dropout_acts_in_training_only():
    from keras_ctx.models import CoveBackbone

    sizes = dict(vocabulary_size=10, embedding_size=4, hidden_size=3, num_layers=2,
                 lstm_implementation="loop")
    plain, dropped = CoveBackbone(**sizes), CoveBackbone(**sizes, dropout=0.5)
    assert len(plain.weights) == len(dropped.weights)  # no weights of its own
    dropped.set_weights(plain.get_weights())
    inputs = {"token_ids": np.array([[1, 2, 3, 0]], "int32"),
              "padding_mask": np.array([[1, 1, 1, 0]], "int32")}
    same = [keras.ops.convert_to_numpy(m(inputs)["sequence_output"]) for m in (plain, dropped)]
    np.testing.assert_allclose(same[0], same[1], rtol=1e-6)
    trained = keras.ops.convert_to_numpy(dropped(inputs, training=True)["sequence_output"])
    # the last layer's output dropped: about half zero, the rest scaled by 1 / (1 - 0.5)
    assert 0 < np.mean(trained[0, :3] == 0) < 1
    assert CoveBackbone.from_config(dropped.get_config()).dropout == 0.5


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_the_glove_file_is_read_for_the_vocabulary_words_only(tmp_path):
    from keras_ctx.data import glove

    path = tmp_path / "g.txt"
    path.write_text("the 1 2\nbank 3 4\nriver 5 6\n", encoding="utf-8")
    words, vectors = glove.read_glove(str(path), keep={"river", "the", "zzz"})
    assert words == ["the", "river"]
    np.testing.assert_array_equal(vectors, [[1, 2], [5, 6]])
    words, vectors = glove.read_glove(str(path), keep={"zzz"})  # none of them: no rows
    assert words == [] and vectors.shape == (0, 2)
    matrix, found = glove.glove_matrix(str(path), ["<pad>", "zzz"])
    assert found == 0 and matrix.shape == (2, 2) and not matrix.any()


@pytest.mark.backend_neutral("the preset's recorded settings")
def test_the_recipe_names_its_stage_and_the_released_settings():
    line = presets.describe_stages("cove-base", 300)
    assert line.startswith("cove-base pretrains in 1 stage: 1. translation") and (
        "McCann et al. 2017, Sec. 3" in line)
    settings = presets.pretraining("cove-base")
    # salesforce/cove OpenNMT-py train.py defaults @9a0d90b; -seq_length 75: its README's
    # WMT'17 command (the released MT-LSTM).
    assert (settings.learning_rate, settings.batch_size, settings.sequence_length) == (
        1.0, 64, 75)
    from keras_ctx.commands.pretrain import optimizer

    sgd = optimizer(None, 100, registry.get("cove"), 300)
    assert type(sgd).__name__ == "SGD" and sgd.global_clipnorm == 5.0
    assert float(sgd.learning_rate) == 1.0


@pytest.mark.backend_neutral("argument checks before any model is built")
@pytest.mark.parametrize("arguments, says", [
    ([], "CoVe trains on a parallel corpus: give --parallel"),
    (["--parallel", "en-de={pairs}"], "give --glove FILE"),
    (["--parallel", "en-de={pairs}", "--glove", "{missing}"], "is not a file: give the source"),
    (["--parallel", "en-de={missing}", "--glove", "{glove}"], "is not a file."),
    (["--parallel", "en=x", "--glove", "{glove}"], "--parallel takes SOURCE-TARGET=FILE"),
    (["--parallel", "en-en={pairs}", "--glove", "{glove}"], "a pair needs two languages"),
    (["--parallel", "EN-de={pairs}", "--glove", "{glove}"], "'EN' is not a language code"),
    (["--parallel", "en-de={pairs}", "--parallel", "en-fr={pairs}", "--glove", "{glove}"],
     "give one --parallel pair, got 2"),
    (["--parallel", "en-de={pairs}", "--glove", "{glove}", "--languages", "en,de"],
     "drop --languages"),
    (["--parallel", "en-de={pairs}", "--glove", "{pairs}"], "is not a GloVe text file"),
])
def test_bad_inputs_are_refused_in_one_line(arguments, says, files, tmp_path):
    pairs, glove, _ = files
    names = dict(pairs=pairs, glove=glove, missing=str(tmp_path / "missing.txt"))
    code, output = cli_output(["pretrain", "cove-base", "--out", str(tmp_path / "run"),
                               *[a.format(**names) for a in arguments]])
    assert code == 2 and says in one_line_error(output), output[-500:]
    assert not (tmp_path / "run").exists()


@pytest.mark.backend_neutral("argument checks before any model is built")
def test_a_malformed_line_a_corpus_glove_elsewhere_and_prepare_are_refused(files, tmp_path):
    pairs, glove, _ = files
    bad = tmp_path / "bad.tsv"
    bad.write_text("red green\tredx greenx\nblue only\n", encoding="utf-8")
    out = ["--out", str(tmp_path / "run")]
    code, output = cli_output(["pretrain", "cove-base", "--parallel", f"en-de={bad}",
                               "--glove", glove, *out])
    assert code == 2 and f"{bad}:2: a parallel line" in one_line_error(output)
    code, output = cli_output(["pretrain", "cove-base", "--parallel", f"en-de={pairs}",
                               "--glove", glove, "--corpus", pairs, *out])
    assert code == 2 and "not a --corpus: drop --corpus" in one_line_error(output)
    code, output = cli_output(["pretrain", "bert-tiny", "--glove", glove, *out])
    assert code == 2 and "the bert recipe reads none: drop it" in one_line_error(output)
    code, output = cli_output(["prepare", "cove-base", "--corpus", pairs, *out])
    assert code == 2 and ("CoVe trains on a parallel corpus: give --parallel SRC-TGT=PAIRS.tsv "
                          "--glove FILE" in one_line_error(output))  # as pretrain's


@pytest.mark.slow  # ~40 s: the CLI run, its resume and `embed` (the default form: the tests above)
def test_a_tiny_cove_run_learns_saves_its_encoder_and_resumes(files, tmp_path):
    original, glove, _ = files
    pairs = tmp_path / "pairs.tsv"  # a copy: it changes below
    pairs.write_text(open(original, encoding="utf-8").read(), encoding="utf-8")
    out = str(tmp_path / "run")
    arguments = ["pretrain", "cove-base", "--parallel", f"en-de={pairs}", "--glove", glove,
                 "--out", out, "--learning-rate", "0.5", "--checkpoint-every", "15", *TINY]
    code, output = cli_output([*arguments, "--steps", "30"])
    assert code == 0, output[-2000:]
    assert "cove-base pretrains in 1 stage: 1. translation" in output
    assert "CoVe stage translation en->de" in output and "200 of 200 pairs" in output
    first, last = first_and_last_loss(output)
    assert last < 0.9 * first, (first, last)  # measured: about 16% lower after 30 steps
    info, backbone, tokenizer = runs.load_run(out)
    assert info["family"] == "cove" and type(backbone).__name__ == "CoveBackbone"
    assert tokenizer.get_vocabulary()[:2] == ["<pad>", "<unk>"]
    from keras_ctx.commands.embed import word_vectors

    vectors = word_vectors(out, ["red green blue", "blue gold red"], "red")
    assert vectors.shape == (2, 32) and not np.allclose(vectors[0], vectors[1])
    # The pair file changes (new target words) and the run resumes on it: the output layer
    # keeps its size and words (the checkpoint restores), read from the run directory.
    with open(pairs, "a", encoding="utf-8") as handle:
        handle.write("red blue\tnewa newb newc\n")
    code, output = cli_output([*arguments, "--steps", "40", "--corpus-changed", "continue"])
    assert code == 0 and "Resuming from step 30" in output, output[-2000:]
    assert "Reusing the tokenizer this run was started with" in output
    assert "Reusing the target vocabulary this run was started with" in output

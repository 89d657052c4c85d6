"""`keras-ctx pretrain ernie-1.0-base --entities FILE --phrases FILE` (issue 54): ERNIE 1.0's
entity stage (Sun et al. 2019, Sec. 3.2.3) and a phrase lexicon from the command line."""

import numpy as np
import pytest

from keras_ctx import runs
from keras_ctx.commands import pretrain as pretrain_command
from keras_ctx.commands.pretrain_checks import resolve_text
from keras_ctx.common.errors import RunDirectoryError
from keras_ctx.data import corpora, pipelines
from keras_ctx.models import presets
from tests.cli_helpers import cli_output, one_line_error

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# The entities' words also stand alone, so no entity is a collocation of the corpus
# (word2phrase's score stays far below 100) and only the entity stage masks them whole.
COMMON = "the a on in at and of to boat water money loan park dog cat sat ran old".split()
ENTITY_WORDS = "river bank gold coast mill road".split()
VOCABULARY = SPECIALS + COMMON + ENTITY_WORDS + ["."]
ENTITY_LINES = ["river bank", "Gold Coast", "mill road"]  # the run's tokenizer lower-cases
# By hand: each line's WordPiece ids in VOCABULARY (every word is one piece).
ENTITY_IDS = [(VOCABULARY.index("river"), VOCABULARY.index("bank")),
              (VOCABULARY.index("gold"), VOCABULARY.index("coast")),
              (VOCABULARY.index("mill"), VOCABULARY.index("road"))]
FLAGS = ["--sequence-length", "32", "--batch-size", "8"]


@pytest.fixture(scope="module")
def lexicon_corpus(tmp_path_factory):
    """(corpus.txt, entities.txt, a tokenizer of the corpus' words): 40 documents of 4
    sentences, every other sentence holding an entity."""
    root = tmp_path_factory.mktemp("ernie")
    rng = np.random.default_rng(0)
    corpus, entities = root / "corpus.txt", root / "entities.txt"
    with open(corpus, "w", encoding="utf-8") as handle:
        for _ in range(40):
            for sentence in range(4):
                words = list(rng.choice(COMMON + ENTITY_WORDS, size=int(rng.integers(5, 9))))
                if sentence % 2 == 0:
                    words.insert(int(rng.integers(0, len(words))),
                                 ENTITY_LINES[int(rng.integers(0, 3))].lower())
                handle.write(" ".join(words) + " .\n")
            handle.write("\n")
    entities.write_text("\n".join(ENTITY_LINES) + "\n", encoding="utf-8")
    import keras_hub

    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCABULARY, lowercase=True)
    return str(corpus), str(entities), tokenizer


def _ernie_request(monkeypatch, tmp_path, *flags):
    """The `PretrainRequest` `keras-ctx pretrain ernie-1.0-base FLAGS` trains (caught before
    training), with each ERNIE stage 1 step long: basic at step 0, phrase at 1, entity from 2."""
    caught = []
    monkeypatch.setattr(pretrain_command, "train", caught.append)
    monkeypatch.setattr(pipelines, "ERNIE_STAGE_STEPS", 1)
    code, output = cli_output(["pretrain", "ernie-1.0-base", "--out", str(tmp_path / "run"),
                               *FLAGS, *map(str, flags)])
    assert code == 0, output
    return caught[0]


def _unmasked(batch):
    """The batch's token ids before masking (the masked positions' true ids put back)."""
    ids = np.array(batch["token_ids"])
    for row, (positions, true, weights) in enumerate(zip(
            np.asarray(batch["mask_positions"]), np.asarray(batch["mask_ids"]),
            np.asarray(batch["mask_weights"]))):
        ids[row, positions[weights > 0]] = true[weights > 0]
    return ids


def _entity_masks(batches):
    """(occurrences masked whole, partly, not at all) of the entities in `batches`."""
    whole = partly = none = 0
    for batch in batches:
        ids = _unmasked(batch)
        for row, (positions, weights) in enumerate(zip(np.asarray(batch["mask_positions"]),
                                                       np.asarray(batch["mask_weights"]))):
            masked = set(positions[weights > 0].tolist())
            for start in range(ids.shape[1] - 1):
                if tuple(ids[row, start:start + 2]) in ENTITY_IDS:
                    hit = len(masked & {start, start + 1})
                    whole, partly, none = whole + (hit == 2), partly + (hit == 1), none + (
                        hit == 0)
    return whole, partly, none


def _recipe_batches(request, tokenizer, first, count):
    dataset = request.family.dataset(corpora.documents(request.corpus), tokenizer, request.run)
    return list(dataset.skip(first).take(count).as_numpy_iterator())


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_entities_flag_runs_the_entity_stage_masking_each_occurrence_whole(
        monkeypatch, tmp_path, lexicon_corpus):
    corpus, entities, tokenizer = lexicon_corpus
    request = _ernie_request(monkeypatch, tmp_path, "--corpus", corpus, "--entities", entities)
    assert dict(request.run.inputs)["entities"] == entities
    from keras_ctx.data.knowledge_masking import Lexicon, read_lexicon

    lexicon = Lexicon.from_texts(tokenizer, read_lexicon(entities))
    assert sorted(tuple(map(int, key.split(","))) for key in lexicon.entries[2]) == ENTITY_IDS
    whole, partly, none = _entity_masks(_recipe_batches(request, tokenizer, 2, 30))
    # Every occurrence all or nothing; ERNIE's 15% per unit of ~250 occurrences masks some.
    assert partly == 0 and whole > 10 and none > whole, (whole, partly, none)
    line = presets.describe_stages("ernie-1.0-base", 30_000, given={"entities"})
    assert "3. entity-level masking from step 20000" in line and "not run" not in line


@pytest.mark.backend_neutral("tf.data and the tokenizers, TensorFlow's on every backend")
def test_without_entities_no_entity_level_masking(monkeypatch, tmp_path, lexicon_corpus):
    corpus, _, tokenizer = lexicon_corpus
    request = _ernie_request(monkeypatch, tmp_path, "--corpus", corpus)
    assert not dict(request.run.inputs).get("entities")
    whole, partly, none = _entity_masks(_recipe_batches(request, tokenizer, 2, 30))
    assert partly > 0, (whole, partly, none)  # words masked one by one: entities split
    line = presets.describe_stages("ernie-1.0-base", 30_000, given=set())
    assert "3. entity-level masking from step 20000" in line
    assert "[not run: it needs --entities FILE" in line


@pytest.mark.backend_neutral("the requests' checks and a lexicon's words")
def test_lexicon_flags_refused_or_warned_in_one_line(monkeypatch, tmp_path, lexicon_corpus):
    corpus, entities, tokenizer = lexicon_corpus
    empty, latin, absent = tmp_path / "empty.txt", tmp_path / "latin.txt", tmp_path / "no.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    latin.write_bytes("Café\n".encode("latin-1"))
    absent.write_text("harbour light\n", encoding="utf-8")
    out = str(tmp_path / "run")
    for argv, expected in (
            (["ernie-1.0-base", "--entities", str(empty)], "holds no entry"),
            (["ernie-1.0-base", "--phrases", str(latin)], "is not UTF-8"),
            (["ernie-1.0-base", "--entities", str(tmp_path / "missing.txt")], "no such file"),
            (["bert-tiny", "--entities", entities], "the bert recipe reads no lexicon"),
            (["bert-tiny", "--phrases", entities], "--phrases is read by a recipe with")):
        code, output = cli_output(["pretrain", *argv, "--corpus", corpus, "--out", out])
        assert code != 0 and expected in one_line_error(output), output
    # A lexicon none of whose entries occurs in the corpus: the run is warned, not refused.
    request = _ernie_request(monkeypatch, tmp_path, "--corpus", corpus,
                             "--entities", absent)
    with pytest.warns(UserWarning, match=r"No entry of the entities lexicon \(1 entries\) occurs"):
        request.family.dataset(corpora.documents(corpus), tokenizer, request.run)


@pytest.mark.backend_neutral("the run directory's settings and fingerprints")
def test_rerun_without_the_lexicon_or_with_another_is_refused(monkeypatch, tmp_path,
                                                              lexicon_corpus):
    corpus, entities, _ = lexicon_corpus
    first = _ernie_request(monkeypatch, tmp_path, "--corpus", corpus, "--entities", entities)
    out = first.out
    runs.claim(out, first.settings(), data=resolve_text(first, runs.look(out)).fingerprint)
    other = tmp_path / "other.txt"
    other.write_text("river bank\n", encoding="utf-8")
    for flags, says in (((), "leaves --entities out"),
                        (("--entities", other), f"gives --entities {other}")):
        rerun = _ernie_request(monkeypatch, tmp_path, "--corpus", corpus, *flags)
        with pytest.raises(RunDirectoryError, match="different entities"):
            runs.claim(out, rerun.settings(), existing=runs.look(out))
        # Named before the corpus check (the file is part of the corpus' fingerprint).
        with pytest.raises(RunDirectoryError, match=f"trained with --entities {entities} "
                                                    f"and this rerun {says}"):
            resolve_text(rerun, runs.look(out))
    # The file's content is the run's text: another content is another fingerprint.
    before = resolve_text(first, runs.look(out)).fingerprint
    with open(entities, "a", encoding="utf-8") as handle:
        handle.write("old park\n")
    try:
        assert resolve_text(first, runs.Existing(None, 0)).fingerprint != before
    finally:
        with open(entities, "w", encoding="utf-8") as handle:
            handle.write("\n".join(ENTITY_LINES) + "\n")

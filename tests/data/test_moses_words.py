"""Moses words at corpus scale (keras_ctx/data/moses_words.py): the words XLM's and CoVe's
recipes learn their vocabularies on are transformers' XLMTokenizer's Moses steps (stock
sacremoses) word for word, in this process and in a pool of worker processes, on lines
where each language's rules differ (French elision, German numbers and ordinals, Romanian
cedillas, abbreviations ending in "."), characters of category C* and accents."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from keras_ctx.data import cove_words, moses_words, tokenizers, xlm_text

pytest.importorskip("sacremoses")
pytestmark = pytest.mark.backend_neutral("Moses words: Python, sacremoses and Hugging Face's "
                                         "BPE trainer, no Keras backend")

LINES = [
    "Mr. Smith went to Washington. He arrived at 5 p.m. on Jan. 3 with Dr. Jones.",
    "The U.S.A. and the U.K. signed it, e.g. in 1999... or so (approx. 20 units).",
    "“Didn't” Café… it's 3.5% of $1,000,000! No. 5 and Nos. 6-7 were sold.",
    "See www.example.com/a?b=c or write to me@example.org; well-known -- isn't it?",
    "Tabs\there, a zero\u200bwidth space, a soft\u00adhyphen and a bell\u0007.",
    "L'homme est là aujourd'hui, n'est-ce pas ? Qu'il vienne jusqu'à 20 h.",
    "M. Dupont l'a dit : « Bonjour ! » C'est l'économie, à 5 % ; voir p. 12.",
    "Am 3. Oktober kam z.B. Nr. 5 mit 1.000,5 Euro. Das ist's, sagte Hr. Müller.",
    "Die Straße ist 2,5 km lang – etwa 1.200 m. Am 24. Dez. 2019 war's kalt.",
    "Dl. Popescu n-a venit în 2019. Şi ţara a plătit 1.000,5 lei, Dl. Ion.",
    "Ștefan și Țuțea: întâi în București, ÎNTÂI ÎN ȚARĂ.",
    "ÉCOLE NORMALE SUPÉRIEURE, Ångström, naïve coöperation, Œuvre, façade.",
]
LANGUAGES = ("en", "fr", "de", "ro")
# Each line by each language's rules, alone and as a paragraph with the next: 96 rows.
ROWS = [(language, text) for language in LANGUAGES
        for i, line in enumerate(LINES) for text in (line, f"{line} {LINES[i - 1]}")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """transformers' XLMTokenizer (its Moses steps read the words; its BPE is not used)."""
    from transformers import XLMTokenizer

    directory = tmp_path_factory.mktemp("xlm")
    (directory / "vocab.json").write_text(json.dumps({"<unk>": 0}), encoding="utf-8")
    (directory / "merges.txt").write_text("", encoding="utf-8")
    return XLMTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"))


def _xlm_reference(reference, text, language, lowercase):
    """XLMTokenizer._tokenize's steps before its BPE."""
    from transformers.models.xlm import tokenization_xlm

    text = reference.moses_pipeline(text, lang=language)
    if language == "ro":
        text = tokenization_xlm.romanian_preprocessing(text)
    words = reference.moses_tokenize(text, lang=language)
    if lowercase:
        words = tokenization_xlm.lowercase_and_remove_accent(words)
    return [word for word in words if word]


def _cove_reference(reference, text, language):
    """Stock sacremoses' tokenizer.perl -no-escape (no -a), lower cased, split."""
    reference.moses_tokenize("", lang=language)  # its stock MosesTokenizer, cached
    words = reference.cache_moses_tokenizer[language].tokenize(
        text, escape=False, aggressive_dash_splits=False, return_str=False)
    return " ".join(words).lower().split()


def _transformers_words(reference, rule, rows):
    if rule == "cove-lowercased":
        return [_cove_reference(reference, text, language) for language, text in rows]
    return [_xlm_reference(reference, text, language, rule == "xlm-uncased") for language, text in rows]


@pytest.fixture
def small_pool(monkeypatch):
    """A pool from 40 rows on, 8 rows a chunk (several chunks per worker); the list of
    the worker processes started."""
    monkeypatch.setattr(moses_words, "POOL_MIN_LINES", 40)
    monkeypatch.setattr(moses_words, "CHUNK_LINES", 8)
    started, popen = [], subprocess.Popen

    def counted(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(moses_words.subprocess, "Popen", counted)
    return started


@pytest.mark.parametrize("rule", moses_words.RULES)
def test_one_process_reads_transformers_words(reference, rule):
    words = list(moses_words.split(rule, ROWS, workers=1))
    assert words == _transformers_words(reference, rule, ROWS)


@pytest.mark.parametrize("rule", moses_words.RULES)
def test_two_worker_processes_read_the_same_words_in_order(reference, small_pool, rule):
    words = list(moses_words.split(rule, ROWS, workers=2))
    assert [p.returncode for p in small_pool] == [0, 0]  # two workers, closed when done
    assert words == _transformers_words(reference, rule, ROWS)


def test_the_recipes_words_are_the_line_by_line_words(small_pool):
    # XLM's learning sample ("LANGUAGE<TAB>text", cased too) and CoVe's counts, each by the
    # pool, against each recipe's own one-line function.
    for lowercase in (True, False):
        pooled = list(xlm_text.tagged_words([f"{lang}\t{text}" for lang, text in ROWS],
                                            lowercase, workers=2))
        assert pooled == [xlm_text.moses_words(text, lang, lowercase) for lang, text in ROWS]
    german = [text for lang, text in ROWS if lang == "de"] * 2
    assert list(cove_words.words_of(german, "de", workers=2)) == [
        cove_words.moses_words(text, "de") for text in german]
    assert len(small_pool) == 6


def test_a_small_sample_stays_in_this_process(small_pool):
    rows = ROWS[:39]
    assert list(moses_words.split("xlm-uncased", rows, workers=2)) == [
        xlm_text.moses_words(text, lang) for lang, text in rows]
    assert list(moses_words.split("xlm-uncased", ROWS, workers=1)) == [
        xlm_text.moses_words(text, lang) for lang, text in ROWS]
    assert small_pool == []


def test_the_bpe_learnt_in_two_processes_is_the_one_learnt_in_one(small_pool):
    data = [text for _, text in ROWS] * 2
    one = tokenizers.train_xlm_bpe(data, 300, workers=1)
    assert small_pool == []
    two = tokenizers.train_xlm_bpe(data, 300, workers=2)
    assert len(small_pool) == 2
    assert (two.vocabulary, two.merges) == (one.vocabulary, one.merges)
    assert len(one.merges) > 50


def test_a_worker_error_is_raised_in_one_line(small_pool):
    rows = ROWS[:50] + [("zh", "一个句子")]
    with pytest.raises(RuntimeError, match=r"^Splitting Moses words in a worker process "
                                           r"failed: ValueError: XLM splits 'zh' text"):
        list(moses_words.split("xlm-uncased", rows, workers=2))
    assert all(p.returncode == 0 for p in small_pool)


def test_a_caller_that_stops_early_ends_its_workers(small_pool):
    words = moses_words.split("cove-lowercased", ROWS, workers=2)
    assert next(words) == cove_words.moses_words(ROWS[0][1], ROWS[0][0])
    words.close()  # as when the reader fails, or is dropped
    assert [p.returncode for p in small_pool] == [0, 0]


@pytest.mark.slow  # ~12 s of CPU: the built-in corpus by two rules, in one process and two
def test_the_builtin_corpus_splits_the_same_in_two_processes():
    from keras_ctx.data import corpora

    sentences = [s for document in corpora.builtin_documents() for s in document]
    rows = [(LANGUAGES[i % 4], s) for i, s in enumerate(sentences * 2)]
    assert len(rows) > moses_words.POOL_MIN_LINES  # the default pool and chunks
    for rule in ("xlm-uncased", "cove-lowercased"):
        assert list(moses_words.split(rule, rows, workers=2)) == list(
            moses_words.split(rule, rows, workers=1)), rule


def test_a_worker_that_dies_is_named(small_pool, monkeypatch):
    monkeypatch.setattr(moses_words, "_BOOT", "import sys; sys.exit(3)")
    with pytest.raises(RuntimeError, match=r"^A Moses word splitting process ended \(exit "
                                           r"code 3\); .* workers=1"):
        list(moses_words.split("cove-lowercased", ROWS, workers=2))


def test_workers_end_when_their_caller_is_killed(tmp_path):
    # A caller killed mid-sample (kill -9): its workers read the end of their input and
    # exit (no orphans waiting forever, as a multiprocessing pool's would).
    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import importlib.util, itertools, os, signal, subprocess
        spec = importlib.util.spec_from_file_location("m", {moses_words.__file__!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        m.POOL_MIN_LINES, m.CHUNK_LINES, popen = 10, 5, subprocess.Popen
        def started(*args, **kwargs):
            process = popen(*args, **kwargs)
            with open({str(pids)!r}, "a") as handle:
                handle.write(f"{{process.pid}}\\n")
            return process
        m.subprocess.Popen = started
        for i, _ in enumerate(m.split("cove-lowercased", itertools.repeat(("en", "a b c")), workers=2)):
            if i == 100:
                os.kill(os.getpid(), signal.SIGKILL)
        """)
    caller = subprocess.run([sys.executable, "-c", script], check=False)
    assert caller.returncode == -signal.SIGKILL
    workers = [int(pid) for pid in pids.read_text().split()]
    assert len(workers) == 2
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)


def _alive(pid):
    """Whether `pid` runs (a zombie, whose parent was killed, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_imports_neither_keras_nor_tensorflow():
    # What makes a worker cheap (docs/notes/data-at-scale.md): this file alone, no package.
    probe = moses_words._BOOT.replace("module.serve()", "print(sorted(set(sys.modules) & "
                                      "{'keras', 'tensorflow', 'keras_ctx'}), module.RULES)")
    out = subprocess.run([sys.executable, "-c", probe, moses_words.__file__], check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == f"[] {moses_words.RULES}"

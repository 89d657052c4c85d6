"""Moses words at corpus scale: XLM's and CoVe's rules (sacremoses) in this process or
in one worker process per core, in order.

The rules: "xlm-uncased" and "xlm-cased" (`xlm_words`: XLM's tools/tokenize.sh, read in
`keras_ctx.data.xlm_text`), "cove-lowercased" (`cove_words`: CoVe's README, read in
`keras_ctx.data.cove_words`); those modules check that sacremoses is installed and
name what installs it. `split` reads (language, text) rows in chunks of CHUNK_LINES,
each chunk in a worker, the words back in the rows' order; a sample of fewer than
POOL_MIN_LINES rows, or workers=1, stays in this process.

This module imports only the standard library (and sacremoses where it splits): a worker
is a fresh interpreter (`subprocess`: no fork of a process running TensorFlow, as
`keras-ctx prepare`'s spawned workers) that loads this one file by its path, not the
keras_ctx package, whose import starts Keras and TensorFlow (4.5 s of CPU and 730 MB a
process, measured). A worker ends when its input pipe closes: when the caller is done,
fails or dies. docs/notes/data-at-scale.md has the measured speeds.
"""

import collections
import contextlib
import functools
import itertools
import os
import pickle
import re
import subprocess
import sys
import unicodedata

# XLM segments these with tools of their own, not Moses (tokenization_xlm.py: Jieba / the
# Stanford segmenter, KyTea, PyThaiNLP).
SEGMENTED_LANGUAGES = ("zh", "ja", "th")
CHUNK_LINES = 512  # rows a worker splits per message (~0.1-1 s of its work)
# A worker's start (an interpreter, sacremoses, its tables) costs ~0.5 s of CPU, the
# work of ~3,000 lines: below this many rows one process is as fast (keras_ctx's choice).
POOL_MIN_LINES = 20_000


def remove_non_printing_char(text):
    """remove-non-printing-char.perl: every character of a category C* dropped (Python's
    Unicode tables, as transformers' port)."""
    if text.isprintable():  # no character of a category C* (the usual line): nothing to drop
        return text
    return "".join(c for c in text if not unicodedata.category(c).startswith("C"))


def romanian(text):
    """transformers' romanian_preprocessing (Sennrich's WMT16 scripts; xlm-mlm-enro-1024):
    cedilla to comma forms, then s, t, a, i without their marks."""
    for source, target in (("\u015e", "\u0218"), ("\u015f", "\u0219"), ("\u0162", "\u021a"),
                           ("\u0163", "\u021b"), ("\u0218", "S"), ("\u0219", "s"),
                           ("\u021a", "T"), ("\u021b", "t"), ("\u0102", "A"), ("\u0103", "a"),
                           ("\u00c2", "A"), ("\u00e2", "a"), ("\u00ce", "I"), ("\u00ee", "i")):
        text = text.replace(source, target)
    return text


def lowercase_and_remove_accent(words):
    """tools/lowercase_and_remove_accent.py on a line's words: lower case, NFD, marks
    (category Mn) dropped, lower case again; split on the spaces that joined them."""
    text = " ".join(words).lower()
    if not text.isascii():  # ASCII has no marks and is its own NFD
        text = unicodedata.normalize("NFD", text)
        text = "".join(c for c in text if unicodedata.category(c) != "Mn").lower()
    return text.split(" ")


@functools.cache
def _sacremoses_classes():
    """sacremoses' (MosesPunctNormalizer, MosesTokenizer) with what they remake per call
    made once, the same words (tests/data/test_moses_words.py: transformers' XLMTokenizer's
    stock sacremoses steps, word for word): twice the speed on lines with words ending in
    "." (docs/notes/data-at-scale.md)."""
    import sacremoses

    class Normalizer(sacremoses.MosesPunctNormalizer):
        """XLM's normalizer (replace-unicode-punctuation.perl, then normalize-punctuation.perl)
        with its patterns compiled once: sacremoses' `normalize` passes each pattern's text to
        re.sub, a look-up in re's cache per pattern and line (half its time, measured)."""

        def __init__(self, lang):
            # pre_replace_unicode_punct: replace-unicode-punctuation.perl before the
            # normalizer (sacremoses' table is transformers' replace_unicode_punct, entry for
            # entry).
            super().__init__(lang=lang, pre_replace_unicode_punct=True)
            self.compiled = [(re.compile(pattern), substitution) for pattern, substitution
                             in (*self.REPLACE_UNICODE_PUNCTUATION, *self.substitutions)]

        def normalize(self, text):  # sacremoses' steps (no post_remove_control_chars here)
            for pattern, substitution in self.compiled:
                text = pattern.sub(substitution, text)
            return text.strip()

    class Tokenizer(sacremoses.MosesTokenizer):
        """sacremoses' MosesTokenizer with Unicode's lower-case letters and letters kept as
        sets: sacremoses 0.1-0.2 build them (2,253 and 10,862 characters) on every call,
        once for each word that ends in "." (`handles_nonbreaking_prefixes`), 0.6-3 ms each.
        The same answers: `islower` is "every character lower case", `isanyalpha` "any
        character a letter"."""

        def __init__(self, lang):
            super().__init__(lang=lang)
            self.lower_set, self.alpha_set = frozenset(self.IsLower), frozenset(self.IsAlpha)

        def islower(self, text):
            return self.lower_set.issuperset(text)

        def isanyalpha(self, text):
            return not self.alpha_set.isdisjoint(text)

    return Normalizer, Tokenizer


@functools.cache
def tokenizer(language):
    """sacremoses' tokenizer (tokenizer.perl) for `language`, made once per process."""
    return _sacremoses_classes()[1](language)


@functools.cache
def xlm_moses(language):
    """(punctuation normalizer, tokenizer) of XLM's Moses steps for `language`."""
    if language in SEGMENTED_LANGUAGES:
        raise ValueError(f"XLM splits {language!r} text with its own segmenter, which "
                         "keras_ctx does not run; segment it first (XLM's tools/) and give "
                         "the words separated by spaces with another language code.")
    return _sacremoses_classes()[0](language), tokenizer(language)


def xlm_words(text, language="en", lowercase_and_remove_accents=True):
    """One line's words as XLM reads them before BPE (empty words dropped)."""
    normalizer, moses = xlm_moses(language)
    text = remove_non_printing_char(normalizer.normalize(text))
    if language == "ro":
        text = romanian(text)
    words = moses.tokenize(text, return_str=False, escape=False)
    if lowercase_and_remove_accents:
        words = lowercase_and_remove_accent(words)
    return [word for word in words if word]


def cove_words(text, language):
    """One line's words as CoVe's released pipeline made them: tokenizer.perl -no-escape
    -l `language` (no -a), lowercase.perl (and preprocess.py -lower), split on spaces."""
    words = tokenizer(language).tokenize(text, escape=False, aggressive_dash_splits=False,
                                         return_str=False)
    # lowercase.perl is Perl's `lc`, which maps capital sigma to "σ" everywhere; Python's
    # `str.lower` gives "ς" at a word's end (Unicode's Final_Sigma rule).
    return " ".join(words).replace("Σ", "σ").lower().split()


# rule -> (text, language) -> words
SPLITTERS = {"xlm-uncased": lambda text, language: xlm_words(text, language, True),
             "xlm-cased": lambda text, language: xlm_words(text, language, False),
             "cove-lowercased": cove_words}
RULES = tuple(SPLITTERS)


def _split_chunk(rule, rows):
    words = SPLITTERS[rule]
    return [words(text, language) for language, text in rows]


def split(rule, rows, workers=None):
    """Each (language, text) row's words by `rule` (RULES), lazily, in the rows' order:
    in `workers` processes (None: one per core) once there are POOL_MIN_LINES rows."""
    if rule not in RULES:
        raise ValueError(f"Unknown Moses word rule {rule!r}; use one of {RULES}.")
    if workers is not None and workers < 1:
        raise ValueError(f"Moses words need at least 1 worker process, got {workers}.")
    rows = iter(rows)
    head = list(itertools.islice(rows, POOL_MIN_LINES))
    rows = itertools.chain(head, rows)
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(head) < POOL_MIN_LINES:
        for row in rows:
            yield _split_chunk(rule, [row])[0]
        return
    chunks = iter(lambda: list(itertools.islice(rows, CHUNK_LINES)), [])
    for words in _pooled(rule, chunks, workers):
        yield from words


# A worker: this file loaded by its path (not as keras_ctx.data.moses_words, which would
# import the package), without the caller's current directory on its path.
_BOOT = ("import importlib.util, sys; del sys.path[0]; spec = importlib.util."
         "spec_from_file_location('keras_ctx_moses_worker', sys.argv[1]); module = "
         "importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
         "module.serve()")


def _pooled(rule, chunks, workers):
    """Each chunk's words from up to `workers` processes, one chunk each at a time, read
    back in the order they were handed out (no pipe waits on one the other side is not
    reading)."""
    processes, busy = [], collections.deque()
    try:
        for chunk in itertools.islice(chunks, workers):
            processes.append(subprocess.Popen(
                [sys.executable, "-c", _BOOT, os.path.abspath(__file__)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            _send(processes[-1], (rule, chunk))
            busy.append(processes[-1])
        while busy:
            process = busy.popleft()
            yield _receive(process)
            chunk = next(chunks, None)
            if chunk is not None:
                _send(process, (rule, chunk))
                busy.append(process)
    finally:
        for process in processes:
            # The worker's end of input: it exits (one that died already: its error is
            # the one raised, not this close's).
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
        for process in processes:
            process.stdout.close()
            process.wait()


def _ended(process):
    return RuntimeError(f"A Moses word splitting process ended (exit code {process.wait()}); "
                        "its error is above, or split with workers=1 to see it here.")


def _send(process, message):
    try:
        pickle.dump(message, process.stdin, pickle.HIGHEST_PROTOCOL)
        process.stdin.flush()
    except BrokenPipeError:
        raise _ended(process) from None


def _receive(process):
    try:
        status, value = pickle.load(process.stdout)
    except EOFError:
        raise _ended(process) from None
    if status != "ok":
        raise RuntimeError(f"Splitting Moses words in a worker process failed: {value}")
    return value


def serve():
    """A worker's loop: (rule, rows) messages on stdin, ("ok", their words) or ("error",
    what went wrong) on stdout, until stdin closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the caller, which closes us
    messages = sys.stdin.buffer
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot break a reply
    while True:
        try:
            rule, rows = pickle.load(messages)
        except EOFError:
            return
        try:
            reply = ("ok", _split_chunk(rule, rows))
        except Exception as error:  # any: handed to the caller, which raises it in one line
            reply = ("error", f"{type(error).__name__}: {error}")
        try:
            pickle.dump(reply, replies, pickle.HIGHEST_PROTOCOL)
            replies.flush()
        except BrokenPipeError:  # the caller is gone
            return

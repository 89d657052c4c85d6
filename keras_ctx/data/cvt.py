"""Cross-view training's input stream (Clark et al. 2018): cvt_text's sentences, word
ids and length buckets, and the labelled and unlabelled batches zipped so that one
element feeds one `CrossViewTrainer` step (`keras_ctx.pretraining.cvt`).

As tensorflow/models research/cvt_text makes its minibatches
(corpus_processing/unlabeled_data.py, example.py, minibatching.py):
unlabelled sentences of `MAX_SENTENCE_LENGTH` words or more are skipped; a
word's id is that of its normalised form (lower-cased, digits as 0: the
vocabulary of cvt_text is GloVe's, uncased) while its characters keep their
case; sentences are binned by length into `BUCKETS` and each batch holds
sentences of one bin, so that a batch of short sentences is not padded to the
longest of the corpus. Each bin is padded to its longest sentence (a fixed
width, one compiled step per bin: cvt_text pads each batch to its own longest).
A vocabulary with `sentence_boundaries` wraps each sentence in `<start>` ...
`<end>` for the encoder to read, as cvt_text's Example does.
"""

import re

import numpy as np

from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.data.characters import BOS_TOKEN, EOS_TOKEN

# cvt_text base/configure.py (Clark et al. 2018): `max_sentence_length` (unlabelled
# sentences of 100 words or more are skipped) and `buckets`, over lengths that count
# cvt_text's <start> and <end> tokens (BOUNDARY_TOKENS).
MAX_SENTENCE_LENGTH = 100
BUCKETS = ((0, 15), (15, 40), (40, 1000))
BOUNDARY_TOKENS = 2

# cvt_text corpus_processing/example.py: "don 't" is read as "do n't".
_CONTRACTION_WORDS = frozenset(w + "n" for w in (
    "do", "does", "did", "is", "are", "was", "were", "has", "have", "had", "could",
    "would", "should", "ca", "wo", "ai", "might"))
# cvt_text base/embeddings.py normalize_chars: Penn Treebank bracket tokens.
_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "-LSB-": "[",
             "-RSB-": "]"}


def fixed_contractions(words):
    """`words` with "don 't" as "do n't" (cvt_text's Example: one tokenization for all
    its corpora)."""
    words = list(words)
    for i in range(1, len(words)):
        if words[i].lower() == "'t" and words[i - 1].lower() in _CONTRACTION_WORDS:
            words[i] = words[i - 1][-1] + words[i]
            words[i - 1] = words[i - 1][:-1]
    return words


def normalized_characters(word):
    """The word whose characters the character CNN reads (cvt_text's normalize_chars)."""
    return _BRACKETS.get(word, word.replace(r"\/", "/").replace(r"\*", "*"))


def normalized_word(word):
    """The form a word's id is looked up by: lower-cased, every digit 0 (cvt_text's
    normalize_word, the form of GloVe's uncased words)."""
    return re.sub(r"\d", "0", normalized_characters(word).lower())


class WordVocabulary(list):
    """A CVT tagger's words: 0 pads, 1 is the unknown word, then `<start>` 2 and
    `<end>` 3 where the vocabulary has them, then the words.

    Args:
        words: the words, most frequent first.
        normalized: whether they are `normalized_word` forms and looked up so
            (taggers saved before the rule have raw words: False).
        sentence_boundaries: whether the encoder reads `<start>` and `<end>`
            around each sentence (cvt_text's Example, ids 2 and 3 as its
            SPECIAL_TOKENS); taggers saved before have neither (False).
    """

    PADDING_ID, UNKNOWN_ID, START_ID, END_ID = 0, 1, 2, 3

    def __init__(self, words, normalized=True, sentence_boundaries=False):
        super().__init__(words)
        self.normalized = bool(normalized)
        self.sentence_boundaries = bool(sentence_boundaries)

    @staticmethod
    def reserved_ids(sentence_boundaries):
        """The ids before the first word's: padding, unknown and the boundaries if any."""
        return 4 if sentence_boundaries else 2

    @property
    def reserved(self):
        return self.reserved_ids(self.sentence_boundaries)

    @classmethod
    def of_sentences(cls, sentences, size, sentence_boundaries=False):
        """The most frequent normalised words of `sentences` (ties by spelling), `size`
        ids in all."""
        counts = {}
        for words in sentences:
            for word in fixed_contractions(words):
                word = normalized_word(word)
                counts[word] = counts.get(word, 0) + 1
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        return cls(ranked[:size - cls.reserved_ids(sentence_boundaries)], True,
                   sentence_boundaries)

    def ids(self, words):
        """The ids of one sentence's words (after `fixed_contractions`)."""
        if not hasattr(self, "_index"):
            self._index = {word: i + self.reserved for i, word in enumerate(self)}
        if not self.normalized:  # a tagger saved before cvt_text's rule: raw words
            return [self._index.get(w, self.UNKNOWN_ID) for w in words]
        return [self._index.get(normalized_word(w), self.UNKNOWN_ID)
                for w in fixed_contractions(words)]

    def spellings(self, words):
        """What the character CNN reads of each word (`normalized_characters`)."""
        if not self.normalized:
            return list(words)
        return [normalized_characters(w) for w in fixed_contractions(words)]

    def encoder_row(self, words):
        """(ids, spellings) the encoder reads for one sentence: with
        `sentence_boundaries`, `<start>` first and `<end>` last (cvt_text's
        Example; their characters ELMo's sentence boundaries', `<S>` and `</S>`)."""
        ids, spellings = self.ids(words), self.spellings(words)
        if self.sentence_boundaries:
            ids = [self.START_ID, *ids, self.END_ID]
            spellings = [BOS_TOKEN, *spellings, EOS_TOKEN]
        return ids, spellings


def unlabelled_sentences(sentences, max_sentence_length=MAX_SENTENCE_LENGTH):
    """The sentences cvt_text trains on: fewer than `max_sentence_length` words."""
    return [words for words in sentences if len(words) < max_sentence_length]


def length_buckets(lengths, batch_size, buckets=BUCKETS):
    """Row indices by cvt_text's length bins, each bin of at least `batch_size` rows.

    `lengths` are words per sentence (a bin's bounds count cvt_text's <start> and
    <end>). A bin too small for one batch joins the next longer one (the last
    joins the one before), so that every sentence fits in a batch.

    Returns:
        [indices of one bin], shortest bin first.
    """
    lengths = np.asarray(lengths) + BOUNDARY_TOKENS
    bins = [np.flatnonzero((lengths >= low) & (lengths < high)) for low, high in buckets]
    bins[-1] = np.union1d(bins[-1], np.flatnonzero(lengths >= buckets[-1][1]))
    merged, carried = [], np.zeros(0, int)
    for rows in bins:
        carried = np.concatenate([carried, rows])
        if len(carried) >= batch_size:
            merged.append(carried)
            carried = np.zeros(0, int)
    if len(carried):
        if merged:
            merged[-1] = np.concatenate([merged[-1], carried])
        else:
            merged.append(carried)
    return merged


def bucketed_batches(rows, lengths, make_rows, batch_size, seed=0):
    """An endless dataset of `batch_size`-row batches, each of one length bin.

    Args:
        rows: the examples (any Python objects `make_rows` takes).
        lengths: words per example.
        make_rows: (examples, width) -> a nest of numpy arrays, one row per
            example, padded to `width` words.
        batch_size: rows per batch (at most the number of examples).
        seed: shuffles the rows within a bin and the order of the batches,
            again each pass (cvt_text shuffles each bucket, then the batches).

    Each pass yields every bin's full batches once, in random order; a bin's
    last incomplete batch is left out of that pass (its rows are reshuffled
    into the next).
    """
    batch_size = min(batch_size, len(rows))
    bins = length_buckets(lengths, batch_size)
    datasets, choices = [], []
    for index, members in enumerate(bins):
        width = int(max(lengths[i] for i in members))
        arrays = make_rows([rows[i] for i in members], width)
        datasets.append(tf.data.Dataset.from_tensor_slices(arrays).shuffle(
            len(members), seed=seed + index).batch(batch_size, drop_remainder=True).repeat())
        choices += [index] * (len(members) // batch_size)
    order = tf.data.Dataset.from_tensor_slices(tf.constant(choices, tf.int64)).shuffle(
        len(choices), seed=seed).repeat()
    return tf.data.Dataset.choose_from_datasets(datasets, order)


def cvt_dataset(labelled, unlabelled, task_names=None, sizes=None, seed=0):
    """The two streams of `CrossViewTrainer`, zipped: one element feeds one step.

    Args:
        labelled: a dataset of `(inputs, labels)` batches, or {task: such a
            dataset} for the multi-task variant.
        unlabelled: a dataset of `inputs` batches (the same input names).
        task_names: the trainer's task names when `labelled` is one dataset
            (default "tags", `CrossViewTrainer(tasks=int)`'s name).
        sizes: {task: labelled sentences}, needed with several tasks: each
            step's task is drawn with probability sqrt(size) / sum sqrt(size),
            as cvt_text's trainer (training/trainer.py, `_get_training_mbs`)
            draws it. The tasks must be `labelled`'s, in the trainer's order.
        seed: seeds the draws.

    Returns:
        An endless dataset. One task: {"labelled": {task: (inputs, labels)},
        "unlabelled": {task: inputs}}. Several: {"task": the drawn task's index
        (on every row), "labelled": its (inputs, labels), "unlabelled": inputs}.
    """
    if not isinstance(labelled, dict):
        names = list(task_names or ["tags"])
        if len(names) != 1:
            raise ValueError(f"One labelled dataset but tasks {names}: pass {{task: dataset}}.")
        labelled = {names[0]: labelled}
    names = list(labelled)
    stream = unlabelled.repeat()
    if len(names) == 1:
        return tf.data.Dataset.zip({"labelled": {names[0]: labelled[names[0]].repeat()},
                                    "unlabelled": {names[0]: stream}})
    if sizes is None or sorted(sizes) != sorted(names):
        raise ValueError(f"Tasks {names} need sizes={{task: labelled sentences}} for each "
                         f"(cvt_text draws a task by sqrt of its size), got {sizes}.")
    for name in names:
        validation.positive_int(f"sizes[{name!r}]", sizes[name])

    def tagged(index):
        def add(inputs, labels):
            rows = tf.shape(labels)[:1]
            return {"task": tf.fill(rows, tf.constant(index, tf.int32)),
                    "labelled": (inputs, labels)}
        return add

    weights = np.sqrt([float(sizes[name]) for name in names])
    drawn = tf.data.Dataset.sample_from_datasets(
        [labelled[name].repeat().map(tagged(i)) for i, name in enumerate(names)],
        weights=list(weights / weights.sum()), seed=seed)
    return tf.data.Dataset.zip((drawn, stream)).map(
        lambda step, inputs: {**step, "unlabelled": inputs})


__all__ = ["BUCKETS", "MAX_SENTENCE_LENGTH", "WordVocabulary", "bucketed_batches", "cvt_dataset",
           "fixed_contractions", "length_buckets", "normalized_characters", "normalized_word",
           "unlabelled_sentences"]

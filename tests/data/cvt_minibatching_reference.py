"""cvt_text's unlabelled minibatches, transcribed for test_cvt_data.py.

tensorflow/models research/cvt_text (Clark et al. 2018), the files at the commits the
index holds: base/configure.py @245f66d (`Config`'s sizing defaults), base/embeddings.py
@5adadf0 (`_CHARS`, `SPECIAL_TOKENS`, `Vocabulary`, `get_char_vocab`,
`normalize_chars`, `normalize_word`), corpus_processing/example.py @d318246
(`Example`), corpus_processing/minibatching.py @52e2952 (`get_bucket`, `build_array`,
`Dataset.get_minibatches`, `Dataset._make_minibatch`) and
corpus_processing/unlabeled_data.py @a4a3ba8 (`UnlabeledDataReader`'s sentence filter
and its chunks of 10,000 sentences), and model/model_helpers.py @d318246 (`_roll` and
the rolled mask of `masked_ce_loss`, in numpy). Unchanged but for Python 3 (`items`,
`collections.abc.Sequence`, `_EXTRA_WORDS`' missing comma kept as released), a copy of
`_CHARS` per call (the released `get_char_vocab` inserts into the module's list, once,
under its Memoize) and the reader, which takes lines instead of the 1B-word benchmark's
files and makes one pass (`one_pass=True`). The word vocabulary is passed in (cvt_text's
is GloVe's, built by `PretrainedEmbeddingLoader`, not available offline).
"""

import collections
import collections.abc
import random
import re

import numpy as np


class Config:
    """configure.py's defaults that the unlabelled minibatches read."""

    def __init__(self, **kwargs):
        self.max_sentence_length = 100  # maximum length of unlabeled sentences
        self.max_word_length = 20  # maximum length of words for char cnn
        self.train_batch_size = 64  # train batch size
        self.buckets = [(0, 15), (15, 40), (40, 1000)]  # buckets for binning
        for k, v in kwargs.items():
            if k not in self.__dict__:
                raise ValueError("Unknown argument", k)
            self.__dict__[k] = v


# ------------------------------------------------------------------- base/embeddings.py

_CHARS = [
    # punctuation
    '!', '\'', '#', '$', '%', '&', '"', '(', ')', '*', '+', ',', '-', '.',
    '/', '\\', '_', '`', '{', '}', '[', ']', '<', '>', ':', ';', '?', '@',
    # digits
    '0', '1', '2', '3', '4', '5', '6', '7', '8', '9',
    # letters
    'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'N',
    'O', 'P', 'Q', 'R', 'S', 'T', 'U', 'V', 'W', 'X', 'Y', 'Z',
    'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n',
    'o', 'p', 'q', 'r', 's', 't', 'u', 'v', 'w', 'x', 'y', 'z',
    # special characters
    '£', '€', '®', '™', '�', '½', '»', '•', '—', '“', '”', '°', '‘', '’'
]

# words not in GloVe that still should have embeddings
_EXTRA_WORDS = [
    # common digit patterns
    '0/0', '0/00', '00/00', '0/000',
    '00/00/00', '0/00/00', '00/00/0000', '0/00/0000',
    '00-00', '00-00-00', '0-00-00', '00-00-0000', '0-00-0000', '0000-00-00',
    '00-0-00-0', '00000000', '0:00.000', '00:00.000',
    '0%', '00%', '00.' '0000.', '0.0bn', '0.0m', '0-', '00-',
    # ontonotes uses **f to represent formulas and -amp- instead of amperstands
    '**f', '-amp-'
]
SPECIAL_TOKENS = ['<pad>', '<unk>', '<start>', '<end>', '<missing>']
NUM_CHARS = len(_CHARS) + len(SPECIAL_TOKENS)
PAD, UNK, START, END, MISSING = 0, 1, 2, 3, 4


class Vocabulary(collections.OrderedDict):
    def __getitem__(self, w):
        return self.get(w, UNK)


def get_char_vocab():
    characters = list(_CHARS)
    for i, special in enumerate(SPECIAL_TOKENS):
        characters.insert(i, special)
    return Vocabulary({c: i for i, c in enumerate(characters)})


def word_vocabulary(words):
    """`PretrainedEmbeddingLoader.build`'s order: the specials, the extra words, then
    `words` (GloVe's, in file order) normalized, first occurrence kept."""
    vocabulary = Vocabulary()
    for w in SPECIAL_TOKENS + _EXTRA_WORDS + [normalize_word(w) for w in words]:
        if w not in vocabulary:
            vocabulary[w] = len(vocabulary)
    return vocabulary


def normalize_chars(w):
    if w == '-LRB-':
        return '('
    elif w == '-RRB-':
        return ')'
    elif w == '-LCB-':
        return '{'
    elif w == '-RCB-':
        return '}'
    elif w == '-LSB-':
        return '['
    elif w == '-RSB-':
        return ']'
    return w.replace(r'\/', '/').replace(r'\*', '*')


def normalize_word(w):
    return re.sub(r'\d', '0', normalize_chars(w).lower())


# ------------------------------------------------------- corpus_processing/example.py

CONTRACTION_WORDS = set(w + 'n' for w in
                        ['do', 'does', 'did', 'is', 'are', 'was', 'were', 'has',
                         'have', 'had', 'could', 'would', 'should', 'ca', 'wo',
                         'ai', 'might'])


class Example:
    def __init__(self, words, word_vocab, char_vocab):
        words = words[:]
        # Fix inconsistent tokenization between datasets
        for i in range(len(words)):
            if (words[i].lower() == '\'t' and i > 0 and
                    words[i - 1].lower() in CONTRACTION_WORDS):
                words[i] = words[i - 1][-1] + words[i]
                words[i - 1] = words[i - 1][:-1]

        self.words = ([START] +
                      [word_vocab[normalize_word(w)] for w in words] +
                      [END])
        self.chars = ([[MISSING]] +
                      [[char_vocab[c] for c in normalize_chars(w)]
                       for w in words] +
                      [[MISSING]])


# -------------------------------------------------- corpus_processing/minibatching.py

def get_bucket(config, length):
    for i, (s, e) in enumerate(config.buckets):
        if s <= length < e:
            return config.buckets[i]


def build_array(nested_lists, dtype='int32'):
    depth_to_sizes = collections.defaultdict(set)
    _get_sizes(nested_lists, depth_to_sizes)
    shape = [max(depth_to_sizes[depth]) for depth in range(len(depth_to_sizes))]

    copy_depth = len(depth_to_sizes) - 1
    while copy_depth > 0 and len(depth_to_sizes[copy_depth]) == 1:
        copy_depth -= 1

    arr = np.zeros(shape, dtype=dtype)
    _fill_array(nested_lists, arr, copy_depth)

    return arr


def _get_sizes(nested_lists, depth_to_sizes, depth=0):
    depth_to_sizes[depth].add(len(nested_lists))
    first_elem = nested_lists[0]
    if (isinstance(first_elem, collections.abc.Sequence) or
            isinstance(first_elem, np.ndarray)):
        for sublist in nested_lists:
            _get_sizes(sublist, depth_to_sizes, depth + 1)


def _fill_array(nested_lists, arr, copy_depth, depth=0):
    if depth == copy_depth:
        for i in range(len(nested_lists)):
            if isinstance(nested_lists[i], np.ndarray):
                arr[i] = nested_lists[i]
            else:
                arr[i] = np.array(nested_lists[i])
    else:
        for i in range(len(nested_lists)):
            _fill_array(nested_lists[i], arr[i], copy_depth, depth + 1)


Minibatch = collections.namedtuple('Minibatch', [
    'task_name', 'size', 'examples', 'ids', 'teacher_predictions',
    'words', 'chars', 'lengths', 'mask'
])


class Dataset:
    def __init__(self, config, examples, task_name='unlabeled', is_training=False):
        self._config = config
        self.examples = examples
        self.size = len(examples)
        self.task_name = task_name
        self.is_training = is_training

    def get_minibatches(self, minibatch_size):
        by_bucket = collections.defaultdict(list)
        for i, e in enumerate(self.examples):
            by_bucket[get_bucket(self._config, len(e.words))].append(i)

        # save memory by weighting examples so longer sentences have
        # smaller minibatches.
        weight = lambda ind: np.sqrt(len(self.examples[ind].words))  # noqa: E731
        total_weight = float(sum(weight(i) for i in range(len(self.examples))))
        weight_per_batch = minibatch_size * total_weight / len(self.examples)
        cumulative_weight = 0.0
        id_batches = []
        for _, ids in by_bucket.items():
            ids = np.array(ids)
            np.random.shuffle(ids)
            curr_batch, curr_weight = [], 0.0
            for i, curr_id in enumerate(ids):
                curr_batch.append(curr_id)
                curr_weight += weight(curr_id)
                if (i == len(ids) - 1 or cumulative_weight + curr_weight >=
                        (len(id_batches) + 1) * weight_per_batch):
                    cumulative_weight += curr_weight
                    id_batches.append(np.array(curr_batch))
                    curr_batch, curr_weight = [], 0.0
        random.shuffle(id_batches)

        for id_batch in id_batches:
            yield self._make_minibatch(id_batch)

    def _make_minibatch(self, ids):
        examples = [self.examples[i] for i in ids]
        sentence_lengths = np.array([len(e.words) for e in examples])
        max_word_length = min(max(max(len(word) for word in e.chars)
                                  for e in examples),
                              self._config.max_word_length)
        characters = [[[PAD] + [START] + w[:max_word_length] +
                       [END] + [PAD] for w in e.chars]
                      for e in examples]
        # the first and last words are masked because they are start/end tokens
        mask = build_array([[0] + [1] * (length - 2) + [0]
                            for length in sentence_lengths])
        words = build_array([e.words for e in examples])
        chars = build_array(characters, dtype='int16')
        return Minibatch(
            task_name=self.task_name,
            size=ids.size,
            examples=examples,
            ids=ids,
            teacher_predictions={},
            words=words,
            chars=chars,
            lengths=sentence_lengths,
            mask=mask,
        )


# ---------------------------------------------- corpus_processing/unlabeled_data.py

def get_unlabeled_sentences(config, lines):
    """`UnlabeledDataReader.get_unlabeled_sentences`, one pass over `lines`."""
    for line in lines:
        words = line.strip().split()
        if len(words) < config.max_sentence_length:
            yield words


def get_unlabeled_examples(config, lines, word_vocab):
    """Chunks of 10,000 sentences as Examples; one pass (`one_pass=True`) drops the
    last incomplete chunk, as the released generator does."""
    char_vocab = get_char_vocab()
    chunk = []
    for words in get_unlabeled_sentences(config, lines):
        chunk.append(words)
        if len(chunk) >= 10000:
            yield [Example(sentence, word_vocab, char_vocab) for sentence in chunk]
            chunk = []


def unlabeled_minibatches(config, lines, word_vocab):
    """`UnlabeledDataReader.endless_minibatches`, one pass over `lines`."""
    for examples in get_unlabeled_examples(config, lines, word_vocab):
        d = Dataset(config, examples, 'unlabeled')
        for mb in d.get_minibatches(config.train_batch_size):
            yield mb


# ------------------------------------------------------------ model/model_helpers.py

def _roll(arr, direction):
    """`_roll(arr, direction, sparse=True)`, in numpy."""
    return np.concatenate([arr[:, direction:], arr[:, :direction]], axis=1)


def loss_weights(mask, roll_direction=0):
    """The weights `masked_ce_loss` gives each logit position: `mask`, times `mask`
    rolled for the future (1) and past (-1) modules, whose labels are rolled too."""
    mask = np.asarray(mask, "float32")
    if roll_direction != 0:
        mask = mask * _roll(mask, roll_direction)
    return mask

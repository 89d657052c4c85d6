"""CoVe's pretraining data for `keras-ctx pretrain` (McCann et al. 2017).

The paper's one stage: translation. The MT-LSTM encoder (`CoveBackbone`) reads
fixed word vectors of the source sentence and an attentional LSTM decoder
(`TranslationPretrainer`) predicts the target sentence word by word (teacher
forcing). Its inputs: `--parallel en-de=pairs.tsv` (one `source<TAB>target`
pair a line) and `--glove FILE`, the source language's vectors in GloVe's text
format (glove.840B.300d.txt for the paper's English). Any SRC-TGT pair is
accepted (each side read by Moses' rules for its language); the --glove file
must be the source language's.

Words: as the released run made them (`keras_ctx.data.cove_words`): each side
through Moses' tokenizer for its language, -no-escape, no -a, then lower cased
(salesforce/cove OpenNMT-py/README.md @9a0d90b: `tokenizer.perl -no-escape -l $l`,
`lowercase.perl`, `preprocess.py -lower`), through sacremoses (the `moses` extra;
a run without it is refused in one line before anything is read). The lower-cased
words read the cased glove.840B's rows of the same spelling (get_embed_for_dict.py's
exact lookup). Each side's vocabulary is its most frequent words
(preprocess.py `makeVocabulary` / `Dict.prune`), at most --vocabulary-size
of each, counted on a seeded sample of at most `corpora.TOKENIZER_SAMPLE_SENTENCES`
pairs (the released script counts every line). The source side's words are the
run's tokenizer (what `keras-ctx embed` reads); the target side's are kept in the
run directory (`target_vocabulary`, TARGET_FILE) and read back by a resumed run, as
its tokenizer is: a pair file changed since (--corpus-changed continue) changes neither.
`keras-ctx prepare` splits the pairs once, in processes (`prepared_parts`,
`keras_ctx.data.prepared_ids`), keeping the target vocabulary with the data; a run on it
(`pretrain --data`) reads the pairs' ids: the same rows.

Batches: the kept pairs shuffled, then batched as OpenNMT-py batches them, a pool at a
time (`pooled_batches`): sorted by source length, cut into batches, each by decreasing source
length, the batches' order shuffled; each batch padded to the narrowest of a few fixed widths
holding its longest source, and its targets' own (a few shapes for XLA). On the built-in
stand-in pairs at 75 words 19% of the encoder's positions are padding (2.0% without the
widths; the released run's 1.6%), 78% when every row was 75 wide.

Not the released run's yet (said, not modelled): OpenNMT-py's dropout inside the
decoder's steps (on the fed-back h~ and between its LSTM layers; `AttentionalDecoder`
has none there), and its learning-rate schedule: onmt/Optim.py `updateLearningRate`
halves the rate (-learning_rate_decay 0.5) after each epoch whose validation
perplexity is worse than the last one's (or from -start_decay_at), and train.py stops
below -lr_cutoff 0.03; here SGD keeps 1.0 (there is no validation split).
"""

import collections
import functools
import os

import numpy as np

from keras_ctx.common import progress, validation
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.progress import say
from keras_ctx.data import (corpora, cove_words, fingerprints, glove, labelled, prepared_ids,
                            token_counts, xlm_recipe)

SOURCE_SPECIALS = ("<pad>", "<unk>")  # id 0 pads (CoveBackbone), unknown words read zeros
TARGET_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")  # keras_ctx.data.parallel's order
NEEDS = "--parallel SRC-TGT=PAIRS.tsv --glove FILE"
BUCKET_STEP = 8  # words between the batches' widths (`bucket_widths`), our choice
# Batches a pool sorted by source length holds (`pooled_batches`): torchtext's `pool`, which
# later OpenNMT-py batches with; the released run sorted the whole file.
POOL_BATCHES = 100
TARGET_FILE = "cove_target_vocabulary.json"  # in the run directory (`target_vocabulary`)
# What it holds: the words in id order and what they were made with (read closed).
TARGET_SCHEMA = {"tokenizer": ((str, type(None)), None, True),
                 "vocabulary_size": (int, 1, True),
                 "words": (validation.ListOf(str), None, True)}


def word_tokenizer(words, specials=SOURCE_SPECIALS, language="en"):
    """A tokenizer of whole words (`cove_words.MosesWordTokenizer`): `specials` + `words`,
    the text read as `language`'s Moses words, lower cased; a word it lacks is `<unk>`."""
    return cove_words.MosesWordTokenizer(list(dict.fromkeys([*specials, *words])), language,
                                         oov_token="<unk>")


def split_words(*columns):
    """[(Counter of its words, words per sentence)] of each (sentences, language) column,
    split as `word_tokenizer` splits them (`cove_words.moses_words`): a word counted here is
    one id there, by construction."""
    found = []
    for sentences, language in columns:
        # Moses words take minutes on a large sample (docs/notes/data-at-scale.md): the count
        # says how far.
        words = list(cove_words.words_of(progress.current().count(  # one process per core
            sentences, f"{language} sentences split into Moses words", total=len(sentences)),
            language))
        counts = collections.Counter(word for line in words for word in line)
        found.append((counts, np.array([len(line) for line in words], np.int64)))
    return found


def word_counts(sentences, language="en"):
    """Counter of the words of `sentences` (str) as `word_tokenizer` splits them."""
    return split_words((list(sentences), language))[0][0]


def most_frequent(counts, size, specials):
    """The `size - len(specials)` most frequent words, ties in first-seen order."""
    return [word for word, _ in counts.most_common(max(0, size - len(specials)))
            if word not in specials]


def train_word_tokenizer(sentences, vocabulary_size):
    """Family.train_tokenizer: the source side's `word_tokenizer`, its `vocabulary_size`
    entries the most frequent words of `sentences` ("LANGUAGE<TAB>text", `tokenizer_text`'s;
    a line without a language is English)."""
    if isinstance(sentences, tf.data.Dataset):
        sentences = sentences.as_numpy_iterator()
    sentences = [s.decode("utf-8") if isinstance(s, bytes) else s for s in sentences]
    tagged = [_tagged(line) for line in sentences]
    if not any(text.strip() for _, text in tagged):
        raise ValueError("No text to count a word vocabulary from.")
    languages = sorted({language for language, _ in tagged})
    if len(languages) > 1:
        raise ValueError(f"CoVe's tokenizer reads one language, got lines of {languages}.")
    counts = word_counts([text for _, text in tagged], languages[0])
    return word_tokenizer(most_frequent(counts, vocabulary_size, SOURCE_SPECIALS),
                          language=languages[0])


def _tagged(line):
    """(language, text) of a "LANGUAGE<TAB>text" line; ("en", line) without a language."""
    language, tab, text = line.partition("\t")
    return (language, text) if tab and xlm_recipe.LANGUAGE_CODE.match(language) else (
        "en", line)


# --- the run's inputs --------------------------------------------------------------


def _pair(item):
    """"en-de=path" (or a (source, target, path) triple) -> (source, target, path)."""
    if not isinstance(item, str):
        return tuple(item)
    key, sep, path = item.partition("=")
    source, dash, target = key.partition("-")
    if not sep or not dash or not path:
        raise ConfigError(f"--parallel takes SOURCE-TARGET=FILE (en-de=pairs.tsv), got "
                          f"{item!r}.")
    return source, target, path


def check_glove(path):
    """Refuses a missing --glove file, or one whose first line is not `word v1 ... vd`."""
    if not path:
        raise ConfigError(f"CoVe's encoder reads fixed word vectors: give --glove FILE (GloVe's "
                          f"text format, e.g. glove.840B.300d.txt); it needs {NEEDS}.")
    if not os.path.isfile(path):
        raise ConfigError(f"--glove {path} is not a file: give the source language's word "
                          "vectors in GloVe's text format (e.g. glove.840B.300d.txt).")
    glove_dimension(path)


def glove_dimension(path):
    """The vector size of a GloVe text file, from its first line."""
    try:
        return glove.read_glove(path, max_words=1)[1].shape[1]
    except (ValueError, UnicodeDecodeError, OSError) as error:
        raise ConfigError(f"--glove {path} is not a GloVe text file ({error}).") from None


def check_inputs(corpus, languages, parallel, glove_path=None):
    """The checked ((), ((source, target, file),)) of a CoVe run; ConfigError (one line).

    One --parallel pair (one decoder, one target vocabulary), every line
    `source<TAB>target`; a --glove file; no --languages or --corpus (the pairs
    are the run's text).
    """
    if not parallel:
        raise ConfigError(f"CoVe trains on a parallel corpus: give {NEEDS} (e.g. --parallel "
                          "en-de=pairs.tsv --glove glove.840B.300d.txt).")
    if languages:
        raise ConfigError("--languages is XLM's: CoVe's languages are its --parallel pair's "
                          "(SRC-TGT); drop --languages.")
    if corpus != corpora.BUILTIN:
        raise ConfigError("CoVe trains on its --parallel pairs, not a --corpus: drop --corpus.")
    if len(parallel) > 1:
        raise ConfigError("CoVe's decoder translates into one language: give one --parallel "
                          f"pair, got {len(parallel)}.")
    source, target, path = _pair(parallel[0])
    for name in (source, target):
        if not xlm_recipe.LANGUAGE_CODE.match(name):
            raise ConfigError(f"--parallel {source}-{target}: {name!r} is not a language code "
                              "(two or three lower-case letters, e.g. en-de).")
    if source == target:
        raise ConfigError(f"--parallel {source}-{target}: a pair needs two languages.")
    if not os.path.isfile(path):
        raise ConfigError(f"--parallel {source}-{target}={path}: {path} is not a file.")
    xlm_recipe.check_parallel(path)  # a malformed line is refused before anything is read
    check_glove(glove_path)
    for language in (source, target):
        cove_words.MosesWordTokenizer(language=language)  # sacremoses missing: refused now
    return (), ((source, target, os.fspath(path)),)


check_inputs.reads_glove = True  # `keras-ctx pretrain --glove` reaches it


def _inputs(run):
    inputs = dict(run.inputs)
    source, target, path = inputs["parallel"][0]
    return source, target, path, inputs.get("glove")


def _file_key(run):
    """(path, mtime, size, seed) of the run's pair file: the caches' key (a changed file is
    read again)."""
    path = _inputs(run)[2]
    return path, os.path.getmtime(path), os.path.getsize(path), run.seed


def _sampled_pairs(run):
    """A seeded sample of at most `corpora.TOKENIZER_SAMPLE_SENTENCES` (source, target) pairs
    of the run's pair file (`corpora.reservoir`, the tokenizer's sample of a corpus)."""
    return _sample_of(*_file_key(run))


@functools.lru_cache(maxsize=4)
def _sample_of(path, mtime, size, seed):
    del mtime, size  # the cache's key only
    return corpora.reservoir(([tuple(sides)] for _, _, sides in labelled.tab_separated(path)),
                             corpora.TOKENIZER_SAMPLE_SENTENCES, seed)


def tokenizer_text(run):
    """The sentences the run's tokenizer learns from: the pairs' source side, each line
    "SOURCE<TAB>sentence" (its Moses language; `pretrain` reads them instead of a --corpus
    sample)."""
    pairs, language = _sampled_pairs(run), _inputs(run)[0]
    sample = corpora.Sample(f"{language}\t{source}" for source, _ in pairs)
    sample.seen = pairs.seen
    return sample


def target_vocabulary(run, tokenizer=None):
    """The target side's words: `TARGET_SPECIALS` + the most frequent, at most
    run.vocabulary_size in all (the decoder's softmax and the batches' ids).

    Within `pretrain`'s claim (`token_counts.kept_in`) they are kept in the run directory
    (TARGET_FILE, written atomically once the run is claimed) with the source `tokenizer`'s
    fingerprint, and a resumed run with that tokenizer reads them back instead of counting
    the pair file again: a changed file (--corpus-changed continue) would change the output
    layer's size (its checkpoint would not restore) or the words' order (silently).
    """
    data = prepared_ids.data_of(run)
    if data is not None:  # prepared: the words its ids were made with
        return _read_target(os.path.join(data, TARGET_FILE))["words"]

    def made_from():
        return {"tokenizer": fingerprints.tokenizer(tokenizer),
                "vocabulary_size": run.vocabulary_size}

    # Kept without the pair file's fingerprint on purpose: a resumed run keeps its words
    # when the file changed; a new run counts again (fresh_reads=False).
    record, read = token_counts.kept_record(
        TARGET_FILE, made_from, lambda: {"words": _counted_target_words(run)},
        _read_target, fresh_reads=False)
    if read:
        say(f"Reusing the target vocabulary this run was started with ("
            f"{os.path.join(token_counts.kept_here().directory, TARGET_FILE)}: "
            f"{len(record['words'])} words).")
    return record["words"]


def _read_target(path):
    return validation.read_fields(path, "a CoVe run's target vocabulary", TARGET_SCHEMA,
                                  "restore it, or pretrain again in a new --out")


def prepared_parts(tokenizer, run):
    """What `keras-ctx prepare` writes (`prepared_ids.Part`): the pair file's pairs, the
    source side by the run's tokenizer, the target side by its target vocabulary."""
    source, target, path, _ = _inputs(run)
    words = target_vocabulary(run, tokenizer)
    return [prepared_ids.Part(f"{source}-{target}", path, (tokenizer, word_tokenizer(
        words[len(TARGET_SPECIALS):], TARGET_SPECIALS, target)), row_length=row_length)]


def _counted_target_words(run):
    counts = _pair_words(*_file_key(run), _inputs(run)[:2])[1][0]
    return [*TARGET_SPECIALS, *most_frequent(counts, run.vocabulary_size, TARGET_SPECIALS)]


@functools.lru_cache(maxsize=4)
def _pair_words(path, mtime, size, seed, languages):
    """`split_words` of the sampled pairs' two sides, each by its language's rules."""
    pairs = _sample_of(path, mtime, size, seed)
    return split_words(([s for s, _ in pairs], languages[0]), ([t for _, t in pairs],
                                                                languages[1]))


def recipe_config(run):
    """The encoder's word vectors are the --glove file's size."""
    path = dict(run.inputs).get("glove")
    return {"embedding_size": glove_dimension(path)} if path else {}


def glove_vectors(tokenizer, run):
    """(rows for the tokenizer's words, words found): GloVe's vector of each word, zeros for
    the words GloVe lacks and for <pad>/<unk> (salesforce/cove README.md @9a0d90b: "During
    training the CoVe encoder would have received a zero vector for any words that were not
    in GloVe"; its get_embed_for_dict.py drew uniform(-0.1, 0.1) instead)."""
    path = _inputs(run)[3]
    # `dim` given: glove.840B's few words with spaces in them are read, not refused.
    matrix, _ = glove.glove_matrix(path, tokenizer.get_vocabulary(), dim=glove_dimension(path))
    matrix[:len(SOURCE_SPECIALS)] = 0.0
    return matrix, int(np.count_nonzero(np.any(matrix != 0, axis=1)))


# --- batches -----------------------------------------------------------------------


def _rows(source, target, bos, eos):
    """Teacher forcing's row, unpadded: the source ids, `<s> y` and labels `y </s>`."""
    ones = tf.ones_like(source)
    return ({"encoder_token_ids": source, "encoder_padding_mask": ones,
             "decoder_token_ids": tf.concat([[bos], target], 0),
             "decoder_padding_mask": tf.ones(tf.size(target) + 1, ones.dtype)},
            tf.concat([target, [eos]], 0))


def bucket_widths(length):
    """The widths a batch's rows are padded to: multiples of BUCKET_STEP words below
    `length`, then `length` (each a shape XLA compiles once)."""
    return (*range(BUCKET_STEP, length, BUCKET_STEP), length)


def pooled_batches(rows, length, batch_size, seed, pool_batches=POOL_BATCHES):
    """Batches of `batch_size` rows (`_rows`) as OpenNMT-py orders them, a pool at a time.

    salesforce/cove @9a0d90b (OpenNMT-py of 2017, no torchtext): preprocess.py `makeData`
    sorts every pair by its source's words (`torch.sort(sizes)`, after -shuffle), onmt/Dataset.py
    cuts batches of consecutive pairs and sorts each by decreasing source length (`__getitem__`),
    train.py `trainEpoch` shuffles the batches' order. A stream cannot sort the whole file: each
    pool of `pool_batches * batch_size` consecutive rows is sorted (stably) instead, as
    torchtext's `pool` does for later OpenNMT-py (100 batches), its batches in an order drawn
    from `seed` and the pool's index. Each batch's encoder rows are padded to the narrowest of
    `bucket_widths(length)` that holds its longest source, its decoder rows to one more than
    the narrowest that holds its longest target (a few shapes for XLA where OpenNMT-py pads to
    the longest). Deterministic given `rows`' order (a resume skips batches). `rows` must be
    endless: a pass's last rows fill a pool with the next pass's."""
    widths = tf.constant(bucket_widths(length), tf.int32)
    pool = pool_batches * batch_size

    def narrowest(words):  # the first width that holds `words`
        return tf.gather(widths, tf.argmax(tf.cast(widths >= words, tf.int32)))

    def padded(row, width):
        row = row[:, :width]
        return tf.pad(row, [[0, 0], [0, width - tf.shape(row)[1]]])

    def batch(inputs, labels, order):
        inputs, labels = tf.nest.map_structure(functools.partial(tf.gather, indices=order),
                                               (inputs, labels))
        source = narrowest(tf.reduce_max(tf.reduce_sum(inputs["encoder_padding_mask"], 1)))
        target = narrowest(tf.reduce_max(tf.reduce_sum(inputs["decoder_padding_mask"], 1)) - 1)
        return ({name: padded(x, source if name.startswith("encoder") else target + 1)
                 for name, x in inputs.items()}, padded(labels, target + 1))

    def cut(index, pooled):
        inputs, labels = pooled
        words = tf.reduce_sum(inputs["encoder_padding_mask"], 1)
        order = tf.reshape(tf.argsort(words, stable=True), [pool_batches, batch_size])
        # each batch by decreasing source length, ties in the pool's order (Dataset.__getitem__)
        order = tf.gather(order, tf.argsort(-tf.gather(words, order), axis=1, stable=True),
                          batch_dims=1)
        shuffled = tf.argsort(tf.random.stateless_uniform(
            [pool_batches], tf.stack([tf.cast(seed, tf.int64), index])))
        return tf.data.Dataset.from_tensor_slices(tf.gather(order, shuffled)).map(
            functools.partial(batch, inputs, labels))

    source, target = tf.constant([length]), tf.constant([length + 1])
    shapes = ({"encoder_token_ids": source, "encoder_padding_mask": source,
               "decoder_token_ids": target, "decoder_padding_mask": target}, target)
    return rows.padded_batch(pool, padded_shapes=shapes, drop_remainder=True).enumerate().flat_map(
        cut)


def row_length(source_words, target_words):
    """The words of a pair's longer side (what preprocess.py's -seq_length limits: a pair
    is kept when both sides have at most that many words; `_rows` gives the decoder one
    position more, for <s> or </s>); 0 for a pair with an empty side, which no length
    keeps. Elementwise, on int tensors or arrays (`prepare` counts them)."""
    longer = tf.maximum(source_words, target_words)
    return tf.where((source_words > 0) & (target_words > 0), longer, tf.zeros_like(longer))


def cove_dataset(documents, tokenizer, run):
    """Translation batches ({encoder_*, decoder_*}, labels) of the run's pair file: its kept
    pairs shuffled in a 4,096-pair buffer, again each pass, then sorted by source length a
    pool at a time (`pooled_batches`; a pool at most the kept pairs, as the released run
    sorted its whole file)."""
    del documents  # the pairs are the run's text (`check_inputs` refuses a --corpus)
    rows, kept = _kept_rows(tokenizer, run)
    pool = min(POOL_BATCHES, max(1, kept // run.batch_size))
    return pooled_batches(rows.shuffle(4096, seed=run.seed).repeat(), run.sequence_length,
                          run.batch_size, run.seed, pool)


def translation_rows(tokenizer, run):
    """The rows (`_rows`, unpadded) of the pairs that fit run.sequence_length, in the pair
    file's order (the prepared data's with --data)."""
    return _kept_rows(tokenizer, run)[0]


def _kept_rows(tokenizer, run):
    """(`translation_rows`, how many pairs fit; of the sampled pairs if the file is larger)."""
    source, target, path, _ = _inputs(run)
    words = target_vocabulary(run, tokenizer)
    target_tokenizer = word_tokenizer(words[len(TARGET_SPECIALS):], TARGET_SPECIALS, target)
    length = run.sequence_length
    data = prepared_ids.data_of(run)
    pairs = (xlm_recipe.pair_ids(path, tokenizer, target_tokenizer) if data is None
             else prepared_ids.pairs(data, f"{source}-{target}"))

    # preprocess.py keeps a pair whose sides have at most -seq_length words each (50; 75
    # for WMT'17 in the README); the decoder's rows are one longer, for <s> or </s>.
    def fits(s, t):
        positions = row_length(tf.size(s), tf.size(t))
        return (positions > 0) & (positions <= length)

    kept, total, seen = _kept_pairs(run, data, pairs, source, target)
    if not kept:
        raise ConfigError(f"No {source}-{target} pair of {path} fits --sequence-length "
                          f"{length} (sides of 1-{length} words each): raise it.")
    say(f"CoVe stage translation {source}->{target} (McCann et al. 2017, Sec. 3: the MT-LSTM "
        f"encoder over fixed {source} word vectors, an attentional LSTM decoder as deep as "
        f"the encoder, teacher forcing): {kept} of {total} pairs of {path}"
        + (f" (a sample of its {seen})" if seen > total else "")
        + f" fit {length} words a side; "
        f"vocabularies of {tokenizer.vocabulary_size()} {source} and {len(words)} {target} "
        "words (salesforce/cove OpenNMT-py preprocess.py @9a0d90b: the most frequent words "
        "of each side).")
    bos, eos = (TARGET_SPECIALS.index(t) for t in ("<s>", "</s>"))
    return pairs.filter(fits).map(lambda s, t: _rows(s, t, bos, eos)), kept


def _kept_pairs(run, data, pairs, source, target):
    """(pairs whose rows fit run.sequence_length, pairs counted, pairs in the file)."""
    length = run.sequence_length
    if data is None:
        # Counted on the sampled pairs (every pair of a file of at most 1M), split as the
        # batches' tokenizers split them: no pass of its own over the file.
        (_, source_words), (_, target_words) = _pair_words(*_file_key(run), (source, target))
        seen = _sampled_pairs(run).seen
    else:
        part = f"{source}-{target}"
        seen, kept = prepared_ids.pair_counts(data, part, length)
        if kept is not None:  # as prepare counted them: nothing read here
            return kept, seen, seen
        say(f"{data}'s manifest has no row lengths of its {part} pairs (prepared by an "
            "earlier keras_ctx): counting the pairs that fit in a pass over their ids "
            "(prepare it again to skip it).")
        sizes = np.array([(len(s), len(t)) for s, t in pairs.as_numpy_iterator()],
                         np.int64).reshape(-1, 2)
        source_words, target_words = sizes[:, 0], sizes[:, 1]
    rows = np.asarray(row_length(source_words, target_words))
    return int(np.sum((rows > 0) & (rows <= length))), len(rows), seen


cove_dataset.check_inputs = check_inputs  # `keras-ctx pretrain --parallel/--glove`
cove_dataset.tokenizer_text = tokenizer_text  # the tokenizer reads the pairs' source side
cove_dataset.prepared_parts = prepared_parts  # `keras-ctx prepare`'s pair ids
cove_dataset.needs = NEEDS  # what a run cannot go without (the tests' generic runs skip it)


"""Parallel corpora for translation (CoVe's MT-LSTM): read, look up, pad, in tf.data.

    ds = parallel_text_dataset("train.en", "train.de")        # or ("train.tsv")
    src_vocab = build_vocabulary(lines("train.en"))
    ds = ds.batch(64, drop_remainder=True).map(
        lambda s, t: translation_inputs(s, t, src_vocab, tgt_vocab, 50, 50))

Tokens are whitespace-separated (tokenise/lowercase the text beforehand, as
for GloVe). Ids: 0 is padding; target vocabularies start with
`<pad>, <s>, </s>, <unk>`; source vocabularies with `<pad>, <unk>`. A sentence
longer than its length limit raises an error (nothing is silently cut):
filter long pairs with `filter_long_pairs` first.
"""

import collections

from keras_ctx.common.optional import tensorflow as tf

SOURCE_SPECIALS = ("<pad>", "<unk>")
TARGET_SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


def parallel_text_dataset(source_path, target_path=None):
    """A dataset of (source, target) string pairs.

    Two aligned text files (one sentence per line, same line count), or one
    TSV file (`source<TAB>target` per line) when `target_path` is None.
    """
    if target_path is None:
        def split(line):
            parts = tf.strings.split(line, "\t")
            tf.debugging.assert_equal(
                tf.size(parts), 2,
                message=f"every line of {source_path} must be 'source<TAB>target'",
            )
            return parts[0], parts[1]

        return tf.data.TextLineDataset(source_path).map(split)
    source = tf.data.TextLineDataset(source_path)
    target = tf.data.TextLineDataset(target_path)
    # Unequal lengths would silently drop pairs with zip: check first.
    counts = [sum(1 for _ in open(p, encoding="utf-8")) for p in (source_path, target_path)]
    if counts[0] != counts[1]:
        raise ValueError(
            f"{source_path} has {counts[0]} lines but {target_path} has {counts[1]}; "
            "parallel files must be aligned line by line."
        )
    return tf.data.Dataset.zip((source, target))


def build_vocabulary(texts, specials=SOURCE_SPECIALS, max_size=None, min_count=1):
    """`specials` + words of `texts` (iterable of str) by decreasing frequency."""
    counts = collections.Counter(w for text in texts for w in str(text).split())
    words = [w for w, c in counts.most_common() if c >= min_count and w not in specials]
    if max_size is not None:
        words = words[: max(0, max_size - len(specials))]
    return list(specials) + words


def _lookup(vocabulary, unknown):
    if unknown not in vocabulary:
        raise ValueError(f"the vocabulary must contain {unknown!r}; see build_vocabulary.")
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(vocabulary)), tf.range(len(vocabulary), dtype=tf.int32)
        ),
        default_value=vocabulary.index(unknown),
    )


def _pad(tokens, length, name):
    tf.debugging.assert_less_equal(
        tokens.row_lengths(), tf.cast(length, tokens.row_lengths().dtype),
        message=f"a {name} sentence is longer than {length} tokens; raise the length "
        "or drop long pairs with filter_long_pairs",
    )
    return tokens.to_tensor(default_value=0, shape=[None, length])


def filter_long_pairs(dataset, source_length, target_length):
    """Drops (source, target) string pairs that do not fit (target gets </s>)."""
    def fits(s, t):
        return tf.logical_and(
            tf.size(tf.strings.split(s)) <= source_length,
            tf.size(tf.strings.split(t)) + 1 <= target_length,
        )

    return dataset.filter(fits)


def translation_inputs(
    source, target, source_vocabulary, target_vocabulary, source_length, target_length
):
    """Batched (source, target) strings -> (inputs, labels) for teacher forcing.

    Returns ({"encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
    "decoder_padding_mask"}, labels): decoder inputs are `<s> y_1 .. y_n` and
    labels `y_1 .. y_n </s>`, both padded to `target_length` (0 = padding).
    """
    source_table = _lookup(source_vocabulary, "<unk>")
    target_table = _lookup(target_vocabulary, "<unk>")
    src = tf.strings.split(source)
    tgt = tf.strings.split(target)
    src_ids = _pad(source_table.lookup(src), source_length, "source")
    tgt_ids = target_table.lookup(tgt)
    batch = tgt_ids.nrows()
    bos = tf.fill([batch, 1], target_vocabulary.index("<s>"))
    eos = tf.fill([batch, 1], target_vocabulary.index("</s>"))
    decoder = _pad(tf.concat([bos, tgt_ids], 1), target_length, "target")
    labels = _pad(tf.concat([tgt_ids, eos], 1), target_length, "target")
    inputs = {
        "encoder_token_ids": src_ids,
        "encoder_padding_mask": src_ids != 0,
        "decoder_token_ids": decoder,
        "decoder_padding_mask": labels != 0,
    }
    return inputs, labels

"""Segment pairs (NSP, SOP) and packing (FULL-SENTENCES, DOC-SENTENCES) over documents.

Input: a tf.data.Dataset of tokenized documents, each a RaggedTensor
[num_sentences, (tokens)] of int ids (`keras_ctx.data.tokenizers.tokenize_documents`
makes them). Output: a tf.data.Dataset of fixed-length examples, dicts of int32
`token_ids`, `segment_ids`, `padding_mask` (each of shape (sequence_length,))
plus the label of the objective; batch with `drop_remainder=True` and mask.

Pair sampling needs random access to other documents (a NotNext segment comes
from a random *other* document), so like BERT's create_pretraining_data.py
the documents are read into memory once, when the function is called; the
examples are then produced by a seeded generator feeding
`tf.data.Dataset.from_generator`, a new sampling each epoch
(`reshuffle_each_iteration`-like) unless `static=True`. Pairs (NSP, SOP) of
an epoch are all sampled first, `duplicate` passes over the documents, and
shuffled together before the first is yielded, as BERT's script writes its
instances (packing stays lazy: its text is contiguous by design).

Conventions:
  next_sentence_labels: 0 = IsNext (B follows A), 1 = NotNext (B from another
      document) (BERT's `is_random_next`): 1/2 each in chunks of several
      sentences, always NotNext in a chunk of one (`document_pairs`).
  sentence_order_labels: 0 = in order, 1 = swapped (ALBERT, Lan et al. 2020),
      or, in a chunk of one sentence, B from another document as BERT's.
"""

import functools

import numpy as np
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.validation import one_of, positive_int


def load_documents(tokenized_documents, min_sentences=1):
    """The documents as lists of int32 numpy sentences; empty sentences dropped."""
    docs = []
    for doc in tokenized_documents.as_numpy_iterator() if isinstance(
            tokenized_documents, tf.data.Dataset) else tokenized_documents:
        if hasattr(doc, "to_list"):
            doc = doc.to_list()
        sentences = [np.asarray(s, np.int32) for s in doc if len(s) > 0]
        if len(sentences) >= min_sentences:
            docs.append(sentences)
    if not docs:
        raise ValueError(
            "The corpus has no usable document (each needs at least "
            f"{min_sentences} non-empty tokenized sentence(s)). Check the source, the "
            "document separators (blank lines) and the tokenizer."
        )
    return docs


def _check_length(sequence_length, extra):
    positive_int("sequence_length", sequence_length, least=extra + 2,
                 why="room for the special tokens")


def _pad(tokens, segments, sequence_length, pad_id):
    n = len(tokens)
    if n > sequence_length:  # a bug, never data: every path below budgets exactly
        raise AssertionError(f"{n} tokens > sequence_length {sequence_length}")
    token_ids = np.full(sequence_length, pad_id, np.int32)
    token_ids[:n] = tokens
    segment_ids = np.zeros(sequence_length, np.int32)
    segment_ids[:n] = segments
    padding_mask = np.zeros(sequence_length, np.int32)
    padding_mask[:n] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _pair_example(a, b, sequence_length, cls_id, sep_id, pad_id):
    tokens = np.concatenate([[cls_id], a, [sep_id], b, [sep_id]])
    segments = np.concatenate([np.zeros(len(a) + 2, np.int32), np.ones(len(b) + 1, np.int32)])
    return _pad(tokens, segments, sequence_length, pad_id)


def truncate_pair(a, b, max_tokens, rng):
    """BERT's truncate_seq_pair: drop from the front or back (at random) of the longer."""
    # Bounds instead of list deletions (the same draws, in the same order).
    bounds = [[0, len(a)], [0, len(b)]]
    while bounds[0][1] - bounds[0][0] + bounds[1][1] - bounds[1][0] > max_tokens:
        longer = bounds[0] if bounds[0][1] - bounds[0][0] > bounds[1][1] - bounds[1][0] \
            else bounds[1]
        if rng.random() < 0.5:
            longer[0] += 1
        else:
            longer[1] -= 1
    (a_start, a_end), (b_start, b_end) = bounds
    return (np.asarray(a[a_start:a_end], np.int32), np.asarray(b[b_start:b_end], np.int32))


def target_length(max_tokens, short_seq_prob, rng):
    """The target length of one pass over a document (create_pretraining_data.py).

    google-research/bert create_pretraining_data.py (eedf571) draws it once per
    document pass: max_tokens, or with probability short_seq_prob (0.1) a
    shorter randint(2, max_tokens), to train on some short sequences.
    """
    if rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1))
    return max_tokens


def random_segment(docs, exclude, target, rng):
    """A random B as BERT's script draws it: whole sentences of another document.

    Up to 10 draws of a document other than `exclude` (the last draw is kept,
    as the script does), a random first sentence, then sentences until
    `target` tokens or the document's end (at least one sentence).
    """
    for _ in range(10):
        index = int(rng.integers(len(docs)))
        if index != exclude:
            break
    doc = docs[index]
    out, length = [], 0
    for sentence in doc[int(rng.integers(len(doc))):]:
        out.append(sentence)
        length += len(sentence)
        if length >= target:
            break
    return np.concatenate(out)


def document_pairs(docs, index, max_tokens, short_seq_prob, rng, negative="random"):
    """The (a, b, label) instances of one pass over `docs[index]`, as BERT's / ALBERT's script.

    google-research/bert create_pretraining_data.py (eedf571)
    create_instances_from_document: sentences are gathered into a chunk until
    it reaches the pass' `target_length` or the document ends; A is its first
    a_end sentences (a_end uniform in 1..len - 1), B the rest. Never a split
    inside a sentence ("would make the next sentence prediction task too
    easy"). A chunk of one sentence has no B of its own: A is the whole
    sentence and B a `random_segment` (label 1).

    negative="random" (BERT's NSP): otherwise, with probability 1/2, B is a
    `random_segment` too (label 1) and the chunk's unused sentences are put
    back (the script's `i -= num_unused_segments`): the next chunk starts
    with them. negative="swap" (ALBERT's SOP, google-research/albert
    create_pretraining_data.py, random_next_sentence=False): with
    probability 1/2 A and B are swapped (label 1). Label 0: B follows A.
    Both then `truncate_pair` to `max_tokens`.
    """
    doc = docs[index]
    target = target_length(max_tokens, short_seq_prob, rng)
    chunk, length, i = [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i])
        if i == len(doc) - 1 or length >= target:
            a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            a = np.concatenate(chunk[:a_end])
            if len(chunk) == 1 or (negative == "random" and rng.random() < 0.5):
                b, label = random_segment(docs, index, target - len(a), rng), 1
                i -= len(chunk) - a_end  # put back the sentences B did not use
            else:
                b, label = np.concatenate(chunk[a_end:]), 0
                if negative == "swap" and rng.random() < 0.5:
                    a, b, label = b, a, 1
            yield (*truncate_pair(a, b, max_tokens, rng), label)
            chunk, length = [], 0
        i += 1


def _example_signature(sequence_length, label):
    spec = tf.TensorSpec((sequence_length,), tf.int32)
    signature = {"token_ids": spec, "segment_ids": spec, "padding_mask": spec}
    if label:
        signature[label] = tf.TensorSpec((), tf.int32)
    return signature


def _dataset(generate, sequence_length, label, seed, static):
    epoch = [0]

    def generator():
        # A new sampling every epoch unless static.
        rng = np.random.default_rng([seed, 0 if static else epoch[0]])
        epoch[0] += 1
        yield from generate(rng)

    return tf.data.Dataset.from_generator(
        generator, output_signature=_example_signature(sequence_length, label))


def _check_duplicate(duplicate):
    positive_int("duplicate", duplicate)


def _shuffled_pairs(instances, duplicate, sequence_length, cls_id, sep_id, pad_id, label):
    """`generate(rng)`: `duplicate` passes of `instances(rng)`, all shuffled together.

    BERT's create_training_instances (google-research/bert, create_pretraining_data.py;
    ALBERT's is the same): `dupe_factor` passes over every document, each
    sampling its own pairs, then `rng.shuffle(instances)` over all of them,
    so neither documents nor a document's copies come out together.
    """
    def generate(rng):
        pool = [instance for _ in range(duplicate) for instance in instances(rng)]
        for i in rng.permutation(len(pool)):
            a, b, value = pool[i]
            example = _pair_example(a, b, sequence_length, cls_id, sep_id, pad_id)
            example[label] = np.int32(value)
            yield example

    return generate


def nsp_instances(docs, max_tokens, short_seq_prob, rng):
    """BERT's NSP instances (a, b, label) of one pass over `docs` (lists of int32 sentences)."""
    for index in rng.permutation(len(docs)):
        yield from document_pairs(docs, index, max_tokens, short_seq_prob, rng, "random")


def sop_instances(docs, max_tokens, short_seq_prob, rng):
    """ALBERT's SOP instances (a, b, label) of one pass over `docs`."""
    for index in rng.permutation(len(docs)):
        yield from document_pairs(docs, index, max_tokens, short_seq_prob, rng, "swap")


def pair_examples(kind, docs, sequence_length, cls_id, sep_id, pad_id=0, short_seq_prob=0.1,
                  duplicate=1, rng=None):
    """One epoch of NSP (`kind="nsp"`) or SOP (`"sop"`) examples of `docs`, as `nsp_pairs`.

    What `nsp_pairs` / `sop_pairs` yield in an epoch drawn with `rng`; used
    directly by `keras_ctx.data.prepare` on each shard's documents.
    """
    _check_length(sequence_length, 3)
    _check_duplicate(duplicate)
    instances, label = _PAIRS[kind]
    generate = _shuffled_pairs(
        functools.partial(instances, docs, sequence_length - 3, short_seq_prob), duplicate,
        sequence_length, cls_id, sep_id, pad_id, label)
    return generate(rng)


def nsp_pairs(tokenized_documents, sequence_length, cls_id, sep_id, pad_id=0,
              short_seq_prob=0.1, seed=0, static=False, duplicate=1):
    """BERT next-sentence-prediction examples `[CLS] A [SEP] B [SEP]`.

    B is the true continuation of A (label 0) or, with probability 1/2, text
    from a random other document (label 1), as Devlin et al. 2019 (Sec. 3.1)
    and their create_pretraining_data.py (`document_pairs`: a chunk of one
    sentence is always NotNext; the sentences a random B leaves unused are
    put back). Pairs longer than sequence_length - 3 are truncated as BERT
    does (`truncate_pair`), the only truncation.
    `duplicate` passes over the documents (BERT's dupe_factor) make the
    instances of an epoch, shuffled together (`_shuffled_pairs`); with
    `static=True` the same instances in the same order every epoch.
    """
    _check_length(sequence_length, 3)
    _check_duplicate(duplicate)
    docs = load_documents(tokenized_documents)
    if len(docs) < 2:
        raise ValueError("NSP needs at least two documents (NotNext text comes from another).")
    instances = functools.partial(nsp_instances, docs, sequence_length - 3, short_seq_prob)
    generate = _shuffled_pairs(instances, duplicate, sequence_length, cls_id, sep_id, pad_id,
                               "next_sentence_labels")
    return _dataset(generate, sequence_length, "next_sentence_labels", seed, static)


def sop_pairs(tokenized_documents, sequence_length, cls_id, sep_id, pad_id=0,
              short_seq_prob=0.1, seed=0, static=False, duplicate=1):
    """ALBERT sentence-order-prediction examples (Lan et al. 2020, Sec. 3.1).

    Positive (label 0): two consecutive segments A, B of one document in order;
    negative (label 1), probability 1/2: the same two segments swapped; a
    chunk of one sentence gets a B from another document, label 1, as the
    released create_pretraining_data.py (`document_pairs`).
    Instances are shuffled across documents and `duplicate` passes as `nsp_pairs`.
    """
    _check_length(sequence_length, 3)
    _check_duplicate(duplicate)
    docs = load_documents(tokenized_documents)
    instances = functools.partial(sop_instances, docs, sequence_length - 3, short_seq_prob)
    generate = _shuffled_pairs(instances, duplicate, sequence_length, cls_id, sep_id, pad_id,
                               "sentence_order_labels")
    return _dataset(generate, sequence_length, "sentence_order_labels", seed, static)


_PAIRS = {"nsp": (nsp_instances, "next_sentence_labels"),
          "sop": (sop_instances, "sentence_order_labels")}
PAIR_LABELS = {kind: label for kind, (_, label) in _PAIRS.items()}

PACKING = ("full_sentences", "doc_sentences", "two_segments")


def pack_sentences(tokenized_documents, sequence_length, cls_id, sep_id, pad_id=0,
                   mode="full_sentences", document_separator_id=None, shuffle=True,
                   seed=0, static=False):
    """RoBERTa's input packing (Liu et al. 2019, Sec. 4.2), one segment, no NSP.

    FULL-SENTENCES: full sentences sampled contiguously, crossing document
    boundaries (with `document_separator_id`, default sep_id, between
    documents), up to sequence_length tokens with [CLS] ... [SEP].
    DOC-SENTENCES: the same but never crossing a document boundary.
    A sentence longer than the budget is split across examples (not dropped).
    "two_segments": ELECTRA's two-segment examples (`two_segment_examples`).
    `shuffle` reorders the documents each epoch (seeded).
    """
    _check_length(sequence_length, 2)
    one_of("mode", mode, PACKING)
    docs = load_documents(tokenized_documents)

    def generate(rng):
        return packed_examples(docs, sequence_length, cls_id, sep_id, pad_id, mode,
                               document_separator_id, shuffle, rng)

    return _dataset(generate, sequence_length, None, seed, static)


def packed_examples(docs, sequence_length, cls_id, sep_id, pad_id=0, mode="full_sentences",
                    document_separator_id=None, shuffle=True, rng=None):
    """One epoch of `pack_sentences`' examples of `docs` (lists of int32 sentences)."""
    _check_length(sequence_length, 2)
    if mode == "two_segments":
        yield from two_segment_examples(docs, sequence_length, cls_id, sep_id, pad_id,
                                        shuffle, rng)
        return
    budget = sequence_length - 2
    doc_sep = sep_id if document_separator_id is None else document_separator_id

    def emit(tokens):
        tokens = np.concatenate([[cls_id], tokens, [sep_id]]).astype(np.int32)
        return _pad(tokens, np.zeros(len(tokens), np.int32), sequence_length, pad_id)

    order = rng.permutation(len(docs)) if shuffle else range(len(docs))
    buffer = []
    for doc_number, index in enumerate(order):
        if mode == "doc_sentences" and buffer:
            yield emit(np.concatenate(buffer))
            buffer = []
        elif mode == "full_sentences" and doc_number > 0 and buffer:
            if sum(map(len, buffer)) + 1 > budget:
                yield emit(np.concatenate(buffer))
                buffer = []
            else:
                buffer.append(np.asarray([doc_sep], np.int32))
        for sentence in docs[index]:
            pieces = [sentence[i:i + budget] for i in range(0, len(sentence), budget)]
            for piece in pieces:
                if buffer and sum(map(len, buffer)) + len(piece) > budget:
                    yield emit(np.concatenate(buffer))
                    buffer = []
                buffer.append(piece)
    if buffer:
        yield emit(np.concatenate(buffer))


def two_segment_examples(docs, sequence_length, cls_id, sep_id, pad_id=0, shuffle=True,
                         rng=None):
    """One epoch of ELECTRA's examples: [CLS] A [SEP] (B [SEP]), no label.

    google-research/electra build_pretraining_dataset.py (ExampleBuilder):
    a document's sentences gather until they reach the target length (T, or
    with probability 0.05 a randint(5, T) drawn after each example) or the
    document ends. With probability 0.1 the example is one segment; else
    sentences fill A up to (target - 3) // 2 tokens, the one that would pass
    it going to A with probability 1/2, the rest to B. A is cut to T - 2
    tokens, B to what is left.
    """
    order = rng.permutation(len(docs)) if shuffle else range(len(docs))
    target = sequence_length
    for index in order:
        sentences, length = [], 0
        for number, sentence in enumerate(docs[index]):
            sentences.append(sentence)
            length += len(sentence)
            if length >= target or number == len(docs[index]) - 1:
                yield _two_segment_example(sentences, target, sequence_length, cls_id, sep_id,
                                       pad_id, rng)
                sentences, length = [], 0
                target = (int(rng.integers(5, sequence_length + 1)) if rng.random() < 0.05
                          else sequence_length)


def _two_segment_example(sentences, target, sequence_length, cls_id, sep_id, pad_id, rng):
    first_target = 100_000 if rng.random() < 0.1 else (target - 3) // 2
    first, second, first_length = [], [], 0
    for sentence in sentences:
        # A takes it if A is empty or it fits; the one that would pass the target
        # goes to A with probability 1/2 (the coin drawn only then, as the script).
        if (not first or first_length + len(sentence) < first_target or (
                not second and first_length < first_target and rng.random() < 0.5)):
            first.append(sentence)
            first_length += len(sentence)
        else:
            second.append(sentence)
    a = np.concatenate(first)[:sequence_length - 2]
    b = np.concatenate(second)[:max(0, sequence_length - len(a) - 3)] if second else []
    if not len(b):
        tokens = np.concatenate([[cls_id], a, [sep_id]]).astype(np.int32)
        return _pad(tokens, np.zeros(len(tokens), np.int32), sequence_length, pad_id)
    return _pair_example(a, b, sequence_length, cls_id, sep_id, pad_id)

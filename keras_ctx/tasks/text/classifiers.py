"""Text classification: a label per text or text pair, a label per word."""

import keras
import numpy as np
from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.preprocessing import piece_spans
from keras_ctx.tasks.heads import SequenceClassifier, checked_class_ids
from keras_ctx.tasks.heads import TokenClassifier as IdTokenClassifier
from keras_ctx.tasks.text.task import (TextTask, deprecated_names, family_of, registered,
                                       strings)


@registered
class TextClassifier(TextTask):
    """Classifies texts or pairs of texts (GLUE-style) from strings.

    Args:
        backbone: a keras_ctx backbone of a registered family.
        tokenizer: the backbone's tokenizer.
        num_classes: number of labels.
        sequence_length: the fixed input length (special tokens included).
        family: the family name; default: the backbone's (`families.of_backbone`).
        truncation: "error" or "longest_first" (`TextPreprocessor`).
        **kwargs: `SequenceClassifier`'s (pooling, dropout, ...); by default
            it pools as the family's registry entry says.

    `x` is a list of texts, or a list of (text, text_pair) pairs, or a
    batched tf.data.Dataset of (text, label) or ((text, text_pair), label).

    Example:
    >>> classifier = TextClassifier(backbone, tokenizer, num_classes=3)
    >>> classifier.compile(keras.optimizers.AdamW(5e-5))
    >>> classifier.fit([("A man sleeps.", "A person rests.")], [0])
    """

    def __init__(self, backbone, tokenizer, num_classes, sequence_length=128, family=None,
                 truncation="error", **kwargs):
        family = family_of(backbone, family)
        backbone.family = family.name
        model = SequenceClassifier(backbone, num_classes=num_classes, **kwargs)
        super().__init__(model, tokenizer, family, sequence_length, truncation)

    def compile(self, optimizer="adam", loss=None, metrics=("accuracy",), **kwargs):
        """`keras.Model.compile` with sparse cross-entropy on the logits by default."""
        loss = loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return self.model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics),
                                  **kwargs)

    def _dataset(self, x, y=None, batch_size=32):
        checked_class_ids(self.model, y)
        return super()._dataset(x, y, batch_size)

    def _text_columns(self, x):
        if isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], str):
            return tuple(np.asarray(strings(c), dtype=object).astype(str) for c in x)
        x = list(x)
        if x and isinstance(x[0], (tuple, list)):  # [(a, b), ...] pairs
            if any(len(pair) != 2 for pair in x):
                raise ValueError("A pair of texts is (text, text_pair); got a row of "
                                 f"{len(next(p for p in x if len(p) != 2))} items.")
            return tuple(np.asarray(strings(c), dtype=object).astype(str)
                         for c in zip(*x))
        return np.asarray(strings(x), dtype=object).astype(str)

    def _inputs(self, text):
        if isinstance(text, (tuple, list)):
            inputs = self.preprocessor(text[0], text[1])
        else:
            inputs = self.preprocessor(text)
        return self._backbone_inputs(inputs)


@registered
class WordClassifier(TextTask):
    """Words in, one label per word out (NER, POS), first-piece alignment.

    The words of an example are joined by single spaces and tokenized as one
    text (never word by word: byte-level BPE marks a word's leading space); a
    word's label trains its first piece, the other pieces and the special
    tokens are weighted 0, and a word is predicted from its first piece
    (Devlin et al. 2019, Sec. 5.3).

    Args:
        backbone, tokenizer, sequence_length, family, truncation: as `TextClassifier`.
        labels: the label names (predictions are these), or an int count
            (predictions are ids).
        dropout: before the per-token classifier.

    `x` is a list of examples, each a list of words; `y` the same shape of
    label names (or ids). `predict` returns a list of label lists.
    """

    def __init__(self, backbone, tokenizer, labels, sequence_length=128, family=None,
                 truncation="error", dropout=0.1):
        self.labels = list(range(labels)) if isinstance(labels, int) else list(labels)
        model = IdTokenClassifier(backbone, num_labels=len(self.labels), dropout=dropout)
        super().__init__(model, tokenizer, family, sequence_length, truncation)

    def _settings(self):
        return {"labels": self.labels}

    def _load_settings(self, settings):
        self.labels = settings["labels"]

    def compile(self, optimizer="adam", loss=None, metrics=(), **kwargs):
        loss = loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return self.model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics),
                                  **kwargs)

    def _first_pieces(self, words):
        """The row position of each word's first piece (None: cut by truncation)."""
        if not words or any(not isinstance(w, str) or not w or w != w.strip() or
                            any(c.isspace() for c in w) for w in words):
            raise ValueError(f"Each example is a non-empty list of words without "
                             f"spaces, got {words!r}.")
        text = " ".join(words)
        starts, cursor = [], 0
        for word in words:
            starts.append(cursor)
            cursor += len(word) + 1
        _, spans = piece_spans(self.tokenizer, text)
        offset = len(self.preprocessor.start_ids)
        room = self.sequence_length - offset - len(self.preprocessor.end_ids)
        first = [None] * len(words)
        for i, (start, end) in enumerate(spans):
            word = int(np.searchsorted(starts, start, side="right")) - 1
            if end > start and first[word] is None and 0 <= word:
                first[word] = offset + i if i < room else None
        return text, first

    def _label_ids(self, tags):
        index = {label: i for i, label in enumerate(self.labels)}
        missing = [t for t in tags if t not in index]
        if missing:
            raise ValueError(f"Unknown label {missing[0]!r}; the labels are {self.labels}.")
        return [index[t] for t in tags]

    def _examples(self, x, y=None):
        texts, rows, weights = [], [], []
        if y is not None and len(y) != len(x):
            raise ValueError(f"{len(x)} examples but {len(y)} label lists.")
        for n, words in enumerate(x):
            text, first = self._first_pieces(list(words))
            texts.append(text)
            labels = np.zeros(self.sequence_length, "int32")
            weight = np.zeros(self.sequence_length, "float32")
            if y is not None:
                tags = list(y[n])
                if len(tags) != len(first):
                    raise ValueError(f"Example {n} has {len(first)} words but {len(tags)} "
                                     "labels.")
                for position, label in zip(first, self._label_ids(tags)):
                    if position is not None:
                        labels[position], weight[position] = label, 1.0
            rows.append(labels)
            weights.append(weight)
        return texts, np.array(rows), np.array(weights)

    def _dataset(self, x, y=None, batch_size=32):
        if isinstance(x, tf.data.Dataset):
            return x.map(self._aligned_batch)
        texts, labels, weights = self._examples(x, y)
        texts = np.asarray(texts, dtype=object).astype(str)
        columns = texts if y is None else (texts, labels, weights)
        return tf.data.Dataset.from_tensor_slices(columns).batch(batch_size).map(
            lambda text, *rest: (self._inputs(text),) + rest)

    def _aligned_batch(self, words, tags=None):
        """A dataset batch of words (and tags), ragged (batch, words), aligned to pieces.

        The alignment is Python (`piece_spans`), run per batch in `tf.py_function`.
        """
        if not isinstance(words, tf.RaggedTensor) or words.dtype != tf.string:
            raise TypeError("A WordClassifier dataset yields batches of words as a ragged "
                            "(batch, words) tf.string tensor (and the same shape of labels);"
                            " e.g. tf.data.Dataset.from_tensor_slices(tf.ragged.constant("
                            "words)).batch(32).")

        def align(values, splits, *tag_parts):
            rows = tf.RaggedTensor.from_row_splits(values, splits).to_list()
            examples = [[w.decode("utf-8") for w in row] for row in rows]
            labels = None
            if tag_parts:
                labels = tf.RaggedTensor.from_row_splits(*tag_parts).to_list()
                labels = [[t.decode("utf-8") if isinstance(t, bytes) else t for t in row]
                          for row in labels]
            texts, label_ids, weights = self._examples(examples, labels)
            return (np.asarray(texts, dtype=object).astype(bytes), label_ids, weights)

        parts = [words.flat_values, words.row_splits]
        if tags is not None:
            parts += [tags.flat_values, tags.row_splits]
        texts, labels, weights = tf.py_function(align, parts,
                                                [tf.string, tf.int32, tf.float32])
        texts.set_shape([None])
        labels.set_shape([None, self.sequence_length])
        weights.set_shape([None, self.sequence_length])
        inputs = self._inputs(texts)
        return (inputs,) if tags is None else (inputs, labels, weights)

    def predict(self, x, batch_size=32, **kwargs):
        """A label list per example, one label per word (None: a word cut off).

        `x`: lists of words, or a batched tf.data.Dataset of ragged word batches
        (read one batch at a time).
        """
        batch_size = validation.positive_int("batch_size", batch_size)
        kwargs.setdefault("verbose", 0)
        if isinstance(x, tf.data.Dataset):
            out = []
            for words in x:
                words = words[0] if isinstance(words, tuple) else words
                out += self.predict([[w.decode("utf-8") for w in row]
                                     for row in words.to_list()], batch_size, **kwargs)
            return out
        logits = self.model.predict(self._dataset(x, None, batch_size), **kwargs)
        out = []
        for row, words in zip(logits, x):
            _, first = self._first_pieces(list(words))
            out.append([None if p is None else self.labels[int(np.argmax(row[p]))]
                        for p in first])
        return out


__getattr__ = deprecated_names(globals())  # TokenClassifier, the old name

"""Text in, text out: task models with their preprocessor attached.

Each text task holds an id-level task model (`SequenceClassifier`,
`TokenClassifier`, `SpanQuestionAnswerer` of `keras_ctx.tasks.heads`, or a
backbone for embedding and generation) and the family's `TextPreprocessor`
(the one text-to-ids path), so `compile` / `fit` / `evaluate` / `predict` take
strings: Python lists or numpy arrays of str, or a batched `tf.data.Dataset`
of string tensors. What differs per family (framing, special tokens,
pooling, the tokens that stop generation) comes from `keras_ctx.families`.

    >>> classifier = TextClassifier.from_run("runs/bert", num_classes=2)
    >>> classifier.compile("adam")
    >>> classifier.fit(["a fine film", "dull"], [1, 0], epochs=3)
    >>> classifier.predict(["a fine film"])  # (1, 2) logits
    >>> classifier.save("my-classifier")     # model, tokenizer and settings
    >>> TextClassifier.load("my-classifier").predict(["a fine film"])

A saved task is one directory (written beside and renamed into place):

    DIR/task.json     which task, its family, sequence length and settings
    DIR/model.keras   the id-level Keras model (weights and config)
    DIR/tokenizer/    the tokenizer (as in a run directory)
"""

import os

import keras
import numpy as np
from keras_ctx.optional import tensorflow as tf

from keras_ctx import files, runs
from keras_ctx import registry as families  # lookups only: keras_ctx.families registers
from keras_ctx.preprocessing import TextPreprocessor, piece_spans, token_id

TASK_FILE = "task.json"
MODEL_FILE = "model.keras"

_TASKS = {}


def _registered(cls):
    _TASKS[cls.__name__] = cls
    return cls


def _family_of(backbone, family):
    if family is not None:
        return families.get(family) if isinstance(family, str) else family
    found = families.of_backbone(backbone)
    if found is None:
        raise ValueError(f"Cannot tell the family of {backbone.name!r}: pass "
                         "family=NAME (one of keras_ctx.families.names()).")
    return found


def _strings(texts, name="x"):
    """A list of str; a clear error for anything else."""
    if isinstance(texts, str):
        texts = [texts]
    texts = list(texts)
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise TypeError(f"`{name}` must hold strings, got {type(bad[0]).__name__} "
                        f"({bad[0]!r}); pass texts, not token ids.")
    return texts


class TextTask:
    """Base of the text tasks: a Keras model over ids plus the family's preprocessor.

    `compile`, `summary` and every other Keras model attribute are the id-level
    model's (`self.model`); `fit`, `evaluate` and `predict` turn strings into
    ids first. Subclasses say how one example of text becomes model inputs
    (`_inputs`) and targets (`_targets`).
    """

    def __init__(self, model, tokenizer, family, sequence_length, truncation="error",
                 backbone=None):
        self.model = model
        self.backbone = backbone if backbone is not None else getattr(model, "backbone", model)
        self.tokenizer = tokenizer
        self.family = _family_of(self.backbone, family)
        self.sequence_length = int(sequence_length)
        self.truncation = truncation
        self.preprocessor = TextPreprocessor(tokenizer, self.sequence_length, self.family,
                                             truncation=truncation)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_run(cls, run_dir, sequence_length=None, **kwargs):
        """The task over a run directory's backbone and tokenizer (a new head)."""
        info, backbone, tokenizer = runs.load_run(run_dir, need_tokenizer=True)
        backbone.family = info["family"]
        return cls(backbone, tokenizer, sequence_length=sequence_length
                   or info["sequence_length"], family=info["family"], **kwargs)

    @classmethod
    def from_preset(cls, handle, sequence_length=None, **kwargs):
        """The task from a handle: a saved task directory, or any model handle (new head).

        Args:
            handle: a directory `TextTask.save` wrote (loaded as saved), or
                what `keras_ctx.handles.resolve` reads: a run directory, a
                local checkpoint, `hf://ORG/NAME[@REVISION]`, `kaggle://...`.
                It must come with its tokenizer (a bare preset name has none).
            sequence_length: the task's input length (default: the run's or
                checkpoint's `sequence_length`).
            **kwargs: the task's other constructor arguments (num_classes,
                labels, ...).

        Returns:
            The task, its backbone holding the handle's weights.
        """
        name = os.fspath(handle)
        if os.path.isfile(os.path.join(name, TASK_FILE)):
            return cls.load(name)
        # keras_ctx.handles provides it (tasks sit below handles and convert).
        resolved = families.service("resolve")(name, need_tokenizer=True)
        if resolved.tokenizer is None:
            raise ValueError(f"{name!r} names an architecture without a tokenizer (a preset "
                             "name): text tasks need one; give a checkpoint or run "
                             "directory, hf://ORG/NAME or kaggle://..., or build the task "
                             "from a backbone and a tokenizer.")
        backbone = resolved.backbone
        backbone.family = resolved.info["family"]
        return cls(backbone, resolved.tokenizer,
                   sequence_length=sequence_length or resolved.info["sequence_length"],
                   family=resolved.info["family"], **kwargs)

    # ------------------------------------------------------------ Keras model API

    def __getattr__(self, name):
        # compile, summary, count_params, weights, optimizer, ... are the model's.
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def _settings(self):
        return {}

    def _inputs(self, text):
        """A batch of text (tensors) -> the model's input dict (in the graph)."""
        inputs = self.preprocessor(text)
        return {k: v for k, v in inputs.items() if k in self.backbone.input}

    def _targets(self, inputs, y):
        return y, None

    def _dataset(self, x, y=None, batch_size=32):
        if isinstance(x, tf.data.Dataset):
            dataset = x
        else:
            x = self._text_columns(x)
            dataset = tf.data.Dataset.from_tensor_slices(x if y is None else (x, y))
            dataset = dataset.batch(batch_size)

        def prepare(*element):
            text, rest = element[0], element[1:]
            if isinstance(text, tf.Tensor) and text.shape.rank == 0:
                raise ValueError("The dataset yields single texts: batch it first "
                                 "(dataset.batch(32)).")
            inputs = self._inputs(text)
            if not rest:
                return (inputs,)
            targets, weights = self._targets(inputs, rest[0])
            if len(rest) > 1:  # the user's sample weights
                weights = rest[1] if weights is None else weights * tf.cast(rest[1],
                                                                             weights.dtype)
            return (inputs, targets) if weights is None else (inputs, targets, weights)

        return dataset.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)

    def _text_columns(self, x):
        return np.asarray(_strings(x), dtype=object).astype(str)

    def fit(self, x, y=None, batch_size=32, validation_data=None, **kwargs):
        """Trains on texts (and labels, or a dataset of (text, label) batches)."""
        dataset = self._dataset(x, y, batch_size)
        if validation_data is not None:
            validation_data = self._dataset(*_split(validation_data), batch_size=batch_size)
        return self.model.fit(dataset, validation_data=validation_data, **kwargs)

    def evaluate(self, x, y=None, batch_size=32, **kwargs):
        return self.model.evaluate(self._dataset(x, y, batch_size), **kwargs)

    def predict(self, x, batch_size=32, **kwargs):
        """The id-level model's outputs for texts (numpy)."""
        kwargs.setdefault("verbose", 0)
        return self.model.predict(self._dataset(x, None, batch_size), **kwargs)

    # ------------------------------------------------------------ save / load

    def save(self, directory, overwrite=False):
        """Writes the model, its tokenizer and settings to `directory` (one directory).

        Nothing there is replaced unless `overwrite`; the directory appears
        whole (written beside, renamed into place).
        """
        info = {"task": type(self).__name__, "family": self.family.name,
                "sequence_length": self.sequence_length, "truncation": self.truncation,
                "settings": self._settings()}
        with files.replacing_directory(directory, overwrite=overwrite,
                                       flag="overwrite=True") as staging:
            self.model.save(os.path.join(staging, MODEL_FILE))
            runs.save_tokenizer(self.tokenizer, os.path.join(staging, runs.TOKENIZER_DIR))
            files.write_json(os.path.join(staging, TASK_FILE), info)
        return directory

    @classmethod
    def load(cls, directory):
        """The task `save` wrote to `directory`, ready to predict (or to compile again)."""
        import json

        import keras_ctx  # noqa: F401  (registers our classes for loading)

        path = os.path.join(directory, TASK_FILE)
        if not os.path.isfile(path):
            raise runs.RunDirectoryError(f"{directory} has no {TASK_FILE}: it is not a "
                                         "saved text task (TextTask.save writes one).")
        with open(path, encoding="utf-8") as handle:
            info = json.load(handle)
        task = _TASKS.get(info.get("task"))
        if task is None or not issubclass(task, cls):
            raise runs.RunDirectoryError(
                f"{directory} holds a {info.get('task')!r}, not a {cls.__name__}; load it "
                f"with keras_ctx.tasks.{info.get('task')}.load.")
        model = keras.saving.load_model(os.path.join(directory, MODEL_FILE))
        tokenizer = runs.load_tokenizer(os.path.join(directory, runs.TOKENIZER_DIR))
        if tokenizer is None:
            raise runs.RunDirectoryError(f"{directory} has no tokenizer/; save the task again.")
        return task._restore(model, tokenizer, info)

    @classmethod
    def _restore(cls, model, tokenizer, info):
        task = cls.__new__(cls)
        TextTask.__init__(task, model, tokenizer, info["family"], info["sequence_length"],
                          info["truncation"])
        task._load_settings(info["settings"])
        return task

    def _load_settings(self, settings):
        pass


def _split(data):
    """validation_data as (x, y) or (x,) for `_dataset`."""
    if isinstance(data, tf.data.Dataset):
        return (data,)
    return tuple(data)


# ---------------------------------------------------------------- classification


@_registered
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
        from keras_ctx.tasks.heads import SequenceClassifier

        family = _family_of(backbone, family)
        backbone.family = family.name
        model = SequenceClassifier(backbone, num_classes=num_classes, **kwargs)
        super().__init__(model, tokenizer, family, sequence_length, truncation)

    def compile(self, optimizer="adam", loss=None, metrics=("accuracy",), **kwargs):
        """`keras.Model.compile` with sparse cross-entropy on the logits by default."""
        loss = loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return self.model.compile(optimizer=optimizer, loss=loss, metrics=list(metrics),
                                  **kwargs)

    def _text_columns(self, x):
        if isinstance(x, tuple) and len(x) == 2 and not isinstance(x[0], str):
            return tuple(np.asarray(_strings(c), dtype=object).astype(str) for c in x)
        x = list(x)
        if x and isinstance(x[0], (tuple, list)):  # [(a, b), ...] pairs
            if any(len(pair) != 2 for pair in x):
                raise ValueError("A pair of texts is (text, text_pair); got a row of "
                                 f"{len(next(p for p in x if len(p) != 2))} items.")
            return tuple(np.asarray(_strings(c), dtype=object).astype(str)
                         for c in zip(*x))
        return np.asarray(_strings(x), dtype=object).astype(str)

    def _inputs(self, text):
        if isinstance(text, (tuple, list)):
            inputs = self.preprocessor(text[0], text[1])
        else:
            inputs = self.preprocessor(text)
        return {k: v for k, v in inputs.items() if k in self.backbone.input}


# ---------------------------------------------------------------- tagging


@_registered
class TokenClassifier(TextTask):
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
        from keras_ctx.tasks.heads import TokenClassifier as IdTokenClassifier

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
            raise TypeError("A TokenClassifier dataset yields batches of words as a ragged "
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


# ---------------------------------------------------------------- span QA


@_registered
class SpanQuestionAnswerer(TextTask):
    """Extractive QA: (question, context) in, the answer's text out.

    The question and the context are framed as a pair (question first, as
    BERT on SQuAD, Devlin et al. 2019, Sec. 4.2); the answer is the context
    span of highest start + end logit with start <= end and at most
    `max_answer_tokens` pieces.

    Args:
        backbone, tokenizer, sequence_length, family, truncation: as `TextClassifier`.
        max_answer_tokens: the longest answer considered (30 in BERT's SQuAD).

    Training data: `x` a list of (question, context), `y` a list of
    (answer_start character, answer text) in the context.
    """

    def __init__(self, backbone, tokenizer, sequence_length=384, family=None,
                 truncation="error", max_answer_tokens=30):
        from keras_ctx.tasks.heads import SpanQuestionAnswerer as IdSpanQuestionAnswerer

        self.max_answer_tokens = int(max_answer_tokens)
        model = IdSpanQuestionAnswerer(backbone)
        super().__init__(model, tokenizer, family, sequence_length, truncation)

    def _settings(self):
        return {"max_answer_tokens": self.max_answer_tokens}

    def _load_settings(self, settings):
        self.max_answer_tokens = settings["max_answer_tokens"]

    def compile(self, optimizer="adam", loss=None, **kwargs):
        def span_loss(positions, logits):
            ce = keras.losses.sparse_categorical_crossentropy
            return (ce(positions[:, 0], logits[..., 0], from_logits=True)
                    + ce(positions[:, 1], logits[..., 1], from_logits=True)) / 2.0

        return self.model.compile(optimizer=optimizer, loss=loss or span_loss, **kwargs)

    def _context_offset(self, question):
        pre = self.preprocessor
        question_pieces = len(np.asarray(pre._tokenize(tf.constant([question]))[0]))
        return len(pre.start_ids) + question_pieces + len(pre.middle_ids)

    def _pairs(self, x):
        x = list(x)
        if any(not isinstance(p, (tuple, list)) or len(p) != 2 for p in x):
            raise ValueError("Each example is a (question, context) pair of strings.")
        return [_strings(c, "question/context") for c in zip(*x)]

    def _positions(self, questions, contexts, answers):
        """(n, 2) int32 piece positions of each answer's first and last piece."""
        positions = []
        for question, context, (start, answer) in zip(questions, contexts, answers):
            start = int(start)
            if context[start:start + len(answer)] != answer:
                raise ValueError(f"The answer {answer!r} is not at character {start} of "
                                 f"the context {context[:60]!r}...")
            offset = self._context_offset(question)
            _, spans = piece_spans(self.tokenizer, context)
            covering = [i for i, (s, e) in enumerate(spans)
                        if s < start + len(answer) and e > start]
            positions.append([offset + covering[0], offset + covering[-1]])
        positions = np.array(positions, "int32").reshape(-1, 2)
        if positions.size and positions.max() >= self.sequence_length:
            raise ValueError("An answer lies beyond sequence_length; raise it.")
        return positions

    def _dataset_batches(self, dataset):
        """A batched dataset of (question, context) [, (answer_start, answer_text)]."""

        def prepare(pair, answer=None):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError("A SpanQuestionAnswerer dataset yields batches of "
                                "(question, context) strings, and optionally "
                                "(answer_start, answer_text).")
            inputs = self._inputs(pair)
            if answer is None:
                return (inputs,)

            def locate(questions, contexts, starts, texts):
                decode = lambda c: [t.decode("utf-8") for t in c.numpy()]  # noqa: E731
                return self._positions(decode(questions), decode(contexts),
                                       zip(starts.numpy(), decode(texts)))

            positions = tf.py_function(locate, [pair[0], pair[1], answer[0], answer[1]],
                                       tf.int32)
            positions.set_shape([None, 2])
            return inputs, positions

        return dataset.map(prepare)

    def _dataset(self, x, y=None, batch_size=32):
        if isinstance(x, tf.data.Dataset):
            return self._dataset_batches(x)
        questions, contexts = self._pairs(x)
        columns = (np.asarray(questions, object).astype(str),
                   np.asarray(contexts, object).astype(str))
        if y is not None:
            positions = self._positions(questions, contexts, y)
            return tf.data.Dataset.from_tensor_slices((columns, positions)).batch(
                batch_size).map(lambda text, p: (self._inputs(text), p))
        return tf.data.Dataset.from_tensor_slices((columns,)).batch(batch_size).map(
            lambda text: (self._inputs(text),))

    def _inputs(self, text):
        inputs = self.preprocessor(text[0], text[1])
        return {k: v for k, v in inputs.items() if k in self.backbone.input}

    def predict(self, x, batch_size=32, **kwargs):
        """The answer text for each (question, context).

        `x`: a list of pairs, or a batched tf.data.Dataset of (question,
        context) string batches (read one batch at a time).
        """
        kwargs.setdefault("verbose", 0)
        if isinstance(x, tf.data.Dataset):
            out = []
            for element in x:
                pair = element[0] if isinstance(element[0], tuple) else element
                questions, contexts = ([t.decode("utf-8") for t in c.numpy()] for c in pair)
                out += self.predict(list(zip(questions, contexts)), batch_size, **kwargs)
            return out
        x = list(x)
        logits = self.model.predict(self._dataset(x, None, batch_size), **kwargs)
        answers = []
        for row, (question, context) in zip(logits, x):
            offset = self._context_offset(question)
            _, spans = piece_spans(self.tokenizer, context)
            last = min(offset + len(spans), self.sequence_length) - 1
            start_logits, end_logits = row[:, 0], row[:, 1]
            best, best_span = -np.inf, (offset, offset)
            for s in range(offset, last + 1):
                for e in range(s, min(last, s + self.max_answer_tokens - 1) + 1):
                    score = start_logits[s] + end_logits[e]
                    if score > best:
                        best, best_span = score, (s, e)
            s, e = best_span
            answers.append(context[spans[s - offset][0]:spans[e - offset][1]])
        return answers


# ---------------------------------------------------------------- embedding


@keras.saving.register_keras_serializable(package="keras_ctx")
class L2Normalize(keras.layers.Layer):
    """x / ||x||_2 along the last axis (sentence-transformers' Normalize module)."""

    def call(self, x):
        x = keras.ops.cast(x, "float32")
        return x / keras.ops.maximum(keras.ops.norm(x, axis=-1, keepdims=True), 1e-12)


@_registered
class TextEmbedder(TextTask):
    """Texts -> sentence vectors: the mean over real tokens, then L2-normalized.

    This is all-MiniLM-L6-v2's published pooling (its sentence-transformers
    modules: Transformer, Pooling with pooling_mode_mean_tokens, Normalize):
    padding positions never count. Encoder-decoders pool the output the
    family's `word_vectors` names (the encoder's).

    Args:
        backbone, tokenizer, sequence_length, family, truncation: as `TextClassifier`.
        normalize: L2-normalize the mean (True as MiniLM; False: the raw mean).

    `predict(texts)` returns (batch, hidden) float32 vectors; with
    `normalize` their dot products are cosine similarities.
    """

    def __init__(self, backbone, tokenizer, sequence_length=256, family=None,
                 truncation="error", normalize=True):
        from keras_ctx.tasks.heads import Pool, _padding_mask
        from keras_ctx.models.backbone import without_absent_optional_inputs  # noqa: F401

        family = _family_of(backbone, family)
        inputs = {name: keras.Input(shape=t.shape[1:], dtype=t.dtype, name=name)
                  for name, t in backbone.input.items()}
        outputs = backbone(inputs)
        sequence = outputs[family.word_vectors]
        mask_name = ("encoder_padding_mask" if family.word_vectors.startswith("encoder")
                     else "padding_mask")
        vector = Pool("mean", name="mean_pool")(sequence, _padding_mask(inputs, sequence,
                                                                          mask_name))
        if normalize:
            vector = L2Normalize(name="normalize")(vector)
        self.normalize = normalize
        model = keras.Model(inputs, vector, name="text_embedder")
        super().__init__(model, tokenizer, family, sequence_length, truncation,
                         backbone=backbone)

    def _settings(self):
        return {"normalize": self.normalize}

    def _load_settings(self, settings):
        self.normalize = settings["normalize"]

    def _inputs(self, text):
        inputs = self.preprocessor(text)
        return {k: v for k, v in inputs.items() if k in self.backbone.input}


# ---------------------------------------------------------------- generation


def _token_ids(tokenizer, spellings):
    ids = [token_id(tokenizer, s) for s in spellings]
    return tuple(i for i in ids if i is not None)


class _Generator(TextTask):
    """Shared by CausalLM and Seq2SeqLM: stop tokens, detokenizing, streaming."""

    @classmethod
    def _restore(cls, model, tokenizer, info):
        task = super()._restore(model, tokenizer, info)
        task._setup_generation()
        return task

    def compile(self, optimizer="adam", loss=None, weighted_metrics=(), **kwargs):
        """`keras.Model.compile` with next-token cross-entropy on the logits by default."""
        loss = loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return self.model.compile(optimizer=optimizer, loss=loss,
                                  weighted_metrics=list(weighted_metrics), **kwargs)

    def _setup_generation(self):
        pre = self.preprocessor
        self.stop_ids = _token_ids(self.tokenizer, self.family.framing.stop)
        # Framing tokens never show in the text returned.
        self._special = set(pre.start_ids + pre.middle_ids + pre.end_ids
                            + pre.decoder_start_ids + list(self.stop_ids) + [pre.pad_id])

    def detokenize(self, ids):
        """Generated ids -> text, framing and stop tokens left out.

        Ids past the tokenizer's vocabulary (the family's `extra_tokens`, T5's
        sentinels) have no text and are left out too.
        """
        size = self.tokenizer.vocabulary_size()
        ids = [int(i) for i in ids if int(i) not in self._special and int(i) < size]
        if not ids:
            return ""
        text = self.tokenizer.detokenize(ids)
        if isinstance(text, (tf.Tensor, np.ndarray)):
            text = np.asarray(text).item()
        return text.decode("utf-8") if isinstance(text, bytes) else str(text)

    def generate(self, prompts, max_length=None, sampler="greedy", seed=0, **kwargs):
        """Text(s) in, generated text(s) out.

        Args:
            prompts: a string or a list of strings.
            max_length: the most tokens of a row (CausalLM: prompt included;
                Seq2SeqLM: of the decoder's output); default sequence_length.
            sampler: "greedy", "top_k", "top_p", "random", "beam" or a Sampler.
            seed: the random samplers' seed.
            **kwargs: the rest of `keras_ctx.generation.generate` (use_cache,
                jit_compile, ...).

        Returns:
            A string for a string, a list of strings for a list.
        """
        single = isinstance(prompts, str)
        ids, mask = self.generate_ids(_strings(prompts, "prompts"), max_length, sampler, seed,
                                      **kwargs)
        texts = [self.detokenize(row[m]) for row, m in zip(ids, mask)]
        return texts[0] if single else texts


    def export(self, directory, max_length=None, sampler="greedy", version=1,
               overwrite=False, jit_compile=False):
        """Exports a SavedModel that generates, for TF Serving; returns its version path.

        Signatures (keras_ctx.export): `serving_default` (the backbone's
        forward pass), `serve_text`, `serve_generate` (prompt ids -> generated
        ids, the decode loop in the graph, core TensorFlow ops only) and
        `serve_generate_text` (prompt strings -> generated strings, as
        `generate` returns them; needs the tokenizer's ops, as `serve_text`).
        Random samplers take a `seed` input: the same seed gives
        `generate(..., seed=seed)`'s tokens.

        Args:
            directory: the model's base directory (TF Serving watches it).
            max_length: as `generate` (default sequence_length); fixed in
                the export.
            sampler: as `generate`, fixed in the export.
            version, overwrite, jit_compile: as `export_saved_model`.

        Returns:
            The path of the written version directory.
        """
        from keras_ctx.export import Generation, export_saved_model

        generation = Generation(
            max_length or self.sequence_length, sampler,
            end_token_id=list(self.stop_ids) or None, pad_token_id=self.preprocessor.pad_id,
            decoder_start_token_id=(self.preprocessor.decoder_start_ids[0]
                                    if isinstance(self, Seq2SeqLM) else None),
            text=GenerationText(self))
        return export_saved_model(self.backbone, directory, version=version,
                                  overwrite=overwrite, preprocessor=self.preprocessor,
                                  sequence_length=self.sequence_length,
                                  jit_compile=jit_compile, generation=generation)

    def generate_stream(self, prompt, max_length=None, sampler="greedy", seed=0):
        """Yields the text of one prompt in chunks as its tokens are decoded.

        The tokens are `generate`'s (same sampler and seed;
        `keras_ctx.generation.stream`); each chunk is the text the newest
        token adds, held back while a byte-level BPE character is still
        incomplete, so "".join(chunks) == generate(prompt, ...).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"`generate_stream` takes one prompt string, got "
                            f"{type(prompt).__name__}; loop over a list.")
        prefix, tokens = self._stream(prompt, max_length, sampler, seed)
        ids, shown = list(prefix), ""
        for token in tokens:
            ids.append(token)
            text = self.detokenize(ids)
            if text.endswith("\ufffd") or not text.startswith(shown):
                continue  # an incomplete character: wait for its next byte
            if len(text) > len(shown):
                yield text[len(shown):]
                shown = text
        text = self.detokenize(ids)
        if text != shown:
            yield text[len(shown):] if text.startswith(shown) else text


class GenerationText(keras.layers.Layer):
    """The text codec of an exported language model (`serve_generate_text`), in the graph.

    `encode` turns prompts into the ids `generate` reads (a CausalLM's
    prompt pieces, right-padded; a Seq2SeqLM's framed source); `decode`
    turns generated rows into text as `detokenize` does (framing, stop,
    padding and out-of-vocabulary ids left out). Not saved with the model:
    `export` builds it from the task.

    Args:
        task: a CausalLM or Seq2SeqLM.
    """

    def __init__(self, task, **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = task.tokenizer
        self.text_preprocessor = task.preprocessor
        self.encoder_decoder = isinstance(task, Seq2SeqLM)
        self.special_ids = sorted(task._special)
        self.tokenizer_size = int(task.tokenizer.vocabulary_size())
        self.built = True

    def encode(self, text):
        pre = self.text_preprocessor
        if self.encoder_decoder:
            inputs = pre(text)
            return {"encoder_token_ids": inputs["encoder_token_ids"],
                    "encoder_padding_mask": inputs["encoder_padding_mask"]}
        pieces = pre._tokenize(text)
        return {"token_ids": pieces.to_tensor(pre.pad_id),
                "padding_mask": tf.sequence_mask(pieces.row_lengths(), dtype=tf.int32)}

    def decode(self, token_ids, padding_mask):
        ids = tf.cast(token_ids, tf.int32)
        special = tf.reduce_any(ids[..., None] == tf.constant(self.special_ids, tf.int32),
                                axis=-1)
        keep = tf.cast(padding_mask, tf.bool) & ~special & (ids < self.tokenizer_size)
        text = self.tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))
        return tf.reshape(text, [-1])


@_registered
class CausalLM(_Generator):
    """A decoder-only language model (GPT, GPT-2) that reads and writes text.

    `fit(texts)` trains next-token prediction (the loss over real tokens);
    `generate("prompt")` returns the prompt and its continuation, up to the
    family's stop token (GPT-2's <|endoftext|>) or max_length.

    Args:
        backbone: a decoder backbone of a registered family (its `logits`
            ties the output to the token embedding).
        tokenizer: its tokenizer.
        sequence_length: the training length and the default max_length.
        family, truncation: as `TextClassifier`.

    Example:
    >>> lm = CausalLM.from_run("runs/gpt2")
    >>> lm.generate("The bank", max_length=20, sampler="top_k")
    """

    def __init__(self, backbone, tokenizer, sequence_length=128, family=None,
                 truncation="error"):
        family = _family_of(backbone, family)
        if family.inputs != "tokens" or family.framing is None or not hasattr(
                backbone, "call_with_cache"):
            raise ValueError(f"CausalLM needs a decoder-only backbone; {family.name} is "
                             "not one (use Seq2SeqLM for encoder-decoders).")
        model = LanguageModel(backbone, "sequence_output", name="causal_lm")
        super().__init__(model, tokenizer, family, sequence_length, truncation,
                         backbone=backbone)
        self._setup_generation()

    def _targets(self, inputs, y):
        return _next_tokens(inputs["token_ids"], inputs["padding_mask"])

    def _dataset(self, x, y=None, batch_size=32):
        if y is not None:
            raise ValueError("CausalLM learns from texts alone (next-token targets); pass "
                             "no y.")
        if isinstance(x, tf.data.Dataset):
            return super()._dataset(x.map(lambda text: (text, text)), None, batch_size)
        texts = self._text_columns(x)
        return super()._dataset(tf.data.Dataset.from_tensor_slices((texts, texts)).batch(
            batch_size), None, batch_size)

    def predict(self, x, batch_size=32, **kwargs):
        """Next-token logits (batch, sequence_length, vocabulary) for texts."""
        kwargs.setdefault("verbose", 0)
        texts = self._text_columns(x)
        dataset = tf.data.Dataset.from_tensor_slices(texts).batch(batch_size).map(
            lambda text: (self._inputs(text),))
        return self.model.predict(dataset, **kwargs)

    def _prompt_row(self, prompt):
        return np.asarray(self.preprocessor._tokenize(tf.constant([prompt]))[0]).tolist()

    def _prompts(self, prompts):
        rows = [self._prompt_row(p) for p in prompts]
        if any(not row for row in rows):
            raise ValueError("A prompt is empty: generation needs at least one token.")
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.preprocessor.pad_id, "int32")
        mask = np.zeros((len(rows), width), bool)
        for i, row in enumerate(rows):
            ids[i, :len(row)], mask[i, :len(row)] = row, True
        return ids, mask

    def _stream(self, prompt, max_length, sampler, seed):
        from keras_ctx import generation

        ids, _ = self._prompts([prompt])
        return ids[0].tolist(), generation.stream(
            self.backbone, ids, max_length=max_length or self.sequence_length,
            sampler=sampler, end_token_id=self.stop_ids or None,
            pad_token_id=self.preprocessor.pad_id, seed=seed)

    def generate_ids(self, prompts, max_length=None, sampler="greedy", seed=0, **kwargs):
        """(token_ids, padding_mask) numpy arrays of the prompts and their continuations."""
        from keras_ctx import generation

        ids, mask = self._prompts(prompts)
        out = generation.generate(self.backbone, ids, mask,
                                  max_length=max_length or self.sequence_length,
                                  sampler=sampler, end_token_id=self.stop_ids or None,
                                  pad_token_id=self.preprocessor.pad_id, seed=seed, **kwargs)
        return np.asarray(out["token_ids"]), np.asarray(out["padding_mask"])




@_registered
class Seq2SeqLM(_Generator):
    """An encoder-decoder (T5, BART) that maps texts to texts.

    `fit(sources, targets)` trains the decoder on the target (teacher forcing,
    the family's decoder start token first, its end token last);
    `generate("source")` returns the decoded target text.

    Args:
        backbone: an encoder-decoder backbone of a registered family.
        tokenizer: its tokenizer.
        sequence_length: the encoder and training decoder length; the default
            max_length of `generate`.
        family, truncation: as `TextClassifier`.
    """

    def __init__(self, backbone, tokenizer, sequence_length=128, family=None,
                 truncation="error"):
        family = _family_of(backbone, family)
        if family.inputs != "encoder_decoder":
            raise ValueError(f"Seq2SeqLM needs an encoder-decoder backbone; {family.name} "
                             "is not one (use CausalLM for decoder-only families).")
        model = LanguageModel(backbone, "decoder_sequence_output", name="seq2seq_lm")
        super().__init__(model, tokenizer, family, sequence_length, truncation,
                         backbone=backbone)
        self._setup_generation()

    def _inputs(self, text):
        source = self.preprocessor(text[0] if isinstance(text, (tuple, list)) else text)
        inputs = {"encoder_token_ids": source["encoder_token_ids"],
                  "encoder_padding_mask": source["encoder_padding_mask"]}
        if isinstance(text, (tuple, list)):
            target = self.preprocessor(text[1])
            inputs["decoder_token_ids"] = target["decoder_token_ids"]
            inputs["decoder_padding_mask"] = target["decoder_padding_mask"]
            # The framed target is what the decoder learns to write.
            inputs["_target"] = target["encoder_token_ids"]
            inputs["_target_mask"] = target["encoder_padding_mask"]
        else:
            start = tf.fill([tf.shape(source["encoder_token_ids"])[0], 1],
                            tf.constant(self.preprocessor.decoder_start_ids[0]))
            inputs["decoder_token_ids"] = start
            inputs["decoder_padding_mask"] = tf.ones_like(start)
        return inputs

    def _targets(self, inputs, y):
        target, mask = inputs.pop("_target"), inputs.pop("_target_mask")
        return target, tf.cast(mask, tf.float32)

    def _dataset(self, x, y=None, batch_size=32):
        if isinstance(x, tf.data.Dataset):
            dataset = x.map(lambda source, target: ((source, target), target))
            return super()._dataset(dataset, None, batch_size)
        if y is None:
            raise ValueError("Seq2SeqLM trains on (sources, targets): pass y, the target "
                             "texts.")
        sources, targets = self._text_columns(x), self._text_columns(y)
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets.")
        dataset = tf.data.Dataset.from_tensor_slices(((sources, targets), targets))
        return super()._dataset(dataset.batch(batch_size), None, batch_size)

    def predict(self, x, batch_size=32, **kwargs):
        raise TypeError("Seq2SeqLM.predict is not defined on texts: use generate(texts).")

    def _encoder(self, sources):
        inputs = self.preprocessor(np.asarray(sources, object).astype(str))
        return (np.asarray(inputs["encoder_token_ids"]),
                np.asarray(inputs["encoder_padding_mask"]))

    def _stream(self, source, max_length, sampler, seed):
        from keras_ctx import generation

        ids, mask = self._encoder([source])
        start = self.preprocessor.decoder_start_ids[0]
        return [start], generation.stream(
            self.backbone, [[start]], max_length=max_length or self.sequence_length,
            sampler=sampler, end_token_id=self.stop_ids or None,
            pad_token_id=self.preprocessor.pad_id, seed=seed, encoder_token_ids=ids,
            encoder_padding_mask=mask)

    def generate_ids(self, sources, max_length=None, sampler="greedy", seed=0, **kwargs):
        """(decoder token_ids, padding_mask) numpy arrays for the source texts."""
        from keras_ctx import generation

        ids, mask = self._encoder(sources)
        out = generation.generate_seq2seq(
            self.backbone, ids, mask, max_length=max_length or self.sequence_length,
            decoder_start_token_id=self.preprocessor.decoder_start_ids[0], sampler=sampler,
            end_token_id=self.stop_ids or None, pad_token_id=self.preprocessor.pad_id,
            seed=seed, **kwargs)
        return np.asarray(out["token_ids"]), np.asarray(out["padding_mask"])




def _next_tokens(token_ids, padding_mask):
    """Targets and weights of next-token prediction: position t predicts t + 1."""
    targets = tf.concat([token_ids[:, 1:], tf.zeros_like(token_ids[:, :1])], axis=1)
    mask = tf.cast(padding_mask, tf.float32)
    weights = tf.concat([mask[:, 1:], tf.zeros_like(mask[:, :1])], axis=1)
    return targets, weights


@keras.saving.register_keras_serializable(package="keras_ctx")
class LanguageModel(keras.Model):
    """A backbone and its output layer: inputs -> next-token logits (float32).

    Args:
        backbone: a backbone with `logits(hidden)` (its tied token embedding).
        output: the backbone output the logits read ("sequence_output";
            encoder-decoders "decoder_sequence_output").
    """

    def __init__(self, backbone, output="sequence_output", **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.output_name = output

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)[self.output_name]
        return keras.ops.cast(self.backbone.logits(hidden), "float32")

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone),
                "output": self.output_name, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


def language_model(handle, sequence_length=None):
    """The CausalLM or Seq2SeqLM of a run directory or a saved text task.

    Which one comes from the family's registry entry (encoder-decoders read
    a source text, the others continue a prompt).
    """
    import json

    handle = os.fspath(handle)
    task_file = os.path.join(handle, TASK_FILE)
    if os.path.isfile(task_file):
        with open(task_file, encoding="utf-8") as f:
            name = json.load(f).get("task")
        if name not in ("CausalLM", "Seq2SeqLM"):
            raise ValueError(f"{handle} holds a {name}, which does not generate text.")
        return _TASKS[name].load(handle)
    info = runs.read_info(handle)
    family = families.get(info["family"])
    cls = Seq2SeqLM if family.inputs == "encoder_decoder" else CausalLM
    return cls.from_run(handle, sequence_length=sequence_length)

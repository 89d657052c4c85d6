"""Extractive question answering from strings: (question, context) in, answer text out."""

import keras
import numpy as np
from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.preprocessing import piece_spans
from keras_ctx.tasks.heads import SpanQuestionAnswerer as IdSpanQuestionAnswerer
from keras_ctx.tasks.text.task import TextTask, deprecated_names, registered, strings


@registered
class QuestionAnswerer(TextTask):
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
        self.max_answer_tokens = validation.positive_int("max_answer_tokens", max_answer_tokens)
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
        return [strings(c, "question/context") for c in zip(*x)]

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
                raise TypeError("A QuestionAnswerer dataset yields batches of "
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
        return self._backbone_inputs(inputs)

    def predict(self, x, batch_size=32, **kwargs):
        """The answer text for each (question, context).

        `x`: a list of pairs, or a batched tf.data.Dataset of (question,
        context) string batches (read one batch at a time).
        """
        batch_size = validation.positive_int("batch_size", batch_size)
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


__getattr__ = deprecated_names(globals())  # SpanQuestionAnswerer, the old name

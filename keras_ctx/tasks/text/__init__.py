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

The modules: `task` (the `TextTask` base, saving and loading), `classifiers`
(`TextClassifier`, `WordClassifier`), `question_answering`
(`QuestionAnswerer`), `embedder` (`TextEmbedder`), `generators`
(`CausalLM`, `Seq2SeqLM`, `language_model`). `TokenClassifier` and
`SpanQuestionAnswerer`, these tasks' names before they took names of their own
(`keras_ctx.tasks`' docstring), still answer for one release, with a
DeprecationWarning; directories saved under them still load.
"""

from keras_ctx.tasks.text.classifiers import TextClassifier, WordClassifier
from keras_ctx.tasks.text.embedder import TextEmbedder
from keras_ctx.tasks.text.generators import CausalLM, Seq2SeqLM, language_model
from keras_ctx.tasks.text.question_answering import QuestionAnswerer
from keras_ctx.tasks.text.task import TextTask, deprecated_names

__all__ = ["CausalLM", "QuestionAnswerer", "Seq2SeqLM", "TextClassifier", "TextEmbedder",
           "TextTask", "WordClassifier", "language_model"]

__getattr__ = deprecated_names(globals())  # TokenClassifier, SpanQuestionAnswerer

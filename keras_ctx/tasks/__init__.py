"""Fine-tuning models over any backbone.

One vocabulary of task names, each naming one class. `heads` holds the id-level
Keras models (ids in, logits out): `SequenceClassifier`, `TokenClassifier`,
`SpanQuestionAnswerer`, named by what they compute over tokens. `text` holds
what users call, as keras-hub's tasks are: the same tasks with the family's
preprocessor, strings in and labels or text out, named by what they read and
give: `TextClassifier` (a label per text), `WordClassifier` (a label per word:
it reads words, not tokens, and labels each word from its first piece),
`QuestionAnswerer` (a question and a context in, the answer's text out),
`TextEmbedder`, `CausalLM`, `Seq2SeqLM` (keras-hub's own names). The text tasks
were `keras_ctx.tasks.text.TokenClassifier` and `.SpanQuestionAnswerer`, the
names of the id-level models they hold; those names answer one more release
with a DeprecationWarning, and task directories saved under them still load.

ULMFiT's forward and backward classifiers, averaged, are `DirectionEnsemble`.

GPT's fine-tuning objective, `GPTFineTuner`, is a `Pretrainer` and lives in
`keras_ctx.pretraining` with the other objectives; it is named here too.
"""

from keras_ctx.schedules import SlantedTriangular  # ULMFiT's schedule, with its recipes below
from keras_ctx.pretraining.gpt_finetuner import GPTFineTuner
from keras_ctx.tasks.heads import (
    ConcatPooling,
    SequenceClassifier,
    SpanQuestionAnswerer,
    TokenClassifier,
)
from keras_ctx.tasks.direction_ensemble import DirectionEnsemble
from keras_ctx.tasks.huggingface import classifier_from_huggingface
from keras_ctx.tasks.language_model import LanguageModel
from keras_ctx.tasks import text
from keras_ctx.tasks.text import (CausalLM, QuestionAnswerer, Seq2SeqLM, TextClassifier,
                                  TextEmbedder, TextTask, WordClassifier)
from keras_ctx.tasks.transfer import (
    ConcatPoolClassifier,
    GradualUnfreezing,
    discriminative_multipliers,
    layer_groups,
    layer_wise_decay_multipliers,
    with_layer_learning_rates,
)

__all__ = [
    "SlantedTriangular", "GPTFineTuner", "ConcatPooling", "SequenceClassifier", "DirectionEnsemble",
    "SpanQuestionAnswerer", "TokenClassifier", "classifier_from_huggingface", "LanguageModel", "text", "CausalLM",
    "QuestionAnswerer", "Seq2SeqLM", "TextClassifier", "TextEmbedder", "TextTask",
    "WordClassifier", "ConcatPoolClassifier", "GradualUnfreezing", "discriminative_multipliers", "layer_groups",
    "layer_wise_decay_multipliers", "with_layer_learning_rates",
]

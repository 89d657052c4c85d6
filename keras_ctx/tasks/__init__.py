"""Fine-tuning models over any backbone.

`heads` holds the id-level models (ids in, logits out), `text` the same
tasks over strings (`keras_ctx.tasks.text.TokenClassifier` reads words where
`keras_ctx.tasks.TokenClassifier` reads ids).
"""

from keras_ctx.schedules import SlantedTriangular  # ULMFiT's schedule, with its recipes below
from keras_ctx.tasks.gpt_finetuner import GPTFineTuner
from keras_ctx.tasks.heads import (
    ConcatPooling,
    SequenceClassifier,
    SpanQuestionAnswerer,
    TokenClassifier,
)
from keras_ctx.tasks.language_model import LanguageModel
from keras_ctx.tasks import text
from keras_ctx.tasks.text import CausalLM, Seq2SeqLM, TextClassifier, TextEmbedder, TextTask
from keras_ctx.tasks.transfer import (
    ConcatPoolClassifier,
    GradualUnfreezing,
    discriminative_multipliers,
    layer_groups,
    layer_wise_decay_multipliers,
    with_layer_learning_rates,
)

__all__ = [
    "SlantedTriangular", "GPTFineTuner", "ConcatPooling", "SequenceClassifier",
    "SpanQuestionAnswerer", "TokenClassifier", "LanguageModel", "text", "CausalLM",
    "Seq2SeqLM", "TextClassifier", "TextEmbedder", "TextTask", "ConcatPoolClassifier",
    "GradualUnfreezing", "discriminative_multipliers", "layer_groups",
    "layer_wise_decay_multipliers", "with_layer_learning_rates",
]

"""Fine-tuning models over any backbone."""

from keras_ctx.tasks.gpt_finetuner import GPTFineTuner  # noqa: E402
from keras_ctx.tasks.heads import SequenceClassifier, SpanQuestionAnswerer, TokenClassifier
from keras_ctx.tasks.text import (  # noqa: F401  (text in, text out)
    CausalLM,
    LanguageModel,
    Seq2SeqLM,
    TextClassifier,
    TextEmbedder,
    TextTask,
)
from keras_ctx.tasks import text  # noqa: F401  (text.TokenClassifier, text.SpanQuestionAnswerer)
from keras_ctx.tasks.transfer import (  # noqa: E402
    ConcatPoolClassifier,
    ConcatPooling,
    GradualUnfreezing,
    SlantedTriangular,
    discriminative_multipliers,
    layer_groups,
    layer_wise_decay_multipliers,
    with_layer_learning_rates,
)

"""Fine-tuning models over any backbone."""

from keras_ctx.tasks.heads import SequenceClassifier, SpanQuestionAnswerer, TokenClassifier

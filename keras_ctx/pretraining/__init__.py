"""Pretraining objectives: keras.Model subclasses whose train_step is the objective."""
from keras_ctx.pretraining.xlnet import XLNetPretrainer  # noqa: F401
from keras_ctx.pretraining.causal_lm import CausalLMPretrainer, GPTFineTuner  # noqa: F401
from keras_ctx.pretraining.seq2seq import Seq2SeqPretrainer  # noqa: F401
from keras_ctx.pretraining import masked_lm, span_bert  # noqa: E402,F401
from keras_ctx.pretraining.masked_lm import (  # noqa: E402,F401
    AlbertPretrainer,
    BertPretrainer,
    MaskedLMPretrainer,
    RobertaPretrainer,
)
from keras_ctx.pretraining.span_bert import SpanBertPretrainer  # noqa: E402,F401
from keras_ctx.pretraining.bilm import BiLMPretrainer  # noqa: E402,F401
from keras_ctx.pretraining.translation import TranslationPretrainer  # noqa: E402,F401
from keras_ctx.pretraining.electra import ElectraPretrainer  # noqa: E402,F401

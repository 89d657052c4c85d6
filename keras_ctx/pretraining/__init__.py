"""Pretraining objectives: each a `Pretrainer` (base.py owns the step) naming its losses."""

from keras_ctx.pretraining.adapters import AdapterMaskedLMPretrainer
from keras_ctx.pretraining.awd_lstm import AwdLstmLMPretrainer
from keras_ctx.pretraining.base import Pretrainer
from keras_ctx.pretraining.bilm import BiLMPretrainer
from keras_ctx.pretraining.causal_lm import CausalLMPretrainer
from keras_ctx.pretraining.cvt import CrossViewTrainer
from keras_ctx.pretraining.electra import ElectraPretrainer
from keras_ctx.pretraining.gpt_finetuner import GPTFineTuner
from keras_ctx.pretraining.masked_lm import (
    AlbertPretrainer,
    BertPretrainer,
    MaskedLMPretrainer,
    RobertaPretrainer,
)
from keras_ctx.pretraining.seq2seq import Seq2SeqPretrainer
from keras_ctx.pretraining.span_bert import SpanBertPretrainer
from keras_ctx.pretraining.translation import TranslationPretrainer
from keras_ctx.pretraining.xlnet import XLNetPretrainer

__all__ = [
    "AdapterMaskedLMPretrainer", "AwdLstmLMPretrainer", "Pretrainer", "BiLMPretrainer", "CausalLMPretrainer",
    "CrossViewTrainer", "ElectraPretrainer", "GPTFineTuner", "AlbertPretrainer", "BertPretrainer",
    "MaskedLMPretrainer", "RobertaPretrainer", "Seq2SeqPretrainer", "SpanBertPretrainer",
    "TranslationPretrainer", "XLNetPretrainer",
]

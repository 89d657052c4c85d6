"""XLM (Lample & Conneau 2019): cross-lingual MLM / TLM with language embeddings.

Its inputs add language ids and explicit positions, which the one-text path
does not make; it pretrains from Python (keras_ctx.data.multilingual streams
and TLM pairs).
"""

from keras_ctx.data import tokenizers
from keras_ctx.models.xlm import convert as convert_xlm
from keras_ctx.models.xlm import backbone as xlm
from keras_ctx.models.presets import Pretraining, register_pretraining
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.registry import Family, register_family

# `keras-ctx pretrain` has no recipe for this family (Family.no_pretraining).
XLM_PRETRAINING = register_pretraining({
    name: Pretraining(source="no keras-ctx pretrain recipe") for name in xlm.XLM_PRESETS})

XLM = register_family(Family(
    "xlm", xlm.XLMBackbone, xlm.XLM_PRESETS,
    # XLM's tokenizer: Moses words, lower case without accents, "</w>" BPE (xlm_text).
    tokenizers.train_xlm_bpe,
    huggingface=convert_xlm.HUGGINGFACE,
    no_pretraining="XLM pretrains from Python: keras_ctx.data.multilingual "
                   "(text_stream, tlm_pairs) with keras_ctx.pretraining.",
    tiny=dict(TINY_TRANSFORMER, max_sequence_length=64)))

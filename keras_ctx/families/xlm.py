"""XLM (Lample & Conneau 2019): cross-lingual MLM / TLM with language embeddings.

Its inputs add language ids and explicit positions, which the one-text path
does not make; it pretrains from Python (keras_ctx.data.multilingual streams
and TLM pairs).
"""

from keras_ctx.convert import xlm as convert_xlm
from keras_ctx.convert.heads import MaskedLMLayout
from keras_ctx.models import xlm
from keras_ctx.registry import Family, HuggingFace, register_family

# XLM's PredLayer (asm=False): the tied proj + bias, no transform.
MASKED_LM = MaskedLMLayout("XLMWithLMHeadModel", "transformer.", bias="pred_layer.proj.bias",
                           decoder="pred_layer.proj.weight")

XLM = register_family(Family(
    "xlm", xlm.XLMBackbone, xlm.XLM_PRESETS,
    huggingface=(HuggingFace("xlm", convert_xlm.convert_xlm, convert_xlm.export_xlm,
                             masked_lm=MASKED_LM),),
    no_pretraining="XLM pretrains from Python: keras_ctx.data.multilingual "
                   "(text_stream, tlm_pairs) with keras_ctx.pretraining."))

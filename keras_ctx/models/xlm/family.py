"""XLM (Lample & Conneau 2019): cross-lingual MLM / TLM with language embeddings.

`keras-ctx pretrain` runs the paper's MLM (and, with parallel pairs, TLM) stages
(`keras_ctx.models.xlm.recipe`: --languages names each --corpus file's language,
--parallel en-fr=pairs.tsv adds TLM).
"""

from keras_ctx.data import tokenizers
from keras_ctx.models.xlm import convert as convert_xlm
from keras_ctx.models.xlm import backbone as xlm
from keras_ctx.models.xlm import recipe
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import MaskedLMPretrainer
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.registry import Family, register_family

# The paper's stages (Lample & Conneau 2019): MLM on every language's stream from step 0,
# and TLM alternated with it where parallel pairs are given (--mlm_steps 'en,fr,en-fr').
_STAGES = (Stage("MLM on each --languages stream (alpha 0.5), with TLM on --parallel pairs "
                 "in turn where given", 0, source="Lample & Conneau 2019, Sec. 3.1-3.3; "
                 "XLM README --mlm_steps"),)
XLM_PRETRAINING = register_pretraining({
    name: Pretraining(stages=_STAGES, source="Lample & Conneau 2019, Sec. 3")
    for name in xlm.XLM_PRESETS})

XLM = register_family(Family(
    "xlm", xlm.XLMBackbone, xlm.XLM_PRESETS,
    # XLM's tokenizer: Moses words, lower case without accents, "</w>" BPE (xlm_text).
    tokenizers.train_xlm_bpe,
    huggingface=convert_xlm.HUGGINGFACE,
    dataset=recipe.xlm_dataset, pretrainer=recipe.xlm_pretrainer,
    recipe_config=recipe.recipe_config, objective=(MaskedLMPretrainer, ("language_ids",)),
    tiny=dict(TINY_TRANSFORMER, max_sequence_length=64)))

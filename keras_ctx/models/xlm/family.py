"""XLM (Lample & Conneau 2019): cross-lingual MLM / TLM with language embeddings.

`keras-ctx pretrain` runs the paper's MLM (and, with parallel pairs, TLM) stages
(`keras_ctx.data.xlm_recipe`: --languages names each --corpus file's language,
--parallel en-fr=pairs.tsv adds TLM).
"""

from keras_ctx.common.errors import ConfigError
from keras_ctx import optimizers
from keras_ctx.data import tokenizers, xlm_recipe as recipe
from keras_ctx.models.xlm import convert as convert_xlm
from keras_ctx.models.xlm import backbone as xlm
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import MaskedLMPretrainer
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.registry import Family, Framing, register_family

# The paper's stages (Lample & Conneau 2019): MLM on every language's stream from step 0,
# and TLM alternated with it where parallel pairs are given (--mlm_steps 'en,fr,en-fr').
_PAPER = "Lample & Conneau 2019"
_MLM = (Stage("MLM on each --languages stream (alpha 0.5), with TLM on --parallel pairs "
              "in turn where given", 0, source=f"{_PAPER}, Sec. 3.1-3.3; XLM README "
              "--mlm_steps"),)
_CLM = (Stage("CLM on each language's stream", 0, source=f"{_PAPER}, Sec. 3.2",
              runs="XLM's train.py --clm_steps (keras-ctx pretrain refuses CLM presets)"),)
# Sec. 3.3: 15% of the tokens, 80% <mask> / 10% random / 10% kept.
_MASKING = dict(mask_rate=0.15, mask_token_rate=0.8, random_token_rate=0.1)
# Sec. 5.1: "streams of 256 tokens and mini-batches of size 64" (MLM and CLM).
_STREAMS = dict(batch_size=64, sequence_length=256)
_README = ("XLM README (a released model the paper does not describe); the objective of "
           f"{_PAPER}, Sec. 3.3")
# The README's MLM/TLM commands: --optimizer adam_inverse_sqrt,beta1=0.9,beta2=0.98,
# lr=0.0001, warmed up over xlm/optim.py's 4000 updates (optimizers.xlm_recipe).
_OPTIMIZER = dict(learning_rate=1e-4, warmup_steps=4000)
_ADAM = "; lr, warm-up: XLM README (adam_inverse_sqrt, lr=0.0001), xlm/optim.py"
_RUN = f"{_PAPER}, Sec. 5.1 (streams, batches), Sec. 3.3 (masking){_ADAM}"
XLM_PRETRAINING = register_pretraining({
    name: (Pretraining(stages=_CLM, source=_RUN, **_STREAMS) if config.get("causal")
           else Pretraining(stages=_MLM, source=_RUN, **_STREAMS, **_MASKING, **_OPTIMIZER)
           if config["num_languages"] in (2, 15)  # the paper's en-X and XNLI-15 models
           else Pretraining(stages=_MLM, source=_README + _ADAM, **_MASKING, **_OPTIMIZER))
    for name, (config, *_) in xlm.XLM_PRESETS.items()})


def xlm_pretrainer(backbone, tokenizer, run):
    """MLM / TLM: XLM's own head, the tied output + bias without BERT's transform (xlm/model/
    transformer.py `PredLayer` @cd281d3)."""
    if getattr(backbone, "causal", False):
        raise ConfigError(f"{run.preset} is a CLM model (XLM's clm_steps), which the "
                          "keras-ctx pretrain recipe does not train: pretrain an xlm-mlm-* preset.")
    return MaskedLMPretrainer(backbone, head_transform=False)


XLM = register_family(Family(
    "xlm", xlm.XLMBackbone, xlm.XLM_PRESETS,
    # XLM's tokenizer: Moses words, lower case without accents, "</w>" BPE (xlm_text).
    tokenizers.train_xlm_bpe,
    # transformers' XLMTokenizer: <s> A </s> (B </s>); positions 0.., language 0.
    Framing(start=(("<s>",),), middle=(("</s>",),), end=(("</s>",),),
            pad=(("<pad>",),), segments=1, positions=True),
    huggingface=convert_xlm.HUGGINGFACE,
    dataset=recipe.xlm_dataset, pretrainer=xlm_pretrainer, optimizer=optimizers.xlm_recipe,
    recipe_config=recipe.recipe_config, objective=(MaskedLMPretrainer, ("language_ids",)),
    tiny=dict(TINY_TRANSFORMER, max_sequence_length=64)))

"""XLM (Lample & Conneau 2019): cross-lingual MLM / TLM / CLM with language embeddings.

`keras-ctx pretrain` runs the paper's stages (`keras_ctx.data.xlm_recipe`: --languages
names each --corpus file's language): an xlm-mlm-* preset MLM (and, with --parallel
en-fr=pairs.tsv, TLM); an xlm-clm-* preset CLM (Sec. 3.2: next-token prediction on
the same language-sampled streams, XLM's --clm_steps 'en,fr'), through
`CausalLMPretrainer` with XLM's PredLayer (`output_bias=True`) and the backbone's causal
attention. --parallel with a CLM preset is refused: TLM is an MLM objective.
"""

from keras_ctx.common.errors import ConfigError
from keras_ctx import optimizers
from keras_ctx.data import tokenizers, xlm_recipe as recipe
from keras_ctx.models.xlm import convert as convert_xlm
from keras_ctx.models.xlm import backbone as xlm
from keras_ctx.models.xlm.decoder import xlm_decoder
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import CausalLMPretrainer, MaskedLMPretrainer
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.registry import Family, Framing, register_family

# The paper's stages (Lample & Conneau 2019): MLM on every language's stream from step 0,
# and TLM alternated with it where parallel pairs are given (--mlm_steps 'en,fr,en-fr').
_PAPER = "Lample & Conneau 2019"
_MLM = (Stage("MLM on each --languages stream (alpha 0.5), with TLM on --parallel pairs "
              "in turn where given", 0, source=f"{_PAPER}, Sec. 3.1-3.3; XLM README "
              "--mlm_steps"),)
# The CLM models' one stage: next-token prediction on each language's stream, sampled as
# MLM's (XLM's train.py --clm_steps 'en,fr' draws languages by utils.py `shuf_order`).
_CLM = (Stage("CLM on each --languages stream (alpha 0.5)", 0,
              source=f"{_PAPER}, Sec. 3.1-3.2; XLM train.py --clm_steps"),)
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
# Neither the paper nor the README gives the CLM models' optimizer: the paper's Adam with
# warm-up and "learning rates varying from 1e-4 to 5e-4" (Sec. 5.1) for all its models;
# keras_ctx trains CLM with the MLM command's (keras_ctx's choice, said in the source).
_CLM_RUN = (f"{_PAPER}, Sec. 5.1 (CLM streams of 256 tokens, mini-batches of 64; Adam, "
            "lr 1e-4 to 5e-4); lr, warm-up: keras_ctx's own, the MLM rows' (XLM README "
            "gives no CLM command: adam_inverse_sqrt, lr=0.0001; xlm/optim.py)")
XLM_PRETRAINING = register_pretraining({
    name: (Pretraining(stages=_CLM, source=_CLM_RUN, **_STREAMS, **_OPTIMIZER)
           if config.get("causal")
           else Pretraining(stages=_MLM, source=_RUN, **_STREAMS, **_MASKING, **_OPTIMIZER)
           if config["num_languages"] in (2, 15)  # the paper's en-X and XNLI-15 models
           else Pretraining(stages=_MLM, source=_README + _ADAM, **_MASKING, **_OPTIMIZER))
    for name, (config, *_) in xlm.XLM_PRESETS.items()})


def is_clm(preset):
    """Whether `preset` is one of XLM's CLM models (`causal` in its config): its recipe
    trains CLM, the others MLM / TLM."""
    entry = xlm.XLM_PRESETS.get(preset)
    return bool(entry and entry.config.get("causal"))


def xlm_pretrainer(backbone, tokenizer, run):
    """XLM's own head, the tied output + bias without BERT's transform (xlm/model/
    transformer.py `PredLayer` @cd281d3), under MLM / TLM or, for a CLM preset, CLM."""
    clm = is_clm(run.preset)
    if bool(getattr(backbone, "causal", False)) != clm:
        raise ConfigError(
            f"--set causal={backbone.causal}: {run.preset} pretrains with "
            f"{'CLM' if clm else 'MLM'}, which needs causal={clm} (XLM's fwd causal= in its "
            f"{'clm' if clm else 'mlm'}_step); drop --set causal, or pretrain an "
            f"xlm-{'mlm' if clm else 'clm'}-* preset.")
    if clm:
        return CausalLMPretrainer(backbone, output_bias=True)
    return MaskedLMPretrainer(backbone, head_transform=False)


def xlm_dataset(documents, tokenizer, run):
    """The recipe's batches: CLM streams for a CLM preset, else MLM (and TLM)."""
    return recipe.xlm_dataset(documents, tokenizer, run,
                              objective="clm" if is_clm(run.preset) else "mlm")


# A run without --languages reads its one corpus by the tokenizer's rules, English
# (tokenizers.train_xlm_bpe's default language; xlm_recipe.xlm_dataset), under id 0.
ONE_LANGUAGE = ("en",)


def recipe_config(run):
    """The recipe's backbone config (recipe.recipe_config), with the run's languages in id
    order (XLM's id2lang: recipe.language_ids), which the saved backbone keeps for the
    commands that read text. `keras-ctx pretrain` reads it while it checks its arguments,
    before any text: --parallel with a CLM preset is refused there (the paper's TLM is an
    MLM objective)."""
    if is_clm(run.preset):
        recipe.refuse_pairs_for_clm(dict(run.inputs).get("parallel"), run.preset)
    ids = recipe.language_ids(dict(run.inputs).get("languages") or ONE_LANGUAGE)
    return {**recipe.recipe_config(run), "languages": sorted(ids, key=ids.get)}


xlm_dataset.check_inputs = recipe.check_inputs  # `keras-ctx pretrain --languages/--parallel`
xlm_dataset.tokenizer_text = recipe.tokenizer_text  # each corpus by its language's rules
xlm_dataset.prepared_parts = recipe.prepared_parts  # `keras-ctx prepare`'s sentence ids
# The objective each preset's recipe builds, and the batch keys that tell it apart.
_OBJECTIVES = {False: (MaskedLMPretrainer, ("language_ids", "mask_positions")),
               True: (CausalLMPretrainer, ("language_ids", "position_ids"))}


XLM = register_family(Family(
    "xlm", xlm.XLMBackbone, xlm.XLM_PRESETS,
    # XLM's tokenizer: Moses words, lower case without accents, "</w>" BPE (xlm_text).
    tokenizers.train_xlm_bpe,
    # transformers' XLMTokenizer: <s> A </s> (B </s>); positions 0.., language 0. The CLM
    # models read streams whose every sentence opens with </s> (xlm/data/loader.py's
    # binarized text; xlm_recipe's streams): a prompt opens with it, the next one ends it.
    Framing(start=(("<s>",),), middle=(("</s>",),), end=(("</s>",),),
            pad=(("<pad>",),), segments=1, positions=True, stop=(("</s>",),),
            prompt_start=(("</s>",),)),
    huggingface=convert_xlm.HUGGINGFACE,
    dataset=xlm_dataset, pretrainer=xlm_pretrainer, optimizer=optimizers.xlm_recipe,
    recipe_config=recipe_config,
    objective={name: _OBJECTIVES[is_clm(name)] for name in xlm.XLM_PRESETS},
    tiny=dict(TINY_TRANSFORMER, max_sequence_length=64),
    # The CLM models decode through their own layers with a cache (positions, languages).
    decoder=xlm_decoder))

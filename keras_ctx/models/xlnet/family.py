"""XLNet (Yang et al. 2019): permutation language modelling with two-stream attention."""

import functools

from keras_ctx.models.xlnet import convert as convert_xlnet
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.data.xlnet_stream import default_reuse_len
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import (LAST, XLNET_FRAMING, XLNET_SPECIAL_TOKENS, layout,
                                       pipeline)
from keras_ctx.models.xlnet import backbone as xlnet
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import XLNetPretrainer
from keras_ctx.registry import Family, register_family


def xlnet_pretrainer(backbone, tokenizer, run):
    # As pipelines.permutation_dataset lays the data out (XLNet's data_utils.py).
    return XLNetPretrainer(backbone, batch_size=run.batch_size,
                           reuse_len=default_reuse_len(run.sequence_length))


def xlnet_recipe_config(run):
    # The released pretraining (zihangdai/xlnet README: --seq_len=512
    # --mem_len=384): a memory of 3/4 of the sequence, carried across batches.
    return {"mem_len": run.sequence_length * 3 // 4}


# The data flags are the README's (zihangdai/xlnet README.md @bbaa3a6: --seq_len=512
# --num_predict=85 --mask_alpha=6 --mask_beta=1, spans of up to 5 tokens in
# data_utils._sample_mask), for both sizes. XLNet-large's optimisation is the paper's
# (Yang et al. 2019, Sec. 3.1: batch 8192, 500K steps; Appendix Table 7: peak rate
# 4e-4, 40k warm-up steps). XLNet-base as released was "trained on full data
# (different from the one in the paper)" (README) with settings not published.
_XLNET_DATA = dict(sequence_length=512, mask_rate=85 / 512, max_span=5,
                   stages=(Stage("permutation LM, two-stream attention, memory", 0,
                                 source="Yang et al. 2019, Sec. 2.3-2.4"),))
XLNET_PRETRAINING = register_pretraining({
    "xlnet-base": Pretraining(**_XLNET_DATA, source="zihangdai/xlnet README.md @bbaa3a6 "
                              "(data flags; the base model's optimisation unpublished)"),
    "xlnet-large": Pretraining(learning_rate=4e-4, batch_size=8192, steps=500_000,
                               warmup_steps=40_000, **_XLNET_DATA,
                               source="Yang et al. 2019, Sec. 3.1 and Appendix Table 7; "
                                      "zihangdai/xlnet README.md @bbaa3a6"),
})

# The released SentencePiece (zihangdai/xlnet README.md @bbaa3a6): `spm_train
# --input=$INPUT --model_prefix=sp10m.cased.v3 --vocab_size=32000
# --character_coverage=0.99995 --model_type=unigram
# --control_symbols=<cls>,<sep>,<pad>,<mask>,<eod> --user_defined_symbols=<eop>,.,(,),",-,–,£,€
# --shuffle_input_sentence --input_sentence_size=10000000`. The user-defined symbols
# are always pieces of their own, so `_is_start_piece` starts a span at each; the
# special tokens keep keras_ctx's ids (XLNET_SPECIAL_TOKENS).
XLNET_USER_DEFINED_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "\u2013", "\u00a3", "\u20ac")
XLNET_CHARACTER_COVERAGE = 0.99995
# data_utils.py @bbaa3a6 reads every line through prepro_utils.py's
# `preprocess_text(line, lower=FLAGS.uncased)` and `encode_ids` (`encode_pieces`):
# ALBERT's rules (`albert_text`), `` and '' always read as ", cased as the released
# models (README: "We only release cased models"). A saved or exported XLNet tokenizer
# carries a tokenizer.json that transformers reads with these ids and XLNet's framing
# (keras_ctx.data.tokenizer_files.XLNET_FAST).
XLNET_QUOTES = True
train_xlnet_tokenizer = functools.partial(
    tokenizers.train_albert_sentencepiece, special_tokens=XLNET_SPECIAL_TOKENS, lowercase=False,
    quotes=XLNET_QUOTES, user_defined_symbols=XLNET_USER_DEFINED_SYMBOLS,
    character_coverage=XLNET_CHARACTER_COVERAGE)

XLNET = register_family(Family(
    "xlnet", xlnet.XLNetBackbone, xlnet.XLNET_PRESETS, train_xlnet_tokenizer,
    XLNET_FRAMING, pooling=LAST, dataset=pipeline(pipelines.permutation_dataset),
    prepared=layout(layouts.xlnet_layout),
    pretrainer=xlnet_pretrainer, recipe_config=xlnet_recipe_config,
    huggingface=convert_xlnet.HUGGINGFACE, keras_hub=convert_xlnet.KERAS_HUB,
    tf_checkpoint=convert_xlnet.TF_CHECKPOINT,
    tiny=TINY_TRANSFORMER, objective=(XLNetPretrainer, ())))

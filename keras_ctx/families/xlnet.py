"""XLNet (Yang et al. 2019): permutation language modelling with two-stream attention."""

import functools

from keras_ctx.convert import xlnet as convert_xlnet
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.data.xlnet_stream import default_reuse_len
from keras_ctx.families.common import (LAST, XLNET_FRAMING, XLNET_SPECIAL_TOKENS, layout,
                                       pipeline)
from keras_ctx.models import xlnet
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


XLNET = register_family(Family(
    "xlnet", xlnet.XLNetBackbone, xlnet.XLNET_PRESETS,
    functools.partial(tokenizers.train_sentencepiece, special_tokens=XLNET_SPECIAL_TOKENS,
                      lowercase=False),
    XLNET_FRAMING, pooling=LAST, dataset=pipeline(pipelines.permutation_dataset),
    prepared=layout(layouts.xlnet_layout),
    pretrainer=xlnet_pretrainer, recipe_config=xlnet_recipe_config,
    huggingface=convert_xlnet.HUGGINGFACE, keras_hub=convert_xlnet.KERAS_HUB,
    tf_checkpoint=convert_xlnet.TF_CHECKPOINT))

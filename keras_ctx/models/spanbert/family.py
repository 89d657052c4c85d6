"""SpanBERT (Joshi et al. 2020): span masking + the span-boundary objective, no NSP."""

from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models.bert import backbone as bert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import SpanBertPretrainer
from keras_ctx.registry import Family, register_family

# Joshi et al. 2020, Sec. 3.1 (15% of the tokens in spans of Geo(0.2) words clipped
# at 10, 80/10/10 per span); the optimisation as released (facebookresearch/SpanBERT
# pretraining/README.md @0670d8b, "the SpanBERT configuration mentioned in the paper":
# --lr 0.0001 --warmup-updates 10000 --max-update 2400000, --max-tokens 4096 on 32
# GPUs = 256 sequences of --tokens-per-sample 512), both sizes.
_SPANBERT = Pretraining(learning_rate=1e-4, batch_size=256, sequence_length=512,
                        steps=2_400_000, warmup_steps=10_000, mask_rate=0.15,
                        mask_token_rate=0.8, random_token_rate=0.1, max_span=10,
                        stages=(Stage("span masking + SBO, single segments", 0,
                                      source="Joshi et al. 2020, Sec. 3.3"),),
                        source="Joshi et al. 2020, Sec. 3.1; facebookresearch/SpanBERT "
                               "pretraining/README.md @0670d8b (train.py flags)")
SPANBERT_PRETRAINING = register_pretraining({name: _SPANBERT for name in bert.SPANBERT_PRESETS})

SPANBERT = register_family(Family(
    "spanbert", bert.BertBackbone, bert.SPANBERT_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.spanbert_dataset),
    prepared=layout(layouts.packed_layout, spans=True),
    pretrainer=pretrainer(SpanBertPretrainer),
    borrows_backbone=True, tiny=TINY_TRANSFORMER, objective=(SpanBertPretrainer, ())))

"""ERNIE 1.0 (Sun et al. 2019): BERT's network and NSP, knowledge masking in stages.

`keras-ctx pretrain` has no chunker / NER: its phrases are the corpus'
collocations and it has no entity stage (entity lexicons go through
`keras_ctx.data.pipelines.ernie_dataset`).
"""

from keras_ctx.models.ernie import convert as convert_ernie
from keras_ctx.data import pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, pipeline, pretrainer
from keras_ctx.models.ernie import backbone as ernie
from keras_ctx.models.bert import backbone as bert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, register_family

# Sun et al. 2019, Sec. 3.2 orders the stages (basic, phrase, entity masking) and gives
# no step at which each starts: keras_ctx's boundaries are its own
# (pipelines.ERNIE_STAGE_STEPS); 15% of the tokens masked as BERT (Sec. 3.2.1).
ERNIE_STAGES = (
    Stage("basic-level masking (words)", 0, source="Sun et al. 2019, Sec. 3.2.1"),
    Stage("phrase-level masking", pipelines.ERNIE_STAGE_STEPS,
          source="order: Sun et al. 2019, Sec. 3.2.2; step: keras_ctx's own "
                 "(pipelines.ERNIE_STAGE_STEPS)"),
    Stage("entity-level masking", 2 * pipelines.ERNIE_STAGE_STEPS,
          source="order: Sun et al. 2019, Sec. 3.2.3; step: keras_ctx's own",
          runs="an entity lexicon: keras_ctx.data.pipelines.ernie_dataset(entities=...)"),
)
ERNIE_PRETRAINING = register_pretraining({
    "ernie-1.0-base": Pretraining(mask_rate=0.15, stages=ERNIE_STAGES,
                                  source="Sun et al. 2019, Sec. 3.2")})

ERNIE = register_family(Family(
    "ernie", bert.BertBackbone, ernie.ERNIE_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, pooling=POOLED,
    dataset=pipeline(pipelines.ernie_dataset, phrases="collocations"),
    pretrainer=pretrainer(BertPretrainer),
    huggingface=convert_ernie.HUGGINGFACE,
    borrows_backbone=True, tiny=TINY_TRANSFORMER,
    objective=(BertPretrainer, ("next_sentence_labels",))))

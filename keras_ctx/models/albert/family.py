"""ALBERT (Lan et al. 2020): factorized embeddings, one shared layer, SOP, n-gram masking."""

from keras_ctx import optimizers
from keras_ctx.models.albert import convert as convert_albert
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models.albert import backbone as albert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import AlbertPretrainer
from keras_ctx.registry import Family, register_family

# Lan et al. 2020, Sec. 4.1, one recipe for every size: batch 4096, LAMB at 0.00176,
# 125k steps, 512 tokens (albert run_pretraining.py @b772393: train_batch_size 4096,
# learning_rate 0.00176, num_train_steps 125000, num_warmup_steps 3125); n-grams of
# up to 3 words (create_pretraining_data.py: ngram=3), 15% masked, 80/10/10.
_ALBERT = Pretraining(learning_rate=0.00176, batch_size=4096, sequence_length=512,
                      steps=125_000, warmup_steps=3_125, mask_rate=0.15, mask_token_rate=0.8,
                      random_token_rate=0.1, max_span=3,
                      stages=(Stage("n-gram MLM + SOP", 0, source="Lan et al. 2020, Sec. 4.1"),),
                      source="Lan et al. 2020, Sec. 4.1; google-research/albert "
                             "run_pretraining.py, create_pretraining_data.py @b772393")
ALBERT_PRETRAINING = register_pretraining({name: _ALBERT for name in albert.ALBERT_PRESETS})

ALBERT = register_family(Family(
    "albert", albert.AlbertBackbone, albert.ALBERT_PRESETS, tokenizers.train_albert_sentencepiece,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.albert_dataset, word_start=tokenizers.albert_word_start),
    pretrainer=pretrainer(AlbertPretrainer),
    prepared=layout(layouts.pairs_layout, kind="sop", whole_word_masking=True, max_ngram=3,
                    word_start=tokenizers.albert_word_start),
    huggingface=convert_albert.HUGGINGFACE, keras_hub=convert_albert.KERAS_HUB,
    tf_checkpoint=convert_albert.TF_CHECKPOINT,
    optimizer=optimizers.albert_recipe,
    tiny=dict(TINY_TRANSFORMER, embedding_size=8),
    objective=(AlbertPretrainer, ("sentence_order_labels",))))

"""BERT (Devlin et al. 2019): WordPiece, MLM + NSP, and its checkpoint formats."""

import dataclasses

from keras_ctx.models.bert import convert as convert_bert
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models.bert import backbone as bert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, register_family

# Devlin et al. 2019, Appendix A.2: batch 256, 1M steps, Adam lr 1e-4, 10k warm-up
# steps; 90% of the steps at length 128, the rest at 512; 15% masked, 80/10/10.
# The four small sizes (Turc et al. 2019): "the standard BERT recipe"
# (google-research/bert README.md @eedf571).
BERT_STAGES = (
    Stage("MLM + NSP", 0, 128, "Devlin et al. 2019, A.2: 90% of the steps at 128"),
    Stage("MLM + NSP", 900_000, 512, "Devlin et al. 2019, A.2: the last 10% at 512",
          start_share=0.9),
)
BERT_RECIPE = Pretraining(learning_rate=1e-4, batch_size=256, sequence_length=128,
                          steps=1_000_000, warmup_steps=10_000, mask_rate=0.15,
                          mask_token_rate=0.8, random_token_rate=0.1, stages=BERT_STAGES,
                          source="Devlin et al. 2019, Appendix A.2")
BERT_PRETRAINING = register_pretraining({
    **{name: BERT_RECIPE for name in ("bert-base", "bert-large")},
    **{name: dataclasses.replace(
        BERT_RECIPE, source="google-research/bert README.md @eedf571 (Turc et al. 2019): "
                            "the standard BERT recipe; Devlin et al. 2019, A.2")
       for name in ("bert-tiny", "bert-mini", "bert-small", "bert-medium")},
})

# BERT: static masks pay off over many epochs of a fixed corpus; short runs
# mask dynamically.
BERT = register_family(Family(
    "bert", bert.BertBackbone, bert.BERT_PRESETS, tokenizers.train_wordpiece, WORDPIECE_FRAMING,
    pooling=POOLED, dataset=pipeline(pipelines.bert_dataset, static_masking=False),
    # create_pretraining_data.py: masks drawn when written, dupe_factor 10 copies.
    prepared=layout(layouts.pairs_layout, kind="nsp", static_masking=True, duplicate=10),
    pretrainer=pretrainer(BertPretrainer),
    huggingface=convert_bert.HUGGINGFACE, keras_hub=convert_bert.KERAS_HUB,
    tf_checkpoint=convert_bert.TF_CHECKPOINT,
    tiny=TINY_TRANSFORMER, objective=(BertPretrainer, ("next_sentence_labels",))))

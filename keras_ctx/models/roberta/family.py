"""RoBERTa (Liu et al. 2019): byte-level BPE, dynamic MLM over packed text, no NSP."""

from keras_ctx import optimizers
from keras_ctx.models.roberta import convert as convert_roberta
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.data.maskers import FAIRSEQ_NSPECIAL
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import FAIRSEQ_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models.bert import backbone as bert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import RobertaPretrainer
from keras_ctx.registry import Family, register_family

# Liu et al. 2019, Appendix Table 9: batch 8k, 500k steps, full 512-token sequences
# (Sec. 4.2), peak rate 6e-4 (base) / 4e-4 (large) after 24k / 30k warm-up steps;
# BERT's 15% masking, 80/10/10 (Sec. 2.3).
_ROBERTA = dict(batch_size=8192, sequence_length=512, steps=500_000, mask_rate=0.15,
                mask_token_rate=0.8, random_token_rate=0.1,
                stages=(Stage("dynamic MLM, full-length sequences", 0,
                              source="Liu et al. 2019, Sec. 4.1-4.2"),),
                source="Liu et al. 2019, Appendix Table 9")
ROBERTA_PRETRAINING = register_pretraining({
    "roberta-base": Pretraining(learning_rate=6e-4, warmup_steps=24_000, **_ROBERTA),
    "roberta-large": Pretraining(learning_rate=4e-4, warmup_steps=30_000, **_ROBERTA),
})

FAIRSEQ_MASKABLE = dict(maskable_specials=("cls", "sep"),  # <s>, </s>
                        random_token_low=FAIRSEQ_NSPECIAL)  # random ids never 0-3

ROBERTA = register_family(Family(
    "roberta", bert.RobertaBackbone, bert.ROBERTA_PRESETS, tokenizers.train_byte_level_bpe,
    FAIRSEQ_FRAMING, pooling=("sequence_output", "padding_mask", "first"),
    # fairseq MaskTokensDataset draws targets among every position of a block, <s> and
    # </s> included (docs/notes/data-references.md, RoBERTa).
    dataset=pipeline(pipelines.roberta_dataset, **FAIRSEQ_MASKABLE),
    prepared=layout(layouts.packed_layout, **FAIRSEQ_MASKABLE),
    pretrainer=pretrainer(RobertaPretrainer),
    huggingface=convert_roberta.HUGGINGFACE, keras_hub=convert_roberta.KERAS_HUB,
    optimizer=optimizers.roberta_recipe,
    tiny=TINY_TRANSFORMER, objective=(RobertaPretrainer, ())))

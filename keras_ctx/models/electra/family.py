"""ELECTRA (Clark et al. 2020): a small generator's MLM, replaced-token detection."""

from keras_ctx.models.electra import convert as convert_electra
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.data.masking import ELECTRA_MASK_TOKEN_RATE, ELECTRA_RANDOM_TOKEN_RATE
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import WORDPIECE_FRAMING, per_size, per_size_layout, published
from keras_ctx.models.electra import backbone as electra
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import ElectraPretrainer
from keras_ctx.registry import Family, register_family


# Each size as released: google-research/electra configure_pretraining.py at 8a46635
# (small's values, and base's / large's in its "larger models" block) and Clark et al.
# 2020, Table 6 (train steps; ELECTRA-large masks 25% of the tokens, not 15%).
_ELECTRA_SOURCE = ("google-research/electra configure_pretraining.py @8a46635; "
                   "Clark et al. 2020, Table 6")
ELECTRA_STAGES = (Stage("generator MLM + discriminator RTD, trained jointly", 0,
                        source="Clark et al. 2020, Sec. 3.1"),)
_ELECTRA = dict(warmup_steps=10_000, stages=ELECTRA_STAGES,
                mask_token_rate=ELECTRA_MASK_TOKEN_RATE,
                random_token_rate=ELECTRA_RANDOM_TOKEN_RATE, source=_ELECTRA_SOURCE)
ELECTRA_PRETRAINING = register_pretraining({
    "electra-small": Pretraining(learning_rate=5e-4, batch_size=128, sequence_length=128,
                                 steps=1_000_000, mask_rate=0.15, generator_fraction=1 / 4,
                                 **_ELECTRA),
    "electra-base": Pretraining(learning_rate=2e-4, batch_size=256, sequence_length=512,
                                steps=766_000, mask_rate=0.15, generator_fraction=1 / 3,
                                **_ELECTRA),
    "electra-large": Pretraining(learning_rate=2e-4, batch_size=2048, sequence_length=512,
                                 steps=400_000, mask_rate=0.25, generator_fraction=1 / 4,
                                 **_ELECTRA),
})


def electra_pretrainer(discriminator, tokenizer, run):
    """The generator at the preset's fraction of the discriminator's width (their Table 6)."""
    settings = published(run)
    fraction = settings.generator_fraction if settings else 0.25
    generator = electra.electra_generator(discriminator, hidden_fraction=fraction)
    return ElectraPretrainer(generator, discriminator, seed=run.seed)


# ELECTRA: two-segment examples of a document's sentences, no NSP
# (build_pretraining_dataset.py); the released masking (google-research/electra
# pretrain_helpers.mask): 85% [MASK], 15% unchanged.
_MASKING = dict(mask_token_rate=ELECTRA_MASK_TOKEN_RATE,
                random_token_rate=ELECTRA_RANDOM_TOKEN_RATE)


def _mask_rate(settings):
    # The size's masking rate (ELECTRA-large: 25%); BERT's 15% for a preset without.
    return {"mask_rate": settings.mask_rate} if settings else {}


ELECTRA = register_family(Family(
    "electra", electra.ElectraBackbone, electra.ELECTRA_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, dataset=per_size(pipelines.roberta_dataset, _mask_rate,
                                        packing="two_segments", **_MASKING),
    prepared=per_size_layout(layouts.packed_layout, _mask_rate, packing="two_segments",
                             **_MASKING),
    pretrainer=electra_pretrainer,
    huggingface=convert_electra.HUGGINGFACE, keras_hub=convert_electra.KERAS_HUB,
    tf_checkpoint=convert_electra.TF_CHECKPOINT,
    tiny=dict(TINY_TRANSFORMER, embedding_size=8), objective=(ElectraPretrainer, ())))

"""ELECTRA (Clark et al. 2020): a small generator's MLM, replaced-token detection."""

from keras_ctx.convert import electra as convert_electra
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.data.masking import ELECTRA_MASK_TOKEN_RATE, ELECTRA_RANDOM_TOKEN_RATE
from keras_ctx.families.common import WORDPIECE_FRAMING, layout, pipeline
from keras_ctx.models import electra
from keras_ctx.pretraining import ElectraPretrainer
from keras_ctx.registry import Family, register_family


def electra_pretrainer(discriminator, tokenizer, run):
    """The generator at the preset's fraction of the discriminator's width (their Table 6)."""
    fraction = electra.ELECTRA_GENERATOR_FRACTIONS.get(run.preset, 0.25)
    generator = electra.electra_generator(discriminator, hidden_fraction=fraction)
    return ElectraPretrainer(generator, discriminator, seed=run.seed)


# ELECTRA: two-segment examples of a document's sentences, no NSP
# (build_pretraining_dataset.py); the released masking (google-research/electra
# pretrain_helpers.mask): 85% [MASK], 15% unchanged.
_MASKING = dict(mask_token_rate=ELECTRA_MASK_TOKEN_RATE,
                random_token_rate=ELECTRA_RANDOM_TOKEN_RATE)

ELECTRA = register_family(Family(
    "electra", electra.ElectraBackbone, electra.ELECTRA_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, dataset=pipeline(pipelines.roberta_dataset, packing="two_segments",
                                        **_MASKING),
    prepared=layout(layouts.packed_layout, packing="two_segments", **_MASKING),
    pretrainer=electra_pretrainer,
    huggingface=convert_electra.HUGGINGFACE, keras_hub=convert_electra.KERAS_HUB,
    tf_checkpoint=convert_electra.TF_CHECKPOINT))

"""T5 (Raffel et al. 2020) and mT5: span corruption with sentinels, encoder-decoder."""

from keras_ctx import optimizers
from keras_ctx.models.t5 import convert as convert_t5
from keras_ctx.data import layouts, noise, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import T5_FRAMING, T5_SENTINELS, pretrainer, published
from keras_ctx.models.t5 import backbone as t5
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import Seq2SeqPretrainer
from keras_ctx.registry import Family, register_family


def _corruption(settings):
    # The size's span corruption (noise share, mean span), as its record says.
    if not settings:
        return {}
    return dict(noise_density=settings.mask_rate, mean_noise_span_length=settings.mean_span)


def _end_of_text(tokenizer):
    # T5's </s> (the family's SentencePiece, cc_all.32000's ids, and a converted T5's);
    # a tokenizer the family trained before issue 54 spells it [SEP]. SentencePiece
    # reads a piece it lacks as <unk>, so the spelling is looked up, not asked for.
    for spelling in T5_FRAMING.end[0]:
        if tokenizers.known_token_id(tokenizer, spelling) is not None:
            return spelling
    raise ValueError(f"The T5 tokenizer has no end-of-text piece {T5_FRAMING.end[0]}: train "
                     "it with the t5 family or convert a T5 checkpoint's.")


def _t5_read(tokenizer, run):
    return pipelines.span_corruption_example(tokenizer, run.sequence_length, T5_SENTINELS,
                                             _end_of_text(tokenizer),
                                             **_corruption(published(run)))


def _t5_dataset(documents, tokenizer, run):
    return pipelines.span_corruption_dataset(
        documents, tokenizer, run.batch_size, run.sequence_length, T5_SENTINELS,
        _end_of_text(tokenizer), run.seed, **_corruption(published(run)))


_t5_dataset.builder, _t5_dataset.sized = pipelines.span_corruption_dataset, _corruption


def _t5_layout(tokenizer, run):
    # Chunks of random_spans_helper's length for the size's noise (568 for 512, 15%, 3).
    length = noise.span_corruption_tokens_length(run.sequence_length,
                                                 **_corruption(published(run)))
    return layouts.chunks_layout(tokenizer, run, _t5_read, length=length)


# T5 (Raffel et al. 2020, Sec. 3.7: the released T5 models pretrained 1M steps on
# batches of 2^11 sequences of 512 tokens; Sec. 3.1.2: inverse square root rate
# 0.01 for the first 10^4 steps; Sec. 3.1.4: 15% noise, mean span 3). T5.1.1
# (text-to-text-transfer-transformer released_checkpoints.md) names no step count or
# batch. mT5 (Xue et al. 2021, Sec. 3: 1M steps, batches of 1024 sequences of 1024
# tokens, the same schedule and objective).
_SPAN_CORRUPTION = dict(mask_rate=0.15, mean_span=3.0)
_T5_STAGE = (Stage("span corruption", 0, source="Raffel et al. 2020, Sec. 3.1.4"),)
_T5 = Pretraining(learning_rate=0.01, batch_size=2048, sequence_length=512,
                  steps=1_000_000, warmup_steps=10_000, stages=_T5_STAGE,
                  source="Raffel et al. 2020, Sec. 3.1.2, 3.1.4 and 3.7", **_SPAN_CORRUPTION)
_T5_1_1 = Pretraining(learning_rate=0.01, sequence_length=512, warmup_steps=10_000,
                      stages=_T5_STAGE, **_SPAN_CORRUPTION,
                      source="text-to-text-transfer-transformer released_checkpoints.md "
                             "(T5.1.1: C4 only); Raffel et al. 2020, Sec. 3.1.2, 3.1.4")
_MT5_PRESETS = ("mt5-small", "mt5-base", "mt5-large", "mt5-xl", "mt5-xxl")
_MT5 = Pretraining(learning_rate=0.01, batch_size=1024, sequence_length=1024,
                   steps=1_000_000, warmup_steps=10_000, stages=_T5_STAGE,
                   source="Xue et al. 2021, Sec. 3", **_SPAN_CORRUPTION)
T5_PRETRAINING = register_pretraining({
    **dict.fromkeys(("t5-small", "t5-base", "t5-large", "t5-3b", "t5-11b"), _T5),
    **dict.fromkeys(("t5.1.1-small", "t5.1.1-base", "t5.1.1-large", "t5.1.1-xl",
                     "t5.1.1-xxl"), _T5_1_1),
    **dict.fromkeys(_MT5_PRESETS, _MT5)})

# mT5's SentencePiece (Xue et al. 2021, Sec. 3: "a character coverage of 0.99999" and
# SentencePiece's "byte-fallback", so that any string can be encoded; the released
# mc4.250000.100extra model). T5's and T5.1.1's keep cc_all.32000's (coverage 0.9995, no
# byte fallback): train_t5_sentencepiece's defaults.
_MT5_SENTENCEPIECE = dict(character_coverage=0.99999, byte_fallback=True)


def _tokenizer_options(run):
    return _MT5_SENTENCEPIECE if run.preset in _MT5_PRESETS else {}


# T5 classifies from its encoder (mean over real positions).
T5 = register_family(Family(
    "t5", t5.T5Backbone, t5.T5_PRESETS, tokenizers.train_t5_sentencepiece, T5_FRAMING,
    inputs="encoder_decoder",
    pooling=("encoder_sequence_output", "encoder_padding_mask", "mean"),
    word_vectors="encoder_sequence_output", extra_tokens=T5_SENTINELS,
    dataset=_t5_dataset,
    prepared=_t5_layout,
    pretrainer=pretrainer(Seq2SeqPretrainer), huggingface=convert_t5.HUGGINGFACE,
    optimizer=optimizers.t5_recipe,
    tiny=TINY_TRANSFORMER, objective=(Seq2SeqPretrainer, ()),
    tokenizer_options=_tokenizer_options))

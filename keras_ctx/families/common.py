"""What several families share: their framings, special tokens and recipe adapters.

The adapters turn a data builder or a pretrainer class (referenced directly,
never looked up by name) into the `(documents, tokenizer, Run)` /
`(backbone, tokenizer, Run)` callables a `Family` holds.
"""

import dataclasses
import functools

from keras_ctx.data import layouts
from keras_ctx.models import presets
from keras_ctx.registry import Framing

WORDPIECE_FRAMING = Framing(start=(("[CLS]",),), middle=(("[SEP]",),), end=(("[SEP]",),))
# fairseq: <s> A </s></s> B </s> (Liu et al. 2019; Lewis et al. 2020).
FAIRSEQ_FRAMING = Framing(start=(("<s>",),), middle=(("</s>",), ("</s>",)), end=(("</s>",),),
                          segments=1)
# BART's decoder starts with </s> (fairseq).
BART_FRAMING = dataclasses.replace(FAIRSEQ_FRAMING, decoder_start=(("</s>",),),
                                   stop=(("</s>",),))
# XLNet: A <sep> B <sep> <cls>, the summary token last (Yang et al. 2019) in a segment
# of its own: SEG_ID_CLS = 2 (zihangdai/xlnet classifier_utils.py @bbaa3a6), so its
# relative segment encoding differs from both texts'.
XLNET_FRAMING = Framing(middle=(("[SEP]", "<sep>"),),
                        end=(("[SEP]", "<sep>"), ("[CLS]", "<cls>")), summary_segment=2)
# GPT-2: no start token; a pair is joined by <|endoftext|>.
GPT_FRAMING = Framing(middle=(("<|endoftext|>",),), segments=1,
                      stop=(("<|endoftext|>",),))
# T5: text </s> (Raffel et al. 2020); a T5 tokenizer keras_ctx trained before issue 54
# spells </s> [SEP] (each spelling is looked up: preprocessing.token_id).
T5_FRAMING = Framing(middle=(("</s>", "[SEP]"),), end=(("</s>", "[SEP]"),), segments=1,
                     decoder_start=(("<pad>", "[PAD]"),), stop=(("</s>", "[SEP]"),))

# XLNet's SentencePiece (its README's spm_train): cased, control symbols
# <cls> <sep> <pad> <mask> <eod> (spelled as keras_ctx's pipelines find them).
XLNET_SPECIAL_TOKENS = ("<pad>", "<unk>", "[CLS]", "[SEP]", "<mask>", "<eod>")

GPT_END_OF_TEXT = "<|endoftext|>"
T5_SENTINELS = 100  # <extra_id_0..99> after the SentencePiece vocabulary (Raffel et al.)

# What a transformer family's `Family.tiny` shrinks its preset to.
TINY_TRANSFORMER = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32)

POOLED = ("pooled_output", "padding_mask", "pooled")
LAST = ("sequence_output", "padding_mask", "last")


def pipeline(builder, **options):
    """`builder(documents, tokenizer, batch_size=, sequence_length=, seed=, **options)`
    as a `Family.dataset`: (documents, tokenizer, Run) -> tf.data."""
    def build(documents, tokenizer, run):
        return builder(documents, tokenizer, batch_size=run.batch_size,
                       sequence_length=run.sequence_length, seed=run.seed, **options)

    build.builder, build.options = builder, options  # what the recipe runs, for tests
    return build


def layout(builder, **options):
    """`builder(tokenizer, run, **options)` as a `Family.prepared`."""
    return functools.partial(builder, **options)


def chunks(read, shorter=0, end_token=None, chunk_length=None):
    """The token-chunk layout (GPT, T5, BART): `read(tokenizer, run)` maps a chunk when read.

    Chunks of `chunk_length(sequence_length)` tokens, or sequence_length - `shorter`.
    """
    def build(tokenizer, run):
        length = (chunk_length(run.sequence_length) if chunk_length
                  else run.sequence_length - shorter)
        return layouts.chunks_layout(tokenizer, run, read, end_token=end_token, length=length)

    return build


def pretrainer(objective):
    """A Pretrainer class that takes only the backbone, as a `Family.pretrainer`."""
    def build(backbone, tokenizer, run):
        return objective(backbone)

    return build


def published(run):
    """The run's preset's published `Pretraining` settings, or None (a preset without),
    with the data settings the user changed (`Run.data`) in place of the published ones."""
    record = presets.pretraining(run.preset, required=False)
    if record is not None and run.data:
        record = dataclasses.replace(record, **dict(run.data))
    return record


class _Reads:
    """A `Pretraining` that notes which fields a recipe's `sized` reads."""

    def __init__(self, record):
        self.record, self.read = record, set()

    def __getattr__(self, name):
        self.read.add(name)
        return getattr(self.record, name)


def data_settings(family, preset):
    """The `Pretraining` fields `family`'s recipe reads for its data (what `--set` may
    change for a run of `preset`), sorted; () where its data ignores the record."""
    sized, record = getattr(family.dataset, "sized", None), presets.pretraining(preset, False)
    if sized is None or record is None:
        return ()
    probe = _Reads(record)
    sized(probe)
    return tuple(sorted(probe.read))


def per_size(builder, sized, **options):
    """`builder` as a `Family.dataset` whose options also depend on the run's preset:
    `sized(Pretraining or None) -> {option: value}` (a size's published masking rate)."""
    def build(documents, tokenizer, run):
        return builder(documents, tokenizer, batch_size=run.batch_size,
                       sequence_length=run.sequence_length, seed=run.seed,
                       **options, **sized(published(run)))

    build.builder, build.options, build.sized = builder, options, sized
    return build


def per_size_layout(builder, sized, **options):
    """As `per_size`, a `Family.prepared` layout: `builder(tokenizer, run, **options)`."""
    def build(tokenizer, run):
        return builder(tokenizer, run, **options, **sized(published(run)))

    build.builder, build.options, build.sized = builder, options, sized
    return build

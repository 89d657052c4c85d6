"""The family registry: everything keras_ctx knows about a model family, in one place.

A `Family` owns its backbone class, its presets (data; each carries its
family), how its tokenizer is trained and which special tokens it has, how a
text or a pair of texts becomes ids (`Framing`), how a classifier pools its
output, its pretraining dataset and pretrainer, and which checkpoint formats
name it (Hugging Face `model_type`s, keras-hub backbone classes, the
google-research TF checkpoint layout). Everything else (the CLI, recipes,
preprocessing, tasks, converters) reads this registry; nothing else keeps a
list of families or branches on a family's name.

A new family is one module under `keras_ctx/models/` (and its converters)
plus one `register_family(Family(...))` call:

    register_family(Family(
        name="toy", backbone=ToyBackbone, presets={"toy-tiny": (config, "a toy")},
        train_tokenizer=tokenizers.train_wordpiece, framing=BERT_FRAMING,
        dataset=lambda documents, tokenizer, run: pipelines.roberta_dataset(...),
        pretrainer=lambda backbone, tokenizer, run: MaskedLMPretrainer(backbone)))
"""

import dataclasses
from typing import Callable, Optional

from keras_ctx.models import presets as _presets


@dataclasses.dataclass(frozen=True)
class Framing:
    """How one text, or a pair, becomes one row of ids.

    single: start + a + end;  pair: start + a + middle + b + end. Each token
    is a tuple of spellings; the first one the vocabulary has is used (a
    tokenizer trained here and a converted one may spell [SEP] as </s>).
    Segment ids are 0 up to and including `middle`, 1 after it, for
    families with two segment rows; single-segment families take none.
    Encoder-decoders' decoders read `decoder_start` then the text shifted.
    """

    start: tuple = ()
    middle: tuple = ()
    end: tuple = ()
    pad: tuple = (("[PAD]", "<pad>"),)
    segments: int = 2
    decoder_start: tuple = ()


@dataclasses.dataclass(frozen=True)
class Run:
    """The sizes a pretraining recipe builds with (what `keras-ctx pretrain` takes)."""

    preset: str
    batch_size: int
    sequence_length: int
    vocabulary_size: int
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family. See the module docstring.

    Args:
        name: the family's name, recorded in run directories.
        backbone: its backbone class.
        presets: {preset name: (config, description)}.
        train_tokenizer: (sentences tf.data, vocabulary_size) -> a keras-hub
            tokenizer (or a word vocabulary list, ELMo). None: no recipe.
        framing: how texts become ids (`Framing`); None for character inputs.
        inputs: "tokens" (token_ids + padding_mask), "characters" (ELMo) or
            "encoder_decoder" (T5, BART).
        pooling: how a classifier reads the backbone: (output name, mask
            name, mode) with mode "pooled", "first", "last", "mean" or "concat",
            and optionally a 4th item, the activation of a dense layer between
            the pooled vector and the logits (BART's "tanh" head).
        word_vectors: the output `keras-ctx embed` reads a word's vectors
            from, one position per input id (encoder-decoders: the encoder's,
            whose positions are the text's; the decoder's are shifted).
        extra_tokens: ids after the tokenizer's vocabulary (T5's sentinels).
        sized_by_tokenizer: whether the backbone's vocabulary_size is the
            trained tokenizer's (+ extra_tokens); ELMo reads characters.
        dataset: (documents, tokenizer, Run) -> tf.data of pretraining batches.
        prepared: (tokenizer, Run) -> a `keras_ctx.data.pipelines.Layout`: how
            `keras-ctx prepare` writes the family's examples to shards and how
            `pretrain --data` reads them. None: no prepared path yet.
        pretrainer: (backbone, tokenizer, Run) -> a Pretrainer.
        no_pretraining: why `keras-ctx pretrain` has no recipe (CoVe).
        huggingface: Hugging Face model_types; the first is what
            `to_huggingface` writes by default.
        keras_hub: keras-hub backbone class names `from_keras_hub` reads.
        tf_checkpoint: the google-research checkpoint layout name
            (keras_ctx.convert.tensorflow), or None.
        run_files: tokenizer -> (tokenizer to save, extra run.json info);
            ELMo keeps its word vocabulary in run.json.
        matches: backbone -> bool, where families share a backbone class
            and differ in its architecture (GPT is post-LN, GPT-2 pre-LN).
        recipe_config: Run -> backbone config values the pretraining recipe
            sets from the run's sizes (XLNet's memory length); `--set` wins.
    """

    name: str
    backbone: type
    presets: dict = dataclasses.field(default_factory=dict)
    train_tokenizer: Optional[Callable] = None
    framing: Optional[Framing] = None
    inputs: str = "tokens"
    pooling: tuple = ("sequence_output", "padding_mask", "first")
    word_vectors: str = "sequence_output"
    extra_tokens: int = 0
    sized_by_tokenizer: bool = True
    dataset: Optional[Callable] = None
    prepared: Optional[Callable] = None
    pretrainer: Optional[Callable] = None
    no_pretraining: str = ""
    huggingface: tuple = ()
    keras_hub: tuple = ()
    tf_checkpoint: Optional[str] = None
    run_files: Callable = lambda tokenizer: (tokenizer, {})
    matches: Optional[Callable] = None
    recipe_config: Callable = lambda run: {}


_FAMILIES = {}


def register_family(family):
    """Adds `family` and registers its presets; names are unique."""
    if family.name in _FAMILIES:
        raise ValueError(f"Family {family.name!r} is registered twice.")
    _FAMILIES[family.name] = family
    for preset, (config, description) in family.presets.items():
        _presets.register_preset(preset, family.backbone, config, description,
                                 family=family.name)
    return family


def unregister_family(name):
    """Removes a family and its presets (for tests that add toy families)."""
    family = _FAMILIES.pop(name)
    for preset in family.presets:
        _presets.unregister_preset(preset)


def get(name):
    """The `Family` called `name`, with a clear error if unknown."""
    if name not in _FAMILIES:
        raise ValueError(f"Unknown model family {name!r}; known: {', '.join(names())}.")
    return _FAMILIES[name]


def names():
    return sorted(_FAMILIES)


def of_preset(preset):
    """The `Family` of a preset name (from the preset's own data)."""
    return get(_presets.preset_family(preset))


def of_backbone(backbone):
    """The `Family` of a backbone: its `family` attribute if it has one (set by the
    converters), else the first family registered for its class; None if none."""
    name = getattr(backbone, "family", None)
    if isinstance(name, str):
        return get(name)
    for family in _FAMILIES.values():
        if type(backbone) is family.backbone and (family.matches is None
                                                  or family.matches(backbone)):
            return family
    return None


def _find(what, value):
    for family in _FAMILIES.values():
        if value in getattr(family, what):
            return family
    return None


def of_huggingface(model_type):
    """The `Family` whose checkpoints carry this Hugging Face model_type, or None."""
    return _find("huggingface", model_type)


def of_keras_hub(class_name):
    """The `Family` a keras-hub backbone class converts to, or None."""
    return _find("keras_hub", class_name)


def with_tf_checkpoints():
    """Families with a google-research TF checkpoint layout, by layout name."""
    return {f.tf_checkpoint: f for f in _FAMILIES.values() if f.tf_checkpoint}


# ---------------------------------------------------------------- framings

WORDPIECE_FRAMING = Framing(start=(("[CLS]",),), middle=(("[SEP]",),), end=(("[SEP]",),))
# fairseq: <s> A </s></s> B </s> (Liu et al. 2019; Lewis et al. 2020).
FAIRSEQ_FRAMING = Framing(start=(("<s>",),), middle=(("</s>",), ("</s>",)), end=(("</s>",),),
                          segments=1)
# BART's decoder starts with </s> (fairseq).
BART_FRAMING = dataclasses.replace(FAIRSEQ_FRAMING, decoder_start=(("</s>",),))
# XLNet: A <sep> B <sep> <cls>, the summary token last (Yang et al. 2019).
XLNET_FRAMING = Framing(middle=(("[SEP]", "<sep>"),),
                        end=(("[SEP]", "<sep>"), ("[CLS]", "<cls>")))
# GPT-2: no start token; a pair is joined by <|endoftext|>.
GPT_FRAMING = Framing(middle=(("<|endoftext|>",),), segments=1)
# T5: text </s> (Raffel et al. 2020); our trained SentencePiece spells </s> [SEP].
T5_FRAMING = Framing(middle=(("</s>", "[SEP]"),), end=(("</s>", "[SEP]"),), segments=1,
                     decoder_start=(("<pad>", "[PAD]"),))

# XLNet's SentencePiece (its README's spm_train): cased, control symbols
# <cls> <sep> <pad> <mask> <eod> (spelled as keras_ctx's pipelines find them).
XLNET_SPECIAL_TOKENS = ("<pad>", "<unk>", "[CLS]", "[SEP]", "<mask>", "<eod>")

GPT_END_OF_TEXT = "<|endoftext|>"
T5_SENTINELS = 100  # <extra_id_0..99> after the SentencePiece vocabulary (Raffel et al.)


# ---------------------------------------------------------------- recipes
# Lazy imports: the registry is read at `import keras_ctx.models`; the data
# and pretraining packages load only when a recipe runs.

def _tokenizer(kind, **kwargs):
    def train(sentences, vocabulary_size):
        from keras_ctx.data import tokenizers

        return getattr(tokenizers, kind)(sentences, vocabulary_size, **kwargs)

    return train


def _pipeline(builder, **kwargs):
    def build(documents, tokenizer, run):
        from keras_ctx.data import pipelines

        return getattr(pipelines, builder)(documents, tokenizer, batch_size=run.batch_size,
                                           sequence_length=run.sequence_length,
                                           seed=run.seed, **kwargs)

    return build


def _layout(builder, **kwargs):
    def build(tokenizer, run):
        from keras_ctx.data import pipelines

        return getattr(pipelines, builder)(tokenizer, run, **kwargs)

    return build


def _chunks(read, shorter=0, end_token=None):
    """The token-chunk layout (GPT, T5, BART): `read(tokenizer, run)` maps a chunk when read."""
    def build(tokenizer, run):
        from keras_ctx.data import pipelines

        return pipelines.chunks_layout(tokenizer, run, read, end_token=end_token,
                                       length=run.sequence_length - shorter)

    return build


def _causal_read(tokenizer, run):
    from keras_ctx.data import pipelines

    return pipelines.causal_lm_example


def _t5_read(tokenizer, run):
    from keras_ctx.data import pipelines

    return pipelines.span_corruption_example(tokenizer, run.sequence_length, T5_SENTINELS)


def _bart_read(tokenizer, run):
    from keras_ctx.data import pipelines

    # BART's chunks leave room for <s> and </s> (pipelines.denoising_dataset).
    return pipelines.denoising_example(tokenizer, run.sequence_length)


def _pretrainer(name):
    def build(backbone, tokenizer, run):
        import keras_ctx.pretraining as pretraining

        return getattr(pretraining, name)(backbone)

    return build


def _xlnet_pretrainer(backbone, tokenizer, run):
    from keras_ctx.data.permutation import default_reuse_len
    from keras_ctx.pretraining import XLNetPretrainer

    # As pipelines.permutation_dataset lays the data out (XLNet's data_utils.py).
    return XLNetPretrainer(backbone, batch_size=run.batch_size,
                           reuse_len=default_reuse_len(run.sequence_length))


def _xlnet_recipe_config(run):
    # The released pretraining (zihangdai/xlnet README: --seq_len=512
    # --mem_len=384): a memory of 3/4 of the sequence, carried across batches.
    return {"mem_len": run.sequence_length * 3 // 4}


def _electra_pretrainer(discriminator, tokenizer, run):
    from keras_ctx.models.electra import ELECTRA_GENERATOR_FRACTIONS, electra_generator
    from keras_ctx.pretraining.electra import ElectraPretrainer

    # Clark et al. 2020: the generator is a fraction of the discriminator's
    # width (their Table 6).
    fraction = ELECTRA_GENERATOR_FRACTIONS.get(run.preset, 0.25)
    generator = electra_generator(discriminator, hidden_fraction=fraction)
    return ElectraPretrainer(generator, discriminator, seed=run.seed)


def _electra_dataset(documents, tokenizer, run):
    from keras_ctx.data.masking import ELECTRA_MASK_TOKEN_RATE, ELECTRA_RANDOM_TOKEN_RATE

    return _pipeline("roberta_dataset", mask_token_rate=ELECTRA_MASK_TOKEN_RATE,
                     random_token_rate=ELECTRA_RANDOM_TOKEN_RATE)(documents, tokenizer, run)


def _electra_layout(tokenizer, run):
    from keras_ctx.data.masking import ELECTRA_MASK_TOKEN_RATE, ELECTRA_RANDOM_TOKEN_RATE

    return _layout("packed_layout", mask_token_rate=ELECTRA_MASK_TOKEN_RATE,
                   random_token_rate=ELECTRA_RANDOM_TOKEN_RATE)(tokenizer, run)


def _word_vocabulary(sentences, vocabulary_size):
    from keras_ctx.data.vocabulary import word_vocabulary

    return word_vocabulary(sentences, vocabulary_size)


def _bilm_dataset(documents, vocabulary, run):
    from keras_ctx.data import pipelines

    return pipelines.bilm_dataset(documents, vocabulary, run.batch_size, run.sequence_length,
                                  seed=run.seed)


def _bilm_pretrainer(backbone, vocabulary, run):
    from keras_ctx.pretraining import bilm

    return bilm.BiLMPretrainer(backbone, len(vocabulary),
                               num_sampled=min(bilm.NUM_SAMPLED, len(vocabulary) // 2))


# ---------------------------------------------------------------- the families

def _banded(backbone):
    return "local" in getattr(backbone, "attention_types", ())


def _register_builtin():
    from keras_ctx.models import (albert, awd_lstm, bart, bert, cove, electra, elmo, ernie, gpt,
                                  t5, xlm, xlnet)

    pooled = ("pooled_output", "padding_mask", "pooled")
    last = ("sequence_output", "padding_mask", "last")
    wordpiece = _tokenizer("train_wordpiece")
    # BERT: static masks pay off over many epochs of a fixed corpus; short
    # runs mask dynamically.
    register_family(Family(
        "bert", bert.BertBackbone, bert.BERT_PRESETS, wordpiece, WORDPIECE_FRAMING,
        pooling=pooled, dataset=_pipeline("bert_dataset", static_masking=False),
        # Prepared: static masks, as BERT's create_pretraining_data.py (dupe_factor 10).
        prepared=_layout("pairs_layout", kind="nsp", static_masking=True, duplicate=10),
        pretrainer=_pretrainer("BertPretrainer"), huggingface=("bert",),
        keras_hub=("BertBackbone",), tf_checkpoint="bert"))
    register_family(Family(
        "roberta", bert.RobertaBackbone, bert.ROBERTA_PRESETS,
        _tokenizer("train_byte_level_bpe"), FAIRSEQ_FRAMING,
        pooling=("sequence_output", "padding_mask", "first"),
        dataset=_pipeline("roberta_dataset"), prepared=_layout("packed_layout"),
        pretrainer=_pretrainer("RobertaPretrainer"),
        huggingface=("roberta",), keras_hub=("RobertaBackbone",)))
    # mBERT (Devlin et al., multilingual/README.md): BERT's network and
    # objective (MLM + NSP) over a shared WordPiece vocabulary; its cased
    # release is the recommended one, so its tokenizer keeps case.
    register_family(Family(
        "mbert", bert.BertBackbone, bert.MBERT_PRESETS,
        _tokenizer("train_wordpiece", lowercase=False), WORDPIECE_FRAMING,
        pooling=pooled, dataset=_pipeline("bert_dataset", static_masking=False),
        prepared=_layout("pairs_layout", kind="nsp", static_masking=True, duplicate=10),
        pretrainer=_pretrainer("BertPretrainer")))
    register_family(Family(
        "spanbert", bert.BertBackbone, bert.SPANBERT_PRESETS, wordpiece, WORDPIECE_FRAMING,
        pooling=pooled, dataset=_pipeline("spanbert_dataset"),
        prepared=_layout("packed_layout", spans=True),
        pretrainer=_pretrainer("SpanBertPretrainer")))
    register_family(Family(
        "albert", albert.AlbertBackbone, albert.ALBERT_PRESETS,
        _tokenizer("train_sentencepiece"), WORDPIECE_FRAMING, pooling=pooled,
        dataset=_pipeline("albert_dataset"), pretrainer=_pretrainer("AlbertPretrainer"),
        prepared=_layout("pairs_layout", kind="sop", whole_word_masking=True, max_ngram=3),
        huggingface=("albert",), keras_hub=("AlbertBackbone",), tf_checkpoint="albert"))
    # ELECTRA: packed text, no NSP (Clark et al. 2020); the released masking
    # (google-research/electra pretrain_helpers.mask): 85% [MASK], 15% unchanged.
    register_family(Family(
        "electra", electra.ElectraBackbone, electra.ELECTRA_PRESETS, wordpiece,
        WORDPIECE_FRAMING,
        dataset=_electra_dataset, prepared=_electra_layout,
        pretrainer=_electra_pretrainer, huggingface=("electra",),
        keras_hub=("ElectraBackbone",), tf_checkpoint="electra"))
    # ERNIE 1.0 (Sun et al. 2019): BERT's network and NSP, knowledge masking
    # in stages. `keras-ctx pretrain` has no chunker / NER: its phrases are the
    # corpus' collocations and it has no entity stage (entity lexicons go
    # through keras_ctx.data.pipelines.ernie_dataset).
    register_family(Family(
        "ernie", bert.BertBackbone, ernie.ERNIE_PRESETS, wordpiece, WORDPIECE_FRAMING,
        pooling=pooled, dataset=_pipeline("ernie_dataset", phrases="collocations"),
        pretrainer=_pretrainer("BertPretrainer"), huggingface=("ernie",)))
    register_family(Family(
        "xlnet", xlnet.XLNetBackbone, xlnet.XLNET_PRESETS, _tokenizer(
            "train_sentencepiece", special_tokens=XLNET_SPECIAL_TOKENS, lowercase=False),
        XLNET_FRAMING,
        pooling=last, dataset=_pipeline("permutation_dataset"),
        prepared=_layout("xlnet_layout"),
        pretrainer=_xlnet_pretrainer, huggingface=("xlnet",), keras_hub=("XLNetBackbone",),
        tf_checkpoint="xlnet", recipe_config=_xlnet_recipe_config))
    # GPT (Radford et al. 2018): BPE with end-of-word markers (</w>), not bytes.
    register_family(Family(
        "gpt", gpt.GPTBackbone, gpt.GPT_PRESETS,
        _tokenizer("train_word_end_bpe", special_tokens=(GPT_END_OF_TEXT,)), GPT_FRAMING,
        pooling=last, dataset=_pipeline("causal_lm_dataset", end_token=GPT_END_OF_TEXT),
        prepared=_chunks(_causal_read, end_token=GPT_END_OF_TEXT),
        pretrainer=_pretrainer("CausalLMPretrainer"), huggingface=("openai-gpt",),
        matches=lambda backbone: not backbone.normalize_first))
    register_family(Family(
        "gpt2", gpt.GPTBackbone, gpt.GPT2_PRESETS,
        _tokenizer("train_byte_level_bpe", special_tokens=(GPT_END_OF_TEXT,)), GPT_FRAMING,
        pooling=last, dataset=_pipeline("causal_lm_dataset", end_token=GPT_END_OF_TEXT),
        prepared=_chunks(_causal_read, end_token=GPT_END_OF_TEXT),
        pretrainer=_pretrainer("CausalLMPretrainer"), huggingface=("gpt2",),
        keras_hub=("GPT2Backbone",),
        matches=lambda backbone: backbone.normalize_first and not _banded(backbone)))
    # GPT-3 (Brown et al. 2020): GPT-2 with alternating dense / banded layers.
    register_family(Family(
        "gpt3", gpt.GPTBackbone, gpt.GPT3_PRESETS,
        _tokenizer("train_byte_level_bpe", special_tokens=(GPT_END_OF_TEXT,)), GPT_FRAMING,
        pooling=last, dataset=_pipeline("causal_lm_dataset", end_token=GPT_END_OF_TEXT),
        prepared=_chunks(_causal_read, end_token=GPT_END_OF_TEXT),
        pretrainer=_pretrainer("CausalLMPretrainer"),
        matches=lambda backbone: _banded(backbone) and backbone.attention_scale is None))
    # GPT-Neo: GPT-3's pattern as EleutherAI released it (unscaled scores).
    register_family(Family(
        "gpt_neo", gpt.GPTBackbone, gpt.GPT_NEO_PRESETS,
        _tokenizer("train_byte_level_bpe", special_tokens=(GPT_END_OF_TEXT,)), GPT_FRAMING,
        pooling=last, dataset=_pipeline("causal_lm_dataset", end_token=GPT_END_OF_TEXT),
        prepared=_chunks(_causal_read, end_token=GPT_END_OF_TEXT),
        pretrainer=_pretrainer("CausalLMPretrainer"), huggingface=("gpt_neo",),
        matches=lambda backbone: _banded(backbone) and backbone.attention_scale is not None))
    # XLM (Lample & Conneau 2019): its inputs add language ids and explicit
    # positions, which the one-text path does not make; it pretrains from Python
    # (keras_ctx.data.multilingual streams and TLM pairs).
    register_family(Family(
        "xlm", xlm.XLMBackbone, xlm.XLM_PRESETS, huggingface=("xlm",),
        no_pretraining="XLM pretrains from Python: keras_ctx.data.multilingual "
                       "(text_stream, tlm_pairs) with keras_ctx.pretraining."))
    # T5 classifies from its encoder; BART from the decoder state at the final
    # </s> (Lewis et al. 2020, Sec. 3.1), the last real decoder position (the
    # decoder reads the text shifted right, so it sits where the encoder's
    # final </s> does), through dense + tanh as BartClassificationHead.
    register_family(Family(
        "t5", t5.T5Backbone, t5.T5_PRESETS, _tokenizer("train_sentencepiece"), T5_FRAMING,
        inputs="encoder_decoder",
        pooling=("encoder_sequence_output", "encoder_padding_mask", "mean"),
        word_vectors="encoder_sequence_output", extra_tokens=T5_SENTINELS,
        dataset=_pipeline("span_corruption_dataset", num_sentinels=T5_SENTINELS),
        prepared=_chunks(_t5_read),
        pretrainer=_pretrainer("Seq2SeqPretrainer"), huggingface=("t5", "mt5")))
    register_family(Family(
        "bart", bart.BartBackbone, bart.BART_PRESETS, _tokenizer("train_byte_level_bpe"),
        BART_FRAMING, inputs="encoder_decoder",
        pooling=("decoder_sequence_output", "decoder_padding_mask", "last", "tanh"),
        word_vectors="encoder_sequence_output", dataset=_pipeline("denoising_dataset"),
        prepared=_chunks(_bart_read, shorter=2), pretrainer=_pretrainer("Seq2SeqPretrainer"),
        huggingface=("bart",), keras_hub=("BartBackbone",)))
    register_family(Family(
        "elmo", elmo.ElmoBackbone, elmo.ELMO_PRESETS, _word_vocabulary, inputs="characters",
        pooling=("sequence_output", "padding_mask", "mean"), sized_by_tokenizer=False,
        dataset=_bilm_dataset, prepared=_layout("bilm_layout"),
        pretrainer=_bilm_pretrainer,
        run_files=lambda vocabulary: (None, {"vocabulary": vocabulary})))
    register_family(Family(
        "cove", cove.CoveBackbone, cove.COVE_PRESETS, inputs="words",
        pooling=("sequence_output", "padding_mask", "mean"),
        no_pretraining="CoVe trains on a parallel corpus: see examples/cove_translate.py "
                       "and keras_ctx.pretraining.TranslationPretrainer."))
    # ULMFiT classifies from concat pooling (Howard & Ruder 2018, Sec. 3.3).
    register_family(Family(
        "awd_lstm", awd_lstm.AwdLstmBackbone, awd_lstm.AWD_LSTM_PRESETS,
        pooling=("sequence_output", "padding_mask", "concat"),
        no_pretraining="AWD-LSTM trains in `keras-ctx ulmfit` "
                       "(keras_ctx.recipes_ulmfit_cvt: word vocabulary, AR/TAR, STLR)."))


_register_builtin()

"""The family registry: `Family`, `Framing`, `Run`, and register / look up.

A leaf: it imports nothing else of keras_ctx, so models, presets,
preprocessing, tasks and the converters may all read it. What it holds is
filled in by each family's folder, `keras_ctx/models/<family>/`, whose
family.py imports the model, pipelines, pretrainer and converters and
registers the family once (`keras_ctx.families` imports every family.py);
nothing else keeps a list of families or branches on a family's name.

A new family is one folder (and tests): backbone.py (its model and presets),
convert.py (the Hugging Face map, keras-hub class, TF-checkpoint layout and
heads, as `HUGGINGFACE`, `KERAS_HUB`, `TF_CHECKPOINT` specs; ELMo's allennlp
files as `ALLENNLP`) and family.py,
which names them by reference and registers them with one call:

    register_family(Family(
        name="toy", backbone=ToyBackbone, presets={"toy-tiny": (config, "a toy")},
        train_tokenizer=tokenizers.train_wordpiece, framing=WORDPIECE_FRAMING,
        dataset=toy_dataset, pretrainer=lambda backbone, tokenizer, run: ...,
        huggingface=(HuggingFace("toy", convert=convert_toy, export=export_toy),)))
"""

import dataclasses
from typing import Callable, Optional


@dataclasses.dataclass(frozen=True)
class Framing:
    """How one text, or a pair, becomes one row of ids.

    single: start + a + end;  pair: start + a + middle + b + end. Each token
    is a tuple of spellings; the first one the vocabulary has is used (a
    tokenizer trained here and a converted one may spell [SEP] as </s>).
    Segment ids are 0 up to and including `middle`, 1 after it, for
    families with two segment rows; single-segment families take none.
    Encoder-decoders' decoders read `decoder_start` then the text shifted.
    `stop`: the tokens that end a generated text (the first one the
    vocabulary has of each); none: generation runs to max_length.
    `prompt_start`: the tokens a generated text's prompt opens with, as the
    pretraining text opened each sentence (XLM's CLM streams: </s>); none: the
    prompt's own pieces (GPT's).
    `summary_segment`: the segment id of the last `end` token where the family gives
    it one of its own (XLNet's <cls>: 2); None: the last text's.
    """

    start: tuple = ()
    middle: tuple = ()
    end: tuple = ()
    pad: tuple = (("[PAD]", "<pad>"),)
    segments: int = 2
    decoder_start: tuple = ()
    stop: tuple = ()
    # Rows also carry position_ids 0.. and language_ids 0 (XLM's explicit inputs).
    positions: bool = False
    prompt_start: tuple = ()
    summary_segment: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Run:
    """The sizes a pretraining recipe builds with (what `keras-ctx pretrain` takes)."""

    preset: str
    batch_size: int
    sequence_length: int
    vocabulary_size: int
    seed: int = 0
    # The preset's published data settings the user changed (`--set mean_span=3.0`:
    # `keras_ctx.models.presets.Pretraining` fields), as sorted (name, value) pairs.
    data: tuple = ()
    # Inputs a multilingual recipe reads (XLM's languages, corpora, parallel files), as pairs.
    inputs: tuple = ()


@dataclasses.dataclass(frozen=True)
class HuggingFace:
    """One Hugging Face `model_type` a family reads (and writes).

    Args:
        model_type: config.json's `model_type`.
        convert: (config dict, {name: tensor} or None, source=...) -> backbone
            (`keras_ctx.convert.huggingface.mapped_converter` builds one).
        export: backbone -> (config dict, {name: numpy tensor}); None: read only.
        masked_lm: the *ForMaskedLM head's tensor names
            (`keras_ctx.convert.heads.MaskedLMLayout`), or None.
        heads: the other heads of its pretraining objective a *ForPreTraining checkpoint
            holds (`keras_ctx.convert.heads.HeadLayout`: BERT's NSP, ALBERT's SOP,
            ELECTRA's discriminator head), which `convert` and `pretrain --from` keep.
        sequence_classifier: (transform Linear or None, logits Linear) prefixes
            of its *ForSequenceClassification head, or None.
        token_classifier: whether its *ForTokenClassification head (one
            `classifier` Linear) is read.
        text: for a family whose Hugging Face tokenizer rewrites text before the model
            reads it (ALBERT's and XLNet's `preprocess_text` on SentencePiece, XLM's
            Moses on "</w>" BPE), that tokenizer's defaults ({"do_lower_case": ...,
            "keep_accents": ...}; XLM's {"do_lowercase_and_remove_accent": ...}), which
            tokenizer_config.json's fields override; None: the model reads text as it
            comes (T5, GPT).
        tokenizer_config: (config.json's fields, tokenizer_config.json's) -> config.json's
            fields with the model settings a checkpoint may keep on its tokenizer's side
            filled in (XLM's lang2id / id2lang, which transformers' XLMTokenizer takes);
            None: config.json holds every setting.
    """

    model_type: str
    convert: Callable
    export: Optional[Callable] = None
    masked_lm: Optional[object] = None
    heads: tuple = ()
    sequence_classifier: Optional[tuple] = None
    token_classifier: bool = False
    text: Optional[dict] = None
    tokenizer_config: Optional[Callable] = None


@dataclasses.dataclass(frozen=True)
class KerasHub:
    """One keras-hub backbone class a family's weights transfer from.

    Args:
        class_name: the keras-hub class (`keras_hub.models.BertBackbone`).
        convert: (keras-hub backbone, its get_config()) -> (our backbone,
            [weight-map Entry], optional ignored-path patterns).
    """

    class_name: str
    convert: Callable


@dataclasses.dataclass(frozen=True)
class AllenNLP:
    """The allennlp checkpoint files a family reads and writes (ELMo's options json + hdf5).

    Args:
        convert: (options file, weight file) -> backbone.
        export: (backbone, options file, weight file, overwrite=False) -> None.
    """

    convert: Callable
    export: Callable


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family. See the module docstring.

    Args:
        name: the family's name, recorded in run directories.
        backbone: its backbone class.
        presets: {preset name: (config, description)}.
        train_tokenizer: (sentences tf.data, vocabulary_size, **tokenizer_options(run))
            -> a keras-hub tokenizer (or a word vocabulary list, ELMo). None: no recipe.
        tokenizer_options: Run -> the keyword arguments of `train_tokenizer` the run's
            preset sets, where a size's authors trained their tokenizer otherwise
            (mT5's byte fallback); {} for most.
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
        dataset: (documents, tokenizer, Run) -> tf.data of pretraining batches. A recipe
            that reads more than one --corpus says so on the function: `check_inputs`
            (checks --languages / --parallel, and --glove where `check_inputs.reads_glove`,
            into Run.inputs: XLM's, CoVe's), `tokenizer_text` (Run -> the sentences its
            tokenizer learns from, instead of the corpus': CoVe's pairs) and `needs` (the
            inputs it cannot run without, which the tests' --corpus-only runs skip).
        prepared: (tokenizer, Run) -> a `keras_ctx.data.layouts.Layout`: how
            `keras-ctx prepare` writes the family's examples to shards and how
            `pretrain --data` reads them. None: no prepared path yet.
        pretrainer: (backbone, tokenizer, Run) -> a Pretrainer.
        no_pretraining: why `keras-ctx pretrain` has no recipe (AWD-LSTM's).
        huggingface: `HuggingFace` specs; the first is what `to_huggingface`
            writes by default.
        keras_hub: `KerasHub` specs: the keras-hub classes `from_keras_hub` reads.
        tf_checkpoint: the google-research checkpoint layout
            (`keras_ctx.convert.tensorflow.TFLayout`, named by its `name`), or None.
        allennlp: the `AllenNLP` files it reads and writes (one family at most), or None.
        run_files: tokenizer -> (tokenizer to save, extra run.json info);
            ELMo keeps its word vocabulary in run.json.
        matches: backbone -> bool, where families share a backbone class
            and differ in its architecture (GPT is post-LN, GPT-2 pre-LN).
        recipe_config: Run -> backbone config values the pretraining recipe
            sets from the run's sizes (XLNet's memory length); `--set` wins.
        optimizer: (learning_rate or None, steps, hidden_size) -> the optimizer
            `keras-ctx pretrain` compiles with, the family paper's
            (`keras_ctx.optimizers`); None: BERT's (`optimizers.bert_recipe`).
        borrows_backbone: whether its backbone class is another family's (mBERT,
            SpanBERT and ERNIE build BERT's): a backbone of that class without a
            recorded family is the owner's (`of_backbone`), whatever the order of
            registration.
        tiny: config values that shrink its first preset to a test size (the tests
            build, convert and pretrain every family from them; a config's
            vocabulary_size is the tests' own).
        objective: (Pretrainer class, batch keys that tell it apart) of its paper,
            which the tests check each preset's recipe builds, or {preset: that pair}
            where its presets' objectives differ (XLM's MLM and CLM models); () without
            a recipe.
        decoder: (backbone, lm_head or None, language id or None) -> the Keras layer
            `keras_ctx.generation` decodes with (`build_cache`, `call_with_cache`,
            `logits`), for a causal backbone that does not decode by itself (XLM's CLM:
            explicit position and language ids, its PredLayer's bias), with
            `with_backbone(copy)`: itself over a copy of its backbone
            (`generation.for_decoding`'s), its output layer read from the copy's table;
            None: the backbone decodes (GPT's) or the family does not generate.
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
    tf_checkpoint: Optional[object] = None
    allennlp: Optional[AllenNLP] = None
    run_files: Callable = lambda tokenizer: (tokenizer, {})
    matches: Optional[Callable] = None
    recipe_config: Callable = lambda run: {}
    optimizer: Optional[Callable] = None
    borrows_backbone: bool = False
    tiny: dict = dataclasses.field(default_factory=dict)
    objective: tuple = ()
    decoder: Optional[Callable] = None
    tokenizer_options: Callable = lambda run: {}


_FAMILIES = {}
# Indexes filled by register_family: preset name / model_type / keras-hub class /
# TF layout name -> family name.
_PRESETS = {}
_HUGGINGFACE = {}
_KERAS_HUB = {}
_TF_LAYOUTS = {}
_ALLENNLP = {}
ALLENNLP_FORMAT = "allennlp"  # the one key of _ALLENNLP


def _keys(family):
    """(index, key, what) of everything `family` claims, for the uniqueness check."""
    yield from ((_PRESETS, name, "Preset") for name in family.presets)
    yield from ((_HUGGINGFACE, spec.model_type, "Hugging Face model_type")
                for spec in family.huggingface)
    yield from ((_KERAS_HUB, spec.class_name, "keras-hub class") for spec in family.keras_hub)
    if family.tf_checkpoint is not None:
        yield _TF_LAYOUTS, family.tf_checkpoint.name, "TF checkpoint layout"
    if family.allennlp is not None:
        yield _ALLENNLP, ALLENNLP_FORMAT, "Reader of allennlp files"


def register_family(family):
    """Adds `family`: its name, presets, model_types, keras-hub classes and TF layout.

    Args:
        family: a `Family`.

    Returns:
        The family. Raises ValueError if it, or anything it claims, is
        registered already (nothing is added then).
    """
    if family.name in _FAMILIES:
        raise ValueError(f"Family {family.name!r} is registered twice.")
    claims = list(_keys(family))
    for index, key, what in claims:
        if key in index:
            raise ValueError(f"{what} {key!r} is registered twice (families "
                             f"{index[key]!r} and {family.name!r}).")
    if len({(id(index), key) for index, key, _ in claims}) != len(claims):
        raise ValueError(f"Family {family.name!r} claims one name twice: {claims}.")
    owner = next((other for other in _FAMILIES.values() if _owns(other, family.backbone)),
                 None)
    if owner and _owns(family, family.backbone) and (owner.matches is None
                                                     or family.matches is None):
        raise ValueError(
            f"Families {owner.name!r} and {family.name!r} both own "
            f"{family.backbone.__name__}: give the one that reuses it borrows_backbone=True, "
            "or both a `matches` that tells their backbones apart.")
    _FAMILIES[family.name] = family
    for index, key, _ in claims:
        index[key] = family.name
    return family


def unregister_family(name):
    """Removes a family and everything it claimed (for tests that add toy families)."""
    family = _FAMILIES[name]
    for index, key, _ in list(_keys(family)):
        index.pop(key, None)
    del _FAMILIES[name]


def get(name):
    """The `Family` called `name`, with a clear error if unknown."""
    if name not in _FAMILIES:
        raise ValueError(f"Unknown model family {name!r}; known: {', '.join(names())}.")
    return _FAMILIES[name]


def names():
    """The registered families' names, sorted."""
    return sorted(_FAMILIES)


def preset_names():
    """Every registered preset's name, sorted."""
    return sorted(_PRESETS)


def of_preset(preset):
    """The `Family` of a preset name, with a clear error if unknown."""
    if preset not in _PRESETS:
        raise ValueError(
            f"Unknown preset {preset!r}. Known presets: {', '.join(preset_names())}. "
            "`keras_ctx.models.list_presets()` lists them with parameter counts."
        )
    return _FAMILIES[_PRESETS[preset]]


def _owns(family, backbone_class):
    return family.backbone is backbone_class and not family.borrows_backbone


def of_backbone(backbone):
    """The `Family` of a backbone: its `family` attribute if it has one (set by the
    converters and presets), else the family that owns its class (and `matches` it);
    None if none."""
    name = getattr(backbone, "family", None)
    if isinstance(name, str):
        return get(name)
    for family in _FAMILIES.values():
        if _owns(family, type(backbone)) and (family.matches is None
                                             or family.matches(backbone)):
            return family
    return None


def huggingface(model_type):
    """(Family, HuggingFace spec) of a Hugging Face model_type, or None."""
    if model_type not in _HUGGINGFACE:
        return None
    family = _FAMILIES[_HUGGINGFACE[model_type]]
    return family, next(s for s in family.huggingface if s.model_type == model_type)


def huggingface_model_types():
    """Every registered Hugging Face model_type, sorted."""
    return sorted(_HUGGINGFACE)


def of_huggingface(model_type):
    """The `Family` whose checkpoints carry this Hugging Face model_type, or None."""
    found = huggingface(model_type)
    return found[0] if found else None


def keras_hub(class_name):
    """(Family, KerasHub spec) of a keras-hub backbone class name, or None."""
    if class_name not in _KERAS_HUB:
        return None
    family = _FAMILIES[_KERAS_HUB[class_name]]
    return family, next(s for s in family.keras_hub if s.class_name == class_name)


def of_keras_hub(class_name):
    """The `Family` a keras-hub backbone class converts to, or None."""
    found = keras_hub(class_name)
    return found[0] if found else None


def with_tf_checkpoints():
    """Families with a google-research TF checkpoint layout, by layout name."""
    return {layout: _FAMILIES[name] for layout, name in sorted(_TF_LAYOUTS.items())}


def allennlp():
    """The `AllenNLP` spec of the family that reads allennlp files; raises if none does."""
    if ALLENNLP_FORMAT not in _ALLENNLP:
        raise ValueError("No registered family reads allennlp files (options json + hdf5): "
                         "import keras_ctx, whose families register them.")
    return _FAMILIES[_ALLENNLP[ALLENNLP_FORMAT]].allennlp

"""What `keras-ctx` runs: one pretraining recipe per model family.

A recipe turns (preset, corpus, sizes) into a tokenizer trained on the
corpus, a backbone, the family's pretrainer and its endless tf.data
pipeline, following the family's paper (see each pretrainer). The CLI
functions below train with `keras_ctx.training.fit_resumable`, save a run
directory (`keras_ctx.runs`), export, embed and fine-tune.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_ctx import runs
from keras_ctx.data import corpora
from keras_ctx.preprocessing import FAMILY_TOKENS, TextPreprocessor


# ---------------------------------------------------------------- families

def family_of(preset):
    """The recipe family of a preset name (bert, roberta, albert, ..., gpt, t5)."""
    for family in ("spanbert", "roberta", "albert", "electra", "xlnet", "elmo", "bert",
                   "gpt", "t5", "bart", "cove"):
        if preset.startswith(family):
            return family
    raise ValueError(f"No pretraining recipe for {preset!r}.")


def _sentences(documents):
    return documents.unbatch()


def _train_tokenizer(family, documents, vocabulary_size):
    from keras_ctx.data import tokenizers

    lines = _sentences(documents)
    if family in ("bert", "spanbert", "electra", "xlnet"):
        return tokenizers.train_wordpiece(lines, vocabulary_size)
    if family in ("roberta", "bart"):
        return tokenizers.train_byte_level_bpe(lines, vocabulary_size)
    if family == "gpt":
        return tokenizers.train_byte_level_bpe(lines, vocabulary_size,
                                               special_tokens=(GPT_END_OF_TEXT,))
    if family in ("albert", "t5"):
        return tokenizers.train_sentencepiece(lines, vocabulary_size)
    raise ValueError(f"No tokenizer recipe for the {family} family.")


GPT_END_OF_TEXT = "<|endoftext|>"
T5_SENTINELS = 100  # <extra_id_0..99> after the SentencePiece vocabulary (Raffel et al.)


def _token_documents(documents, tokenizer, end_id=None):
    """Each document as one flat 1-D token sequence (+ an end token)."""
    from keras_ctx.data import tokenizers

    def flatten(sentences):
        tokens = sentences.flat_values
        if end_id is not None:
            tokens = tf.concat([tokens, [end_id]], 0)
        return tokens

    return tokenizers.tokenize_documents(documents, tokenizer).map(flatten)


def _chunks(documents, tokenizer, length, end_id, seed):
    """The documents' tokens as one stream cut into `length`-token chunks, shuffled.

    The stream repeats the corpus before it is cut, so the tokens at the end
    of one pass start the next chunk instead of being dropped.
    """
    stream = _token_documents(documents, tokenizer, end_id).repeat().unbatch()
    return stream.batch(length, drop_remainder=True).shuffle(2048, seed=seed)


def _gpt(backbone, tokenizer, documents, args):
    from keras_ctx.pretraining import CausalLMPretrainer

    end_id = tokenizer.token_to_id(GPT_END_OF_TEXT)
    dataset = _chunks(documents, tokenizer, args.sequence_length, end_id, args.seed).map(
        lambda ids: {"token_ids": ids, "padding_mask": tf.ones_like(ids)})
    return CausalLMPretrainer(backbone), dataset.batch(args.batch_size, drop_remainder=True)


def _t5(backbone, tokenizer, documents, args):
    from keras_ctx.data import noise
    from keras_ctx.pretraining import Seq2SeqPretrainer

    # SentencePiece ids: 0 <pad> (also T5's decoder start), 3 [SEP] as </s>.
    eos_id = tokenizer.token_to_id("[SEP]")
    first_sentinel = tokenizer.vocabulary_size() + T5_SENTINELS - 1
    encoder_length, decoder_length = noise.span_corruption_lengths(args.sequence_length)
    dataset = _chunks(documents, tokenizer, args.sequence_length, None, args.seed).map(
        lambda ids: noise.seq2seq_features(
            noise.span_corruption(ids, first_sentinel_id=first_sentinel, eos_id=eos_id),
            encoder_length, decoder_length, decoder_start_id=0))
    return Seq2SeqPretrainer(backbone), dataset.batch(args.batch_size, drop_remainder=True)


def _bart(backbone, tokenizer, documents, args):
    from keras_ctx.data import noise
    from keras_ctx.pretraining import Seq2SeqPretrainer

    # fairseq ids: <s>=0, <pad>=1, </s>=2, <mask>=4; BART's decoder starts with </s>.
    bos, pad, eos, mask = (tokenizer.token_to_id(t) for t in ("<s>", "<pad>", "</s>", "<mask>"))
    period = tokenizer.token_to_id(".")
    body = args.sequence_length - 2
    # Lewis et al. 2020: text infilling (30% of tokens, Poisson(3) spans) plus
    # sentence permutation, the best combination of their Table 1.
    corrupt = noise.compose(lambda ids: noise.sentence_permutation(ids, period),
                            lambda ids: noise.text_infilling(ids, mask))

    def example(ids):
        noised = corrupt(ids)
        wrap = lambda t: tf.concat([[bos], t, [eos]], 0)  # noqa: E731
        return noise.seq2seq_features({"inputs": wrap(noised), "targets": wrap(ids)},
                                      args.sequence_length + 1, args.sequence_length,
                                      decoder_start_id=eos, pad_id=pad)

    dataset = _chunks(documents, tokenizer, body, None, args.seed).map(example)
    return Seq2SeqPretrainer(backbone), dataset.batch(args.batch_size, drop_remainder=True)


def _encoder_mlm(family, backbone, tokenizer, documents, args):
    from keras_ctx.data import pipelines
    from keras_ctx import pretraining

    common = dict(batch_size=args.batch_size, sequence_length=args.sequence_length,
                  seed=args.seed)
    if family == "bert":
        # Dynamic masking for short runs: static masks duplicated 10x (BERT)
        # only pay off over many epochs of a fixed corpus.
        dataset = pipelines.bert_dataset(documents, tokenizer, static_masking=False, **common)
        return pretraining.BertPretrainer(backbone), dataset
    if family == "roberta":
        dataset = pipelines.roberta_dataset(documents, tokenizer, **common)
        return pretraining.RobertaPretrainer(backbone), dataset
    if family == "albert":
        dataset = pipelines.albert_dataset(documents, tokenizer, **common)
        return pretraining.AlbertPretrainer(backbone), dataset
    dataset = pipelines.spanbert_dataset(documents, tokenizer, **common)
    return pretraining.SpanBertPretrainer(backbone), dataset


def _electra(preset, discriminator, tokenizer, documents, args):
    from keras_ctx.data import pipelines
    from keras_ctx.models.electra import ELECTRA_GENERATOR_FRACTIONS, electra_generator
    from keras_ctx.pretraining.electra import ElectraPretrainer

    # Clark et al. 2020: BERT's masking on packed text (no NSP); the generator
    # is a fraction of the discriminator's width (their Table 6).
    fraction = ELECTRA_GENERATOR_FRACTIONS.get(preset, 0.25)
    generator = electra_generator(discriminator, hidden_fraction=fraction)
    dataset = pipelines.roberta_dataset(documents, tokenizer, batch_size=args.batch_size,
                                        sequence_length=args.sequence_length, seed=args.seed)
    return ElectraPretrainer(generator, discriminator, seed=args.seed), dataset


def _xlnet(backbone, tokenizer, documents, args):
    from keras_ctx.data import permutation
    from keras_ctx.pretraining import XLNetPretrainer

    stream = permutation.text_stream(_token_documents(documents, tokenizer),
                                     args.sequence_length, args.batch_size)
    dataset = permutation.permutation_masks(stream, seed=args.seed)
    return XLNetPretrainer(backbone, batch_size=args.batch_size), dataset


def _elmo(preset, documents, args, overrides):
    from keras_ctx.models import from_preset
    from keras_ctx.pretraining import bilm

    words = [w.decode() for s in _sentences(documents).as_numpy_iterator()
             for w in s.split()]
    counts = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    frequent = sorted(counts, key=lambda w: -counts[w])[: args.vocabulary_size]
    vocabulary = bilm.make_vocabulary(frequent)
    backbone = from_preset(preset, **overrides)
    pretrainer = bilm.BiLMPretrainer(backbone, len(vocabulary),
                                     num_sampled=min(bilm.NUM_SAMPLED, len(vocabulary) // 2))
    dataset = (_sentences(documents).shuffle(10_000, seed=args.seed)
               .batch(args.batch_size, drop_remainder=True)
               .map(lambda s: bilm.bilm_inputs(s, vocabulary, args.sequence_length)))
    return backbone, pretrainer, dataset, {"vocabulary": vocabulary}


def build(preset, documents, args, overrides):
    """(backbone, pretrainer, endless dataset, tokenizer, extra run info)."""
    from keras_ctx.models import from_preset

    family = family_of(preset)
    if family == "elmo":
        backbone, pretrainer, dataset, extra = _elmo(preset, documents, args, overrides)
        return backbone, pretrainer, dataset.repeat(), None, extra
    if family in ("cove",):
        raise ValueError("CoVe trains on a parallel corpus: see examples/cove_translate.py "
                         "and keras_ctx.pretraining.TranslationPretrainer.")
    tokenizer = _train_tokenizer(family, documents, args.vocabulary_size)
    vocabulary_size = tokenizer.vocabulary_size() + (T5_SENTINELS if family == "t5" else 0)
    overrides = dict(overrides, vocabulary_size=vocabulary_size)
    backbone = from_preset(preset, **overrides)
    if family in ("bert", "roberta", "albert", "spanbert"):
        pretrainer, dataset = _encoder_mlm(family, backbone, tokenizer, documents, args)
    elif family == "electra":
        pretrainer, dataset = _electra(preset, backbone, tokenizer, documents, args)
    elif family == "xlnet":
        pretrainer, dataset = _xlnet(backbone, tokenizer, documents, args)
    elif family in ("gpt", "t5", "bart"):
        pretrainer, dataset = {"gpt": _gpt, "t5": _t5, "bart": _bart}[family](
            backbone, tokenizer, documents, args)
    else:
        raise ValueError(f"`keras-ctx pretrain` has no recipe for {family} yet.")
    return backbone, pretrainer, dataset.repeat(), tokenizer, {}


# ---------------------------------------------------------------- training

def parse_overrides(pairs):
    """["num_layers=2", "dropout=0.0"] -> {"num_layers": 2, "dropout": 0.0}."""
    import ast

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set takes KEY=VALUE, got {pair!r}.")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides


def optimizer(learning_rate, steps):
    """AdamW, linear warmup over 10% of the steps then linear decay (BERT's schedule)."""
    warmup = max(1, steps // 10)
    schedule = keras.optimizers.schedules.PolynomialDecay(
        learning_rate, decay_steps=max(1, steps - warmup), end_learning_rate=0.0)

    class WarmupThenDecay(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = keras.ops.cast(step, "float32")
            return keras.ops.where(step < warmup, learning_rate * (step + 1) / warmup,
                                   schedule(step - warmup))

    # Devlin et al. 2019: weight decay 0.01, not on LayerNorm or biases.
    adamw = keras.optimizers.AdamW(WarmupThenDecay(), weight_decay=0.01, clipnorm=1.0)
    adamw.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "_norm"])
    return adamw


def use_xla(choice):
    if choice != "auto":
        return choice == "on"
    # On CPU, TensorFlow's own (oneDNN) kernels beat XLA for these models
    # (benchmarks/RESULTS.md); on GPU/TPU XLA fuses and wins.
    return bool(tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"))


def _settings(args, overrides):
    """What a resumed run must share with the run it resumes."""
    return {"model": args.model, "overrides": overrides, "corpus": args.corpus,
            "sequence_length": args.sequence_length, "batch_size": args.batch_size,
            "vocabulary_size": args.vocabulary_size, "seed": args.seed}


def pretrain_from_args(args):
    from keras_ctx.training import fit_resumable, make_strategy

    from keras_ctx.models.presets import preset_config

    from keras_ctx import validation
    from keras_ctx.export import check_export_target
    from keras_ctx.files import RunLock

    # Every argument is checked before any work, and --out is claimed only then.
    backbone_cls, config = preset_config(args.model)  # unknown presets fail here
    validation.check_training_args(args)
    overrides = parse_overrides(args.set)
    validation.check_overrides(args.model, backbone_cls, config, overrides)
    text_export = args.export and family_of(args.model) in FAMILY_TOKENS
    if args.export:
        check_export_target(args.export, 1, args.overwrite)
    if text_export:
        check_export_target(args.export.rstrip("/") + "-text", 1, args.overwrite)
    keras.utils.set_random_seed(args.seed)
    if args.mixed_precision:
        keras.config.set_dtype_policy("mixed_bfloat16")
    strategy = make_strategy(args.strategy)
    documents = corpora.documents(args.corpus)
    with strategy.scope():
        backbone, pretrainer, dataset, tokenizer, extra = build(
            args.model, documents, args, overrides)
        hidden = getattr(backbone, "hidden_size", 512)
        learning_rate = args.learning_rate or (1e-3 if hidden <= 256 else 1e-4)
        pretrainer.compile(optimizer=optimizer(learning_rate, args.steps),
                           jit_compile=use_xla(args.xla))
    info = {"model": args.model, "family": family_of(args.model),
            "sequence_length": args.sequence_length, "overrides": overrides,
            "corpus": args.corpus, "steps": args.steps, "seed": args.seed, **extra}
    with RunLock(args.out):
        runs.claim(args.out, _settings(args, overrides), fresh=args.no_resume)
        result = fit_resumable(pretrainer, dataset, args.steps, args.out,
                               checkpoint_every=args.checkpoint_every,
                               resume=not args.no_resume, verbose=2)
        if result["history"]:
            first, last = result["history"][0], result["history"][-1]
            print(f"Loss {first.get('loss', float('nan')):.3f} (step {first['step']}) -> "
                  f"{last.get('loss', float('nan')):.3f} (step {last['step']}).")
        runs.save_run(args.out, info, backbone, tokenizer, overwrite=True)  # its own run
        print(f"Saved the backbone and tokenizer to {args.out}.")
        if args.export:
            _export_run(args.out, args.export, overwrite=args.overwrite)
            if tokenizer is not None and text_export:
                _export_run(args.out, args.export.rstrip("/") + "-text",
                            overwrite=args.overwrite, with_text=True)
    if info["family"] not in ("t5", "bart", "cove"):
        show_context(args.out)
    return 0


# ---------------------------------------------------------------- embedding

def _special(tokenizer, *names):
    for name in names:
        try:
            token_id = tokenizer.token_to_id(name)
        except (KeyError, ValueError):
            continue
        if token_id is not None and token_id >= 0:
            return token_id
    return None


def encode_words(info, tokenizer, texts):
    """Inputs for the run's backbone, and per text the [start, end) of each word."""
    family = info["family"]
    length = info["sequence_length"]
    if family == "elmo":
        from keras_ctx.data.characters import sentences_to_character_ids

        ids = sentences_to_character_ids(tf.constant(texts), length)
        spans = [[(i + 1, i + 2) for i in range(len(t.split()))] for t in texts]
        return {"character_ids": ids}, spans
    starts = {"xlnet": [], "gpt": []}.get(family, [_special(tokenizer, "[CLS]", "<s>")])
    ends = {"xlnet": [_special(tokenizer, "[SEP]"), _special(tokenizer, "[CLS]")],
            "gpt": []}.get(family, [_special(tokenizer, "[SEP]", "</s>")])
    pad = _special(tokenizer, "[PAD]", "<pad>") or 0
    rows, spans = [], []
    for text in texts:
        row, word_spans = list(starts), []
        for word in text.split():
            pieces = list(np.asarray(tokenizer(tf.constant(word))).reshape(-1))
            word_spans.append((len(row), len(row) + len(pieces)))
            row.extend(pieces)
        row.extend(ends)
        rows.append(row)
        spans.append(word_spans)
    # At least the training length; longer texts get longer rows (up to the
    # backbone's own position limit, which it checks), never truncation.
    length = max([length] + [len(row) for row in rows])
    rows = [row + [pad] * (length - len(row)) for row in rows]
    ids = np.array(rows, "int32")
    mask = np.zeros_like(ids)
    for i, text_row in enumerate(rows):
        real = len(starts) + sum(e - s for s, e in spans[i]) + len(ends)
        mask[i, :real] = 1
    return {"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)}, spans


def word_vectors(run_dir, texts, word):
    """The contextual vector of `word` (mean of its pieces) in each text."""
    info, backbone, tokenizer = runs.load_run(run_dir, need_tokenizer=True)
    inputs, spans = encode_words(info, tokenizer, texts)
    inputs = {k: v for k, v in inputs.items() if k in backbone.input}
    sequence = keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    vectors = []
    for i, text in enumerate(texts):
        words = [w.strip(".,!?;:").lower() for w in text.split()]
        if word.lower() not in words:
            raise ValueError(f"{word!r} does not occur in {text!r}.")
        start, end = spans[i][words.index(word.lower())]
        vectors.append(sequence[i, start:end].astype("float32").mean(0))
    return np.stack(vectors)


def _cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


# The seeds' examples of one word with different meanings in different contexts.
CONTEXT_EXAMPLES = {
    "bank": ["I deposited the money at the bank.",
             "The bank approved the loan.",
             "We sat on the bank of the river."],
    "broke": ["He broke the glass on the floor.",
              "The window broke during the storm.",
              "After the trip she was broke and owed money."],
}


def show_context(run_dir):
    """Prints how similar one word's contextual vectors are across sentences."""
    print("\nThe same word, different contexts (cosine similarity of its vectors):")
    for word, texts in CONTEXT_EXAMPLES.items():
        vectors = word_vectors(run_dir, texts, word)
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                print(f"  {word!r}: {_cosine(vectors[i], vectors[j]):+.3f}  "
                      f"{texts[i]!r} vs {texts[j]!r}")
    print("Static word embeddings would give +1.000 for every pair.")


def embed_from_args(args):
    if args.word:
        vectors = word_vectors(args.run_dir, args.texts, args.word)
        for i, text in enumerate(args.texts):
            print(f"{text!r}: |v| = {np.linalg.norm(vectors[i]):.3f}, "
                  f"first values {np.round(vectors[i][:4], 3).tolist()}")
        for i in range(len(args.texts)):
            for j in range(i + 1, len(args.texts)):
                print(f"cosine({i}, {j}) = {_cosine(vectors[i], vectors[j]):+.4f}")
    else:
        info, backbone, tokenizer = runs.load_run(args.run_dir, need_tokenizer=True)
        inputs, _ = encode_words(info, tokenizer, args.texts)
        inputs = {k: v for k, v in inputs.items() if k in backbone.input}
        vectors = keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"])
        print(f"sequence_output: shape {vectors.shape}")
    if args.save:
        from keras_ctx.files import save_npz

        path = save_npz(args.save, overwrite=args.overwrite, vectors=vectors,
                        texts=np.array(args.texts))
        print(f"Saved to {path}.")
    return 0


# ---------------------------------------------------------------- export, fine-tune

def _export_run(model_or_run, out, version=1, overwrite=False, sequence_length=None,
                with_text=False):
    """Exports a run (or a preset); `with_text` adds serve_text (needs tensorflow-text ops)."""
    from keras_ctx.export import export_saved_model
    from keras_ctx.models import from_preset

    preprocessor = None
    if os.path.isdir(model_or_run):
        info, backbone, tokenizer = runs.load_run(model_or_run, need_tokenizer=with_text)
        sequence_length = sequence_length or info.get("sequence_length")
        if with_text:
            preprocessor = TextPreprocessor(tokenizer, sequence_length, info["family"])
    else:
        backbone = from_preset(model_or_run)
    path = export_saved_model(backbone, out, version=version, overwrite=overwrite,
                              sequence_length=sequence_length, preprocessor=preprocessor)
    signatures = ["serving_default"] + (["serve_examples"] if sequence_length else []) + (
        ["serve_text"] if preprocessor else [])
    print(f"Exported a SavedModel to {path} (signatures {', '.join(signatures)}).")
    return path


def export_from_args(args):
    _export_run(args.model, args.out, args.version, args.overwrite, args.sequence_length)
    return 0


def finetune_from_args(args):
    from keras_ctx import files, validation
    from keras_ctx.data.labelled import read_labelled_tsv
    from keras_ctx.export import check_export_target
    from keras_ctx.tasks import SequenceClassifier

    validation.check_training_args(args)
    target = os.path.join(args.out, "classifier.keras")
    if os.path.exists(target) and not args.overwrite:
        raise runs.RunDirectoryError(f"{target} already exists; pass --overwrite to "
                                     "replace it, or choose another --out.")
    if args.export:
        check_export_target(args.export, 1, args.overwrite)
    texts, labels = read_labelled_tsv(args.train, header=args.header)
    info, backbone, tokenizer = runs.load_run(args.run_dir, need_tokenizer=True)
    classes = sorted(set(labels))
    y = np.array([classes.index(label) for label in labels], "int32")
    inputs, _ = encode_words(info, tokenizer, texts)
    inputs = {k: v for k, v in inputs.items() if k in backbone.input}
    pooling = {"xlnet": "last", "gpt": "last", "elmo": "mean"}.get(info["family"], "auto")
    model = SequenceClassifier(backbone, num_classes=len(classes), pooling=pooling)
    model.compile(keras.optimizers.AdamW(args.learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(inputs, y, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    with files.replacing(target, overwrite=args.overwrite) as staging:
        model.save(staging)
    print(f"Saved the classifier ({len(classes)} classes: {classes}) to {args.out}.")
    if args.export:
        from keras_ctx.export import export_saved_model

        export_saved_model(model, args.export, overwrite=args.overwrite,
                           sequence_length=info["sequence_length"])
    return 0


def convert_from_args(args):
    try:
        from keras_ctx.convert.cli import convert
    except ImportError:
        from keras_ctx.convert import from_huggingface

        def convert(source, dest, overwrite=False):
            runs.check_free(dest, overwrite)
            backbone = from_huggingface(source)
            runs.save_run(dest, {"model": source, "family": "bert",
                                 "sequence_length": 128}, backbone, backbone.tokenizer,
                          overwrite=overwrite)
    convert(args.source, args.dest, overwrite=args.overwrite)
    print(f"Converted {args.source} to {args.dest}.")
    return 0

"""The `keras-ctx` command: argument parsing only.

Each command calls one Python function that takes arguments, in its own module
of `keras_ctx.commands` (imported on use, so `keras-ctx presets` stays quick);
every failure leaves through `keras_ctx.commands.exits.run_command`. Nothing
heavy is imported before the arguments parse: under the command, `import keras_ctx`
leaves Keras and TensorFlow alone (keras_ctx/__init__.py), so `--help` and an
argument error answer at once; once they parse and the chosen backend is found
installed, the command imports the rest (`keras_ctx.import_all`).
"""

import argparse
import importlib.util
import os
import re
import sys

from keras_ctx.common.optional import install_command
from keras_ctx.common.startup import unsupported_backend

# Each Keras backend `--backend` offers: the modules it imports and the extra of setup.py
# that installs them (TensorFlow is a requirement of keras_ctx itself).
BACKENDS = {"tensorflow": (("tensorflow",), None), "jax": (("jax", "jaxlib"), "jax"),
            "torch": (("torch",), "torch")}


MODEL_HELP = ("a model: a run directory, a checkpoint directory `convert` reads, "
              "hf://ORG/NAME[@REVISION], kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] "
              "or a preset name (random weights)")
# Commands that turn text into ids need the model's tokenizer, which a preset
# name (an architecture only) does not have.
TEXT_MODEL_HELP = ("a model with its tokenizer: a run directory, a checkpoint directory "
                   "`convert` reads, hf://ORG/NAME[@REVISION] or "
                   "kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] (not a preset name: "
                   "it has no tokenizer; `keras-ctx pretrain` one first)")


class _Parser(argparse.ArgumentParser):
    """An argparse parser that reads a flag only by its full name and refuses in one line.

    `allow_abbrev=False`: `--back jax` or `--step 3` is refused naming the flag instead
    of being read as `--backend` / `--steps` (the start-up code, which reads `--backend`
    and `--verbose` before Keras is imported, knows the full names only). An error is
    one line, not argparse's usage block.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}; `{self.prog} --help` lists the "
                     "arguments.\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default unless its help already says it (or there is none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" not in text and action.option_strings
                and action.default not in (None, False, [], argparse.SUPPRESS)):
            text += " (default: %(default)s)"
        return text


def _presets(args):
    from keras_ctx.commands.presets import presets

    presets(args.family)
    return 0


def _layers(args):
    from keras_ctx.commands.layers import layers

    layers()
    return 0


def _corpus(given):
    """`--corpus` as `pretrain` takes it: "builtin" when not given, a list when repeated."""
    return "builtin" if not given else given[0] if len(given) == 1 else given


def _pretrain(args):
    from keras_ctx.commands.pretrain import parse_overrides, pretrain

    pretrain(
        args.model, args.out, corpus=_corpus(args.corpus),
        steps=args.steps,
        batch_size=args.batch_size, sequence_length=args.sequence_length,
        vocabulary_size=args.vocabulary_size, learning_rate=args.learning_rate,
        seed=args.seed, strategy=args.strategy, mixed_precision=args.mixed_precision,
        xla=args.xla, checkpoint_every=args.checkpoint_every, resume=not args.no_resume,
        overrides=parse_overrides(args.set), export=args.export,
        overwrite=args.overwrite, data=args.data, corpus_changed=args.corpus_changed,
        version=args.version, languages=args.languages or (), parallel=args.parallel,
        glove=args.glove, source=args.source, phrases=args.phrases, entities=args.entities)
    return 0


def _prepare(args):
    from keras_ctx.commands.prepare import prepare
    from keras_ctx.common.validation import check_args

    check_args(shard_mb=args.shard_mb)  # the function takes bytes: the flag is checked here

    prepare(args.model, _corpus(args.corpus), args.out, sequence_length=args.sequence_length,
            vocabulary_size=args.vocabulary_size, seed=args.seed, workers=args.workers,
            shard_bytes=args.shard_mb << 20, tokenizer_sample=args.tokenizer_sample,
            duplicate=args.duplicate, batch_size=args.batch_size,
            languages=args.languages or (), parallel=args.parallel, glove=args.glove)
    return 0


def _finetune(args):
    from keras_ctx.commands.finetune import finetune

    finetune(args.run_dir, args.train, args.out, epochs=args.epochs,
             batch_size=args.batch_size, learning_rate=args.learning_rate, export=args.export,
             overwrite=args.overwrite, header=args.header,
             keep_optimizer_state=args.keep_optimizer_state, language=args.language,
             freeze_token_embeddings=args.freeze_token_embeddings,
             task_adapter=args.task_adapter, language_adapter=args.language_adapter)
    return 0


def _embed(args):
    from keras_ctx.commands.embed import embed

    embed(args.run_dir, args.texts, word=args.word, save=args.save, overwrite=args.overwrite,
          language=args.language)
    return 0


def _export(args):
    from keras_ctx.commands.export import export_run

    export_run(args.model, args.out, args.version, args.overwrite, args.sequence_length,
               with_text=args.with_text, jit_compile=args.xla_serving, language=args.language,
               language_adapter=args.language_adapter)
    return 0


def _generate(args):
    from keras_ctx.commands.generate import generate

    generate(args.model, args.prompt, stream=args.stream, max_length=args.max_length,
             sampler=args.sampler, seed=args.seed, language=args.language)
    return 0


def _convert(args):
    from keras_ctx.commands.convert import convert

    convert(args.source, args.dest, overwrite=args.overwrite)
    return 0


def _ulmfit(args):
    from keras_ctx.commands.pretrain import parse_overrides
    from keras_ctx.commands.ulmfit import ulmfit_from_files

    ulmfit_from_files(args.train, args.text, args.out, general_text=args.general_text,
                      lm_epochs=args.lm_epochs, epochs=args.epochs, batch_size=args.batch_size,
                      sequence_length=args.sequence_length, vocabulary_size=args.vocabulary_size,
                      seed=args.seed, overrides=parse_overrides(args.set),
                      directions=args.directions)
    return 0


def _cvt(args):
    from keras_ctx.commands.cvt import cvt_from_files
    from keras_ctx.commands.pretrain import parse_overrides

    cvt_from_files(args.train, args.unlabelled, args.out, steps=args.steps,
                   batch_size=args.batch_size, vocabulary_size=args.vocabulary_size,
                   learning_rate=args.learning_rate, seed=args.seed,
                   overrides=parse_overrides(args.set), warm_up_steps=args.warm_up_steps)
    return 0


def _transfer_vocabulary(args):
    from keras_ctx.commands.transfer import transfer_vocabulary

    transfer_vocabulary(args.source, args.text, args.out, vocabulary_size=args.vocabulary_size,
                        steps=args.steps, batch_size=args.batch_size,
                        sequence_length=args.sequence_length, learning_rate=args.learning_rate,
                        seed=args.seed, checkpoint_every=args.checkpoint_every,
                        resume=not args.no_resume, xla=args.xla)
    return 0


def _transfer_swap(args):
    from keras_ctx.commands.transfer import transfer_swap

    transfer_swap(args.classifier_dir, args.embeddings, args.out, overwrite=args.overwrite)
    return 0


def _cvt_tag(args):
    from keras_ctx.commands.cvt_tag import tag_file

    for line in tag_file(args.run_dir, args.input, batch_size=args.batch_size):
        print(line)
    return 0


def _add_training_options(parser):
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps in total")
    parser.add_argument("--batch-size", type=int, default=16, help="global batch size")
    parser.add_argument("--sequence-length", type=int, default=None,
                        help="tokens per training example, one length for the whole run "
                             "(default: the preset's stages' lengths in turn where its paper "
                             "gives them, BERT's 128 then 512 for the last 10%% of the steps; "
                             "else 64; with --data, the data's)")
    parser.add_argument("--vocabulary-size", type=int, default=None,
                        help="size of the tokenizer (or ELMo word vocabulary) trained on "
                             "the corpus (default 8000; with --data, the data's)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="peak learning rate (default: the recipe's)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the tokenizer's sample, the weights, dropout and the data")
    parser.add_argument("--strategy", default="default",
                        choices=["default", "mirrored", "multi_worker", "tpu"],
                        help="default (one device), mirrored (all local GPUs; on JAX every "
                             "device, as keras.distribution.DataParallel), multi_worker "
                             "(TensorFlow: reads TF_CONFIG) or tpu")
    parser.add_argument("--mixed-precision", action="store_true",
                        help="mixed_bfloat16 (float32 variables, softmax and losses)")
    parser.add_argument("--xla", choices=["auto", "on", "off"], default="auto",
                        help="jit_compile the train step; auto = on for GPU/TPU, off on "
                             "CPU, where XLA is slower than TensorFlow's oneDNN kernels")
    _add_resume_options(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a backbone config value, e.g. --set num_layers=2")


def _add_resume_options(parser):
    """--checkpoint-every and --no-resume of the commands that train with
    `keras_ctx.training.fit_resumable` (pretrain, transfer-vocabulary, adapter-language)."""
    parser.add_argument("--checkpoint-every", type=int, default=100,
                        help="steps between checkpoints (a killed run resumes from the last)")
    parser.add_argument("--no-resume", action="store_true",
                        help="start over from step 0, not from the checkpoints an earlier "
                             "run left in --out")


def _add_language_option(parser, what):
    """`--language CODE`: the language of the text a command reads (XLM's language ids)."""
    parser.add_argument("--language", default=None, metavar="CODE",
                        help=f"the language of {what} (XLM: its language id and Moses "
                             "rules; needed for a model of several languages, refused by "
                             "models without language ids)")


def _add_text_inputs(parser):
    """--corpus and the inputs of the recipes that read more (XLM's, CoVe's): `pretrain`'s,
    and `prepare`'s, which records them for `pretrain --data`."""
    parser.add_argument("--corpus", action="append", default=None,
                        help="text file/dir/glob, tfds:NAME, or builtin (default); repeated "
                             "with --languages, one per language")
    parser.add_argument("--languages", default=None,
                        help="XLM: the language of each --corpus, in order (en,fr): MLM on "
                             "each language's stream")
    parser.add_argument("--parallel", action="append", default=[], metavar="SRC-TGT=FILE",
                        help="XLM: a file of SRC<TAB>TGT sentence pairs (en-fr=pairs.tsv) for "
                             "TLM, alternated with MLM; repeat for more pairs. CoVe: its one "
                             "translation pair (en-de=pairs.tsv)")
    parser.add_argument("--glove", default=None, metavar="FILE",
                        help="CoVe: the --parallel source side's word vectors in GloVe's "
                             "text format (glove.840B.300d.txt), which its encoder reads fixed")


def _add_lexicons(parser):
    """`pretrain`'s lexicon files for a recipe with knowledge masking (ERNIE's stages)."""
    parser.add_argument("--entities", default=None, metavar="FILE",
                        help="ERNIE: a lexicon of entity names, one a line (UTF-8): runs the "
                             "entity-level masking stage, each occurrence masked whole")
    parser.add_argument("--phrases", default=None, metavar="FILE",
                        help="ERNIE: a lexicon of phrases, one a line (UTF-8), for the "
                             "phrase-level stage instead of the corpus' collocations")


def _add_global_options(parser, default=False):
    """`--verbose` and `--backend`, on the top parser and (`default=argparse.SUPPRESS`, so
    that leaving them out there keeps what was given before the command) on every
    command's: `keras-ctx presets --backend jax` is `keras-ctx --backend jax presets`."""
    parser.add_argument("--verbose", action="store_true", default=default,
                        help="show TensorFlow's start-up and C++ log lines (hidden by "
                             "default) and a refusal's traceback")
    parser.add_argument("--backend", choices=tuple(BACKENDS), default=default or None,
                        help="Keras backend (default: KERAS_BACKEND, else tensorflow), e.g. "
                             "keras-ctx --backend jax pretrain ...")


def _nonempty(value):
    """A flag's text value: an empty one is refused (it is not "not given")."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            f"got an empty value {value!r}: give one, or leave the flag out for its default")
    return value


def _refuse_empty_values(parser):
    """Every text argument of `parser` and its commands (not the texts themselves: `embed`'s
    texts, `generate`'s prompt) refuses an empty value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                _refuse_empty_values(command)
        elif (action.type is None and action.choices is None and action.nargs != 0
              and action.dest not in ("texts", "prompt", "help")):
            action.type = _nonempty


def build_parser():
    parser = _Parser(
        prog="keras-ctx",
        description="Contextual word representations for Keras 3: pretrain, fine-tune, "
                    "embed, export and convert the models of the keras_ctx zoo.",
    )
    _add_global_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    pretrain = commands.add_parser("pretrain", help="pretrain a preset on a corpus")
    pretrain.add_argument("model", help="a preset name (see `keras-ctx presets`)")
    _add_text_inputs(pretrain)
    _add_lexicons(pretrain)
    pretrain.add_argument("--out", required=True, help="run directory (checkpoints, logs, "
                                                       "the trained backbone)")
    pretrain.add_argument("--export", default=None,
                          help="also export a SavedModel for TF Serving to EXPORT/<version> "
                               "(and, for families with a text framing, one that takes strings "
                               "to EXPORT-text/<version>); a rerun of a finished run finds its "
                               "export there and leaves it")
    pretrain.add_argument("--version", type=int, default=1,
                          help="the --export version subdirectory, as `keras-ctx export`")
    pretrain.add_argument("--overwrite", action="store_true",
                          help="replace an existing --export version")
    pretrain.add_argument("--data", default=None,
                          help="a `keras-ctx prepare` directory to train on (instead of "
                               "--corpus)")
    pretrain.add_argument("--from", dest="source", default=None, metavar="SOURCE",
                          help="continue pretraining this checkpoint (a directory, hf://ORG/"
                               "NAME, kaggle://..., a run): its architecture, tokenizer, "
                               "weights and, where it has it, the objective's head")
    pretrain.add_argument("--corpus-changed", choices=["refuse", "continue"],
                          default="refuse",
                          help="when resuming a run whose corpus (or tokenizer) changed: "
                               "refuse (default), or continue training on the new one")
    _add_training_options(pretrain)
    pretrain.set_defaults(run=_pretrain)

    prepare = commands.add_parser("prepare", help="tokenize a corpus once into sharded "
                                                  "TFRecords for `pretrain --data`")
    prepare.add_argument("model", help="a preset name (its family says what an example is)")
    _add_text_inputs(prepare)  # XLM's and CoVe's: their sentence ids are prepared
    prepare.add_argument("--out", required=True, help="the data directory (resumable)")
    prepare.add_argument("--sequence-length", type=int, default=64,
                         help="tokens per example; pretrain --data with the same")
    prepare.add_argument("--vocabulary-size", type=int, default=8000,
                         help="size of the tokenizer trained on the corpus")
    prepare.add_argument("--seed", type=int, default=0,
                         help="seeds the tokenizer's sample, the shuffling and the masks")
    prepare.add_argument("--workers", type=int, default=None,
                         help="processes (default: every core)")
    prepare.add_argument("--shard-mb", type=int, default=32,
                         help="corpus MB per shard (bounds each process' memory)")
    prepare.add_argument("--tokenizer-sample", type=int, default=None,
                         help="sentences the tokenizer learns from (default 1,000,000)")
    prepare.add_argument("--duplicate", type=int, default=None,
                         help="copies of each instance, each with its own static masks "
                              "(BERT's dupe_factor; default the family's: BERT 10)")
    prepare.add_argument("--batch-size", type=int, default=None,
                         help="the global batch, for models whose examples are cut for one "
                              "(XLNet); train with the same")
    prepare.set_defaults(run=_prepare)

    finetune = commands.add_parser("finetune", help="fine-tune a pretrained run on a TSV "
                                                    "of text<TAB>label")
    finetune.add_argument("run_dir", metavar="MODEL", help=TEXT_MODEL_HELP)
    finetune.add_argument("--train", required=True, help="TSV file: text<TAB>label")
    finetune.add_argument("--out", required=True,
                          help="directory for classifier.keras and its labels")
    finetune.add_argument("--epochs", type=int, default=None,
                          help="passes over --train (default 3; with --task-adapter 10, "
                               "AdapterHub's)")
    finetune.add_argument("--batch-size", type=int, default=None,
                          help="examples per step (default 16; with --task-adapter 32, "
                               "AdapterHub's)")
    finetune.add_argument("--learning-rate", type=float, default=None,
                          help="AdamW's learning rate (default 5e-5; with --task-adapter "
                               "1e-4, MAD-X's)")
    finetune.add_argument("--export", default=None,
                          help="also export the classifier as a SavedModel for TF Serving "
                               "to this directory (version 1)")
    finetune.add_argument("--overwrite", action="store_true",
                          help="replace an existing classifier.keras / --export version")
    finetune.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                          help="whether the TSV's first line is a header (default: detect)")
    finetune.add_argument("--keep-optimizer-state", action="store_true",
                          help="save AdamW's moments in classifier.keras too (about 3x the "
                               "weights' size), to fit on from them")
    _add_language_option(finetune, "the --train texts")
    finetune.add_argument("--freeze-token-embeddings", action="store_true",
                          help="keep the token embeddings as they are (monolingual transfer's "
                               "step 3, before `keras-ctx transfer-swap`)")
    finetune.add_argument("--task-adapter", action="store_true",
                          help="MAD-X: train a task adapter (reduction factor 16) and the "
                               "head only, the model frozen; saves task_adapter.safetensors "
                               "too")
    finetune.add_argument("--language-adapter", default=None, metavar="FILE",
                          help="MAD-X: the source language's adapter (`keras-ctx "
                               "adapter-language`), stacked frozen under --task-adapter")
    finetune.set_defaults(run=_finetune)

    embed = commands.add_parser("embed", help="print contextual vectors of words in texts")
    embed.add_argument("run_dir", metavar="MODEL", help=TEXT_MODEL_HELP)
    embed.add_argument("texts", nargs="+", help="one or more texts (quote each)")
    embed.add_argument("--word", default=None,
                       help="compare this word's vectors across the texts (cosine)")
    embed.add_argument("--save", default=None, help="save all vectors to this .npz file")
    embed.add_argument("--overwrite", action="store_true", help="replace an existing --save")
    _add_language_option(embed, "the texts")
    embed.set_defaults(run=_embed)

    export = commands.add_parser("export", help="export a SavedModel for TF Serving")
    export.add_argument("model", help=MODEL_HELP + " (or a `keras-ctx finetune` --out "
                                      "directory: its classifier)")
    export.add_argument("out", help="base directory; the export goes to OUT/<version>")
    export.add_argument("--version", type=int, default=1,
                        help="the version subdirectory TF Serving loads (the highest wins)")
    export.add_argument("--overwrite", action="store_true",
                        help="replace an existing OUT/<version>")
    export.add_argument("--sequence-length", type=int, default=None,
                        help="fix the serving inputs' length (default: the run's; a "
                             "preset's stays variable)")
    export.add_argument("--with-text", action="store_true",
                        help="also serve_text: strings in, the run's tokenizer inside (TF "
                             "Serving then needs the tensorflow-text ops)")
    export.add_argument("--xla-serving", action="store_true",
                        help="XLA-compile the serving functions (TF Serving on CPU needs "
                             "--xla_cpu_compilation_enabled; see saved_models/README.md)")
    _add_language_option(export, "serve_text's strings (with --with-text)")
    export.add_argument("--language-adapter", default=None, metavar="FILE",
                        help="MAD-X zero-shot: a classifier fine-tuned with "
                             "--language-adapter, with this language's adapter in its place")
    export.set_defaults(run=_export)

    generate = commands.add_parser("generate", help="generate text from a prompt (a run, "
                                   "checkpoint or saved CausalLM/Seq2SeqLM directory)")
    generate.add_argument("model", help="a run directory, a checkpoint (a directory, "
                                        "hf://ORG/NAME) or a saved text task (with its "
                                        "tokenizer; not a preset name)")
    generate.add_argument("prompt", help="the prompt (encoder-decoders: the source text)")
    generate.add_argument("--stream", action="store_true", help="print text as it is decoded")
    generate.add_argument("--max-length", type=int, default=None,
                          help="most tokens (default: the run's sequence length)")
    generate.add_argument("--sampler", default="greedy",
                          choices=["greedy", "random", "top_k", "top_p"],
                          help="how the next token is picked")
    generate.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    _add_language_option(generate, "the prompt and the text written")
    generate.set_defaults(run=_generate)

    convert = commands.add_parser("convert", help="convert a checkpoint (Hugging Face "
                                                  "directory, ...) to a keras_ctx run dir")
    convert.add_argument("source", help="a Hugging Face, google-research TF, allennlp ELMo "
                                        "or keras-hub checkpoint directory")
    convert.add_argument("dest", help="a new run directory (what embed, finetune and export "
                                      "take)")
    convert.add_argument("--overwrite", action="store_true",
                         help="replace a run already in DEST")
    convert.set_defaults(run=_convert)

    presets = commands.add_parser("presets", help="list presets with parameter counts")
    presets.add_argument("--family", default=None,
                         help="only this family's presets, e.g. bert or GPT-2 (case and "
                              "punctuation ignored; default: all)")
    presets.set_defaults(run=_presets)

    layers = commands.add_parser("layers", help="list the reusable layers")
    layers.set_defaults(run=_layers)

    _add_transfer_commands(commands)
    for command in commands.choices.values():
        _add_global_options(command, default=argparse.SUPPRESS)
    _refuse_empty_values(parser)
    return parser


def _add_transfer_commands(commands):
    """`ulmfit`, `cvt` and `cvt-tag`."""
    ulmfit = commands.add_parser(
        "ulmfit", help="ULMFiT: fine-tune an AWD-LSTM LM on target text, then a classifier "
                       "on a TSV of text<TAB>label (Howard & Ruder 2018)")
    ulmfit.add_argument("--text", required=True, help="target-domain text, one document "
                                                      "per line")
    ulmfit.add_argument("--train", required=True, help="TSV file: text<TAB>label")
    ulmfit.add_argument("--general-text", default=None,
                        help="general-domain text for stage 1 (default: skip it)")
    ulmfit.add_argument("--out", required=True, help="a new directory for the classifier")
    ulmfit.add_argument("--lm-epochs", type=int, default=1,
                        help="epochs of language-model fine-tuning on --text")
    ulmfit.add_argument("--epochs", type=int, default=None,
                        help="classifier epochs (default: one per layer group)")
    ulmfit.add_argument("--batch-size", type=int, default=64, help="examples per step")
    ulmfit.add_argument("--sequence-length", type=int, default=70,
                        help="tokens per BPTT window (Howard & Ruder 2018: 70)")
    ulmfit.add_argument("--vocabulary-size", type=int, default=60000,
                        help="most frequent words kept (Howard & Ruder 2018: 60,000)")
    ulmfit.add_argument("--seed", type=int, default=0, help="seeds the weights and the data")
    ulmfit.add_argument("--directions", choices=("forward", "backward", "both"), default="both",
                        help="the LMs and classifiers to train: both (the paper's: a forward "
                             "and a backward, their probabilities averaged), forward or "
                             "backward")
    ulmfit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="AwdLstmBackbone config, e.g. --set hidden_size=256")
    ulmfit.set_defaults(run=_ulmfit)

    cvt = commands.add_parser(
        "cvt", help="cross-view training of a tagger: tagged TSV (token<TAB>tag, blank "
                    "line between sentences) + unlabelled sentences (Clark et al. 2018)")
    cvt.add_argument("--train", required=True,
                     help="tagged TSV: token<TAB>tag, a blank line between sentences")
    cvt.add_argument("--unlabelled", required=True, help="one sentence per line")
    cvt.add_argument("--out", required=True, help="a new directory for the tagger")
    cvt.add_argument("--steps", type=int, default=1000, help="labelled+unlabelled pairs")
    cvt.add_argument("--batch-size", type=int, default=64, help="sentences per update")
    cvt.add_argument("--vocabulary-size", type=int, default=20000,
                     help="most frequent words kept")
    cvt.add_argument("--learning-rate", type=float, default=0.5,
                     help="peak learning rate of momentum SGD (cvt_text: 0.5)")
    cvt.add_argument("--warm-up-steps", type=int, default=5000,
                     help="updates of linear warm-up (cvt_text: 5000; each step makes "
                          "a labelled and an unlabelled update)")
    cvt.add_argument("--seed", type=int, default=0, help="seeds the weights and the data")
    cvt.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="CvtEncoder config, e.g. --set first_layer_size=256")
    cvt.set_defaults(run=_cvt)

    tag = commands.add_parser(
        "cvt-tag", help="tag sentences with a `keras-ctx cvt` tagger: prints one "
                        "word/TAG line per input line")
    tag.add_argument("run_dir", metavar="RUN_DIR", help="the --out directory of keras-ctx cvt")
    tag.add_argument("--input", required=True,
                     help="UTF-8 text, one whitespace-tokenised sentence per line")
    tag.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    tag.set_defaults(run=_cvt_tag)
    _add_monolingual_transfer_commands(commands)
    _add_adapter_commands(commands)


def _add_monolingual_transfer_commands(commands):
    """`transfer-vocabulary` and `transfer-swap`: monolingual transfer's steps 2 and 4
    (Artetxe, Ruder & Yogatama 2020); step 1 is `pretrain`, step 3 `finetune
    --freeze-token-embeddings`."""
    vocabulary = commands.add_parser(
        "transfer-vocabulary", help="monolingual transfer, step 2: a new language's tokenizer "
                                    "and token embeddings for a model's frozen body "
                                    "(Artetxe et al. 2020)")
    vocabulary.add_argument("source", metavar="SOURCE", help=TEXT_MODEL_HELP)
    vocabulary.add_argument("--text", required=True,
                            help="the new language's text (file/dir/glob), one sentence a "
                                 "line, a blank line between documents")
    vocabulary.add_argument("--out", required=True,
                            help="a run directory: SOURCE's body, the new embeddings and "
                                 "tokenizer (what embed, finetune and export take)")
    vocabulary.add_argument("--vocabulary-size", type=int, default=None,
                            help="entries of the tokenizer trained on --text (default: "
                                 "SOURCE's)")
    vocabulary.add_argument("--steps", type=int, default=300, help="optimizer steps in total")
    vocabulary.add_argument("--batch-size", type=int, default=16, help="global batch size")
    vocabulary.add_argument("--sequence-length", type=int, default=None,
                            help="tokens per training example (default: SOURCE's)")
    vocabulary.add_argument("--learning-rate", type=float, default=None,
                            help="peak learning rate (default: the family's recipe's)")
    vocabulary.add_argument("--seed", type=int, default=0,
                            help="seeds the tokenizer's sample, the new embeddings and the "
                                 "data")
    _add_resume_options(vocabulary)
    vocabulary.add_argument("--xla", choices=["auto", "on", "off"], default="auto",
                            help="jit_compile the train step, as pretrain's --xla")
    vocabulary.set_defaults(run=_transfer_vocabulary)

    swap = commands.add_parser(
        "transfer-swap", help="monolingual transfer, step 4: a fine-tuned classifier with "
                              "the new language's embeddings and tokenizer swapped in")
    swap.add_argument("classifier_dir", metavar="CLASSIFIER_DIR",
                      help="a `keras-ctx finetune --freeze-token-embeddings` --out directory")
    swap.add_argument("--embeddings", required=True,
                      help="the --out directory of `keras-ctx transfer-vocabulary` run on the "
                           "classifier's model")
    swap.add_argument("--out", required=True,
                      help="directory for the new classifier.keras (what export takes)")
    swap.add_argument("--overwrite", action="store_true",
                      help="replace an existing classifier.keras in --out")
    swap.set_defaults(run=_transfer_swap)


def _adapter_language(args):
    from keras_ctx.commands.adapter import language_adapter

    language_adapter(args.source, args.text, args.language, args.out, steps=args.steps,
                     batch_size=args.batch_size, sequence_length=args.sequence_length,
                     learning_rate=args.learning_rate, reduction_factor=args.reduction_factor,
                     checkpoint_every=args.checkpoint_every, seed=args.seed,
                     resume=not args.no_resume, overwrite=args.overwrite)
    return 0


def _add_adapter_commands(commands):
    """`adapter-language`: MAD-X's first stage (Pfeiffer et al. 2020); its second is
    `finetune --task-adapter --language-adapter`, its third `export --language-adapter`."""
    language = commands.add_parser(
        "adapter-language", help="MAD-X, stage 1: a language adapter (+ invertible adapter) "
                                 "trained by masked LM on a language's text, the model "
                                 "frozen (Pfeiffer et al. 2020)")
    language.add_argument("source", metavar="SOURCE", help=TEXT_MODEL_HELP)
    language.add_argument("--text", required=True,
                          help="the language's text (file/dir/glob), one sentence a line, a "
                               "blank line between documents")
    language.add_argument("--language", required=True, metavar="CODE",
                          help="the adapter's name, a language code (letters, digits, _)")
    language.add_argument("--out", required=True,
                          help="directory for language_adapter.safetensors, its .json and "
                               "the training checkpoints")
    language.add_argument("--steps", type=int, default=300, help="optimizer steps in total")
    language.add_argument("--batch-size", type=int, default=64,
                          help="examples per step (MAD-X's 64)")
    language.add_argument("--sequence-length", type=int, default=None,
                          help="tokens per example (default: SOURCE's position limit, 512 "
                               "for mBERT: the released scripts' block size)")
    language.add_argument("--learning-rate", type=float, default=1e-4,
                          help="AdamW's first learning rate, falling linearly to 0 (MAD-X's "
                               "1e-4)")
    language.add_argument("--reduction-factor", type=int, default=2,
                          help="hidden size / the adapter's bottleneck (MAD-X's 2)")
    language.add_argument("--seed", type=int, default=0,
                          help="seeds the adapter's weights, the masks and the data")
    _add_resume_options(language)
    language.add_argument("--overwrite", action="store_true",
                          help="replace a language adapter already saved in --out")
    language.set_defaults(run=_adapter_language)


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    check_flag_names(parser, argv)
    args = parser.parse_args(argv)
    missing = unsupported_backend(args.backend) or missing_backend(args.backend)
    if missing:
        print(f"keras-ctx {args.command}: error: {missing}", file=sys.stderr)
        return 2
    if args.backend and "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = args.backend  # Keras reads it once, at its import
    from keras_ctx.commands import exits

    return exits.run_command(_checked(args.run), args, args.command, verbose=args.verbose)


def _options(parser):
    """{option string: whether it takes a value} of `parser`."""
    return {option: action.nargs != 0 for action in parser._actions
            for option in action.option_strings}


def _subcommands(parser):
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def check_flag_names(parser, argv):
    """Refuses (argparse's exit 2, one line) the first flag of `argv` that its parser lacks,
    naming the closest, before argparse reads anything else: a mistyped flag is reported as
    itself, not as the error it causes (`keras-ctx --bakend jax presets` would read `jax`
    as the command, `pretrain ... --ot x` say --out is missing)."""
    from keras_ctx.common.validation import closest

    current, options = parser, _options(parser)
    commands = _subcommands(parser)
    arguments = iter(argv)
    for argument in arguments:
        if argument == "--":
            return  # the rest are values
        if not argument.startswith("-") or _NEGATIVE_NUMBER.match(argument):
            if current is parser:
                if argument not in commands:
                    return  # an unknown command: argparse names it (with the choices)
                current = commands[argument]
                options = _options(current)
            continue
        name, equals, _ = argument.partition("=")
        if name not in options:
            current.error(f"unrecognized arguments: {name}{closest(name, options)}")
        if options[name] and not equals:
            next(arguments, None)  # the flag's value


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse reads these as values


def missing_backend(flag=None):
    """One line naming the package the chosen Keras backend lacks and the line that
    installs it, or None when it is installed (or not one `--backend` offers).

    Args:
        flag: `--backend`'s value, or None for KERAS_BACKEND's (else tensorflow).
    """
    name = flag or os.environ.get("KERAS_BACKEND", "tensorflow")
    if name not in BACKENDS:
        return None  # Keras names the backends it knows
    modules, extra = BACKENDS[name]
    absent = [module for module in modules if not _installed(module)]
    if not absent:
        return None
    chosen = f"--backend {name}" if flag else f"KERAS_BACKEND={name}"
    return (f"{chosen} needs {absent[0]}, which is not installed: {install_command(extra)} "
            "(from the root of the keras_ctx clone)")


def _installed(module):
    """Whether the top-level `module` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a finder on sys.meta_path said it is absent
        return False


def _checked(run):
    """`run`, after Keras and the package's face are imported. Each command's function
    checks its own arguments, once, before anything is written (`--set` and the numeric
    flags against `keras_ctx.common.validation.FLAGS`)."""
    def checked(args):
        import keras_ctx

        keras_ctx.import_all()
        return run(args)

    return checked


if __name__ == "__main__":
    sys.exit(main())

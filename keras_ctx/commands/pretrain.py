"""`keras-ctx pretrain`: a preset pretrained on a corpus into a run directory.

A pretraining recipe turns (preset, corpus, sizes) into a tokenizer trained
on the corpus, a backbone, the family's pretrainer and its endless tf.data
pipeline; everything family-specific comes from the preset's entry in
`keras_ctx.families` (its tokenizer, `keras_ctx.data.pipelines` builder and
pretrainer). `pretrain` trains with `keras_ctx.training.fit_resumable` and
saves a run directory (`keras_ctx.runs`).

    >>> from keras_ctx.commands.pretrain import pretrain
    >>> pretrain("bert-tiny", out="runs/bert", corpus="corpus.txt", steps=300)
"""

import ast
import dataclasses
import os
import sys
import time

import keras

from keras_ctx import runs
from keras_ctx.commands import pretrain_checks
from keras_ctx.commands.embed import TextModel
from keras_ctx.commands.export import export_loaded
from keras_ctx.commands.pretrain_checks import VOCABULARY_SIZE, PretrainRequest  # noqa: F401
from keras_ctx.commands.pretrain_from import continued_model
from keras_ctx.commands.sense_table import show_sense_table
from keras_ctx.common import files, progress, validation
from keras_ctx.common.progress import say
from keras_ctx.data import corpora, fingerprints, prepare, prepared_ids, token_counts
from keras_ctx.data.prepared_input import PreparedInput
from keras_ctx.data.tokenizers import TOKENIZER_SAMPLE, train_tokenizer
from keras_ctx.export import check_export_target
from keras_ctx.models import presets
from keras_ctx.models.presets import build as build_preset
from keras_ctx.optimizers import bert_recipe
from keras_ctx.pretraining.kept_head import head_weights
from keras_ctx.pretraining.strategies import make_strategy
from keras_ctx.training import StagedInput, fit_resumable


class StepProgbar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, each chunk headed by the steps it trains.

    A run is fit in chunks of --checkpoint-every steps, which Keras calls epochs
    ("Epoch 1/10" for --steps 1000). Passed ahead of `TrainingProgress`, the bar
    closes its line before that prints its own (it was glued to the bar's end).
    """

    def __init__(self, steps):
        super().__init__()
        self.total = steps

    def on_epoch_begin(self, epoch, logs=None):
        epochs, self.epochs = self.epochs, 1  # no "Epoch i/n" line: the steps instead
        try:
            super().on_epoch_begin(epoch, logs)
        finally:
            self.epochs = epochs
        if self.verbose:
            step = int(self.model.optimizer.iterations.numpy())
            last = min(step + self.target, self.total)  # target: this chunk's steps
            say(f"Steps {step + 1}-{last} of {self.total}:")


class TrainingProgress(keras.callbacks.Callback):
    """Says when the first (compiling) step is done, then steps done and time left.

    One line per checkpoint chunk (Keras' own line, or its progress bar on a
    terminal, shows the loss); the time left is measured after the first
    step, which also traces and compiles the step.
    """

    def __init__(self, steps):
        super().__init__()
        self.steps = steps
        self.first = None  # (step, time) after the first step of this process
        self.first_loss = None  # that step's loss

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        if self.first is None:
            self.first = (self._step(), time.time())
            self.first_loss = (logs or {}).get("loss")
            took = progress.duration(time.time() - self.began)
            live = (self.params or {}).get("verbose") == 1  # a terminal's bar holds the line
            say(f"{chr(10) * live}Compiled the training step in {took}; training to step "
                f"{self.steps}.")

    def on_train_begin(self, logs=None):
        if self.first is None:
            self.began = time.time()

    def on_epoch_end(self, epoch, logs=None):
        step, (first_step, first_time) = self._step(), self.first
        if step > first_step:
            left = (time.time() - first_time) / (step - first_step) * (self.steps - step)
            say(f"Step {step}/{self.steps}, about {progress.duration(left)} left.")


def build(preset, documents, run, overrides=None, sample=None, claimed=None, origin=None,
          stages=()):
    """(backbone, pretrainer, endless dataset, tokenizer to save, extra run info).

    Args:
        preset: a `Preset` (`keras_ctx.models.presets.preset`) or a preset name; its
            family supplies the recipe.
        documents: tf.data of documents (1-D tf.string sentences).
        run: a `keras_ctx.families.Run` (sizes and seed).
        overrides: backbone config values to change (over the preset's and the
            family's `recipe_config`).
        sample: the sentences the tokenizer learns from (`corpora.sample_sentences`);
            default a seeded sample of `documents`.
        claimed: (tokenizer, its run.json info) to use instead of training one: a
            resumed run's (`keras_ctx.runs.claimed_tokenizer`).
        origin: the checkpoint `--from` continues (`pretrain_from`): its backbone,
            tokenizer (unless `claimed`) and head.
        stages: ((first step, sequence length), ...) of a run in stages (more than
            one): the dataset is a `keras_ctx.training.StagedInput` of the family's
            pipeline at each stage's length over `documents`, the model built at the first.
    """
    preset = presets.preset(preset)
    family = preset.family
    if family.dataset is None:
        raise ValueError(family.no_pretraining
                         or f"`keras-ctx pretrain` has no recipe for {family.name} yet.")
    if claimed is not None:
        say("Reusing the tokenizer this run was started with.")
        tokenizer, sampled = claimed
    elif origin is not None:
        tokenizer, sampled = origin.tokenizer, {}
    else:
        tokenizer, sampled = train_tokenizer(family, documents if sample is None else sample,
                                             run)
    backbone, pretrainer = (_model(preset, tokenizer, run, overrides) if origin is None
                            else continued_model(origin, preset, tokenizer, run))
    if len(stages) > 1:  # one dataset a stage, each at its length, from the same corpus
        dataset = StagedInput(tuple(
            (first, family.dataset(documents, tokenizer, dataclasses.replace(
                run, sequence_length=length)).repeat()) for first, length in stages))
    else:
        dataset = family.dataset(documents, tokenizer, run).repeat()
    saved_tokenizer, extra = family.run_files(tokenizer)
    return backbone, pretrainer, dataset, saved_tokenizer, dict(extra, **sampled)


def _model(preset, tokenizer, run, overrides):
    family = preset.family
    overrides = {**family.recipe_config(run), **(overrides or {})}  # the user's win
    if family.sized_by_tokenizer:
        overrides["vocabulary_size"] = tokenizer.vocabulary_size() + family.extra_tokens
    say(f"Building {preset.name}...")
    backbone = build_preset(preset, **overrides)
    say(f"Built {preset.name}: {backbone.count_params():,} parameters"
        + (f" (its vocabulary is the trained tokenizer's {overrides['vocabulary_size']:,} "
           "entries; `keras-ctx presets` counts the preset's own)."
           if "vocabulary_size" in overrides else "."))
    return backbone, family.pretrainer(backbone, tokenizer, run)


def build_prepared(preset, data_dir, run, overrides=None, manifest=None):
    """As `build`, from a `keras-ctx prepare` directory (`manifest`: its checked manifest,
    `pretrain_checks.check_prepared`)."""
    preset = presets.preset(preset)
    family = preset.family
    if manifest is None:
        manifest = pretrain_checks.check_prepared(data_dir, preset, run.sequence_length,
                                                  batch_size=run.batch_size)
    tokenizer = prepare.load_tokenizer(data_dir)
    ids = prepared_ids.recipe_of(family)  # the recipe's own pipeline over prepared ids
    run = prepared_ids.prepared_run(run, data_dir, manifest) if ids else run
    backbone, pretrainer = _model(preset, tokenizer, run, overrides)
    dataset = (family.dataset(None, tokenizer, run) if ids else PreparedInput(
        data_dir, manifest, family.prepared(tokenizer, run), run.batch_size, run.seed))
    saved_tokenizer, extra = family.run_files(tokenizer)
    record = {k: manifest[k] for k in ("examples", "layout", "tokenizer", "settings")}
    record["sha256"] = [s["sha256"] for s in manifest["shards"]]
    return backbone, pretrainer, dataset, saved_tokenizer, dict(extra, data=record)


def _loss(value):
    return "nan" if value is None else f"{float(value):.3f}"


def _already_exported(out, export, version, steps, done, overwrite):
    """Whether a rerun of a finished run finds its own export: the run reached `steps`
    and export/version was written after the run's backbone (what `pretrain` does)."""
    target = os.path.join(export, str(version))
    backbone = os.path.join(out, runs.BACKBONE_FILE)
    return (not overwrite and done == steps and os.path.isdir(target) and os.listdir(target)
            and os.path.isfile(backbone)
            and os.path.getmtime(target) >= os.path.getmtime(backbone))


def parse_overrides(pairs):
    """["num_layers=2", "dropout=0.0"] -> {"num_layers": 2, "dropout": 0.0}."""
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


def optimizer(learning_rate, steps, family=None, hidden_size=512):
    """The optimizer of `family`'s paper (BERT's if None) for a `steps`-update run at
    `learning_rate` (None: the family's default for `hidden_size`)."""
    recipe = (family.optimizer if family is not None else None) or bert_recipe
    return recipe(learning_rate, steps, hidden_size)


def use_xla(choice):
    """`jit_compile` for the step: True, False, or "auto", which the Pretrainer's step
    resolves per backend (TensorFlow: XLA on GPU/TPU only, its oneDNN kernels beat
    XLA on CPU, benchmarks/RESULTS.md; JAX: always compiled, op by op is far slower)."""
    return choice == "on" if choice != "auto" else "auto"


def pretrain(preset, out, **arguments):
    """Pretrains `preset` on a corpus into the run directory `out` (resumable).

    Arguments: the fields of `PretrainRequest` (`corpus`, `steps`, `batch_size`,
    `sequence_length`, `vocabulary_size`, `learning_rate`, `seed`, `strategy`,
    `mixed_precision`, `xla`, `checkpoint_every`, `resume`, `overrides`, `export`,
    `overwrite`, `show_contexts`, `data`, `corpus_changed`, `version`).
    `data`: a `keras-ctx prepare` directory to train on instead of `corpus`
    (its manifest is checked and fingerprinted in pretrain_settings.json); the
    sizes it was prepared with are the run's (`vocabulary_size` None: the
    data's, or 8000 on a corpus; another value is refused).
    `export`, `version`, `overwrite`: as `keras-ctx export` (the run's
    SavedModel goes to export/version); a rerun of a finished run whose export
    is already there (written after the run was saved) exports nothing and says so.
    `corpus_changed="continue"` resumes a run whose corpus differs from the one
    its checkpoints were trained on (by default refused); the run keeps the
    tokenizer it started with (`keras_ctx.runs.check_data`).

    Returns the run info written to `out/run.json`.
    """
    return train(PretrainRequest.checked(preset, out, **arguments))


def train(request):
    """Runs a checked `PretrainRequest`: each step below trusts it.

    The run directory is locked, then read once (`runs.look`: its settings and
    latest checkpoint), and that record goes to every check and to the claim.
    """
    distribution = make_strategy(request.strategy, request.batch_size)  # before any text
    with files.writing(request.out):
        existing = runs.look(request.out)
        done = existing.step if request.resume else 0
        text = pretrain_checks.resolve_text(request, existing)
        exported = _check_export(request, done)
        keras.utils.set_random_seed(request.seed)
        if request.mixed_precision:
            keras.config.set_dtype_policy("mixed_bfloat16")
        # A recipe's corpus counts (SpanBERT's) are kept in the run once claimed.
        with token_counts.kept_in(request.out, text.fingerprint["corpus"], request.resume):
            with distribution.scope():
                model = _built(request, text, existing)
            tokenizer_sha256 = _claim(request, text, model, existing)
        result = _fit(request, model, done)
        info = _save(request, text, model, result, tokenizer_sha256)
        _export(request, exported, model, info)
    if request.show_contexts and request.family.inputs != "encoder_decoder":
        # The model in memory is the one just saved (or, a finished run, restored from its
        # last checkpoint): the table is not read back from the run directory.
        show_sense_table(request.out, TextModel.in_memory(info, model.backbone,
                                                          model.tokenizer))
    return info


def _check_export(request, done):
    """Whether the export is already there (a rerun of a finished run); refuses a taken
    export target otherwise."""
    export, version, overwrite = request.export, request.version, request.overwrite
    exported = export and _already_exported(request.out, export, version, request.steps,
                                            done, overwrite)
    if export and not exported:
        check_export_target(export, version, overwrite)
    if request.text_export and not exported:
        check_export_target(export.rstrip("/") + "-text", version, overwrite)
    return exported


@dataclasses.dataclass(frozen=True)
class _Built:
    """What `_built` made: the backbone, its compiled pretrainer, the endless dataset, the
    tokenizer to save, the run's extra run.json info and whether the tokenizer is the claimed
    one (already in the run directory)."""

    backbone: object
    pretrainer: object
    dataset: object
    tokenizer: object
    extra: dict
    claimed: bool


def _built(request, text, existing):
    """The model, data and tokenizer of the run, the pretrainer compiled (in the
    distribution's scope)."""
    preset, run, seed = request.preset, request.run, request.seed
    # A resumed run keeps the tokenizer it was claimed with: trainers break ties
    # between equally frequent pieces differently in each process.
    claimed = (runs.claimed_tokenizer(request.out, existing)
               if request.resume and not text.prepared else None)
    # A recipe whose text is its inputs (CoVe's --parallel pairs, XLM's --languages corpora,
    # each sentence with its language) says what its tokenizer reads; None: the corpus' sample.
    tokenizer_text = getattr(preset.family.dataset, "tokenizer_text", None)
    if text.prepared:
        parts = build_prepared(preset, text.source, run, request.overrides, request.manifest)
    else:
        sample = None  # a claimed tokenizer, or the --from checkpoint's, learns nothing
        if claimed is None and request.origin is None:
            sample = tokenizer_text(run) if tokenizer_text else None
            if sample is None:
                sample = corpora.sample_sentences(text.corpus, seed=seed)
        parts = build(preset, corpora.documents(text.corpus), request.run_at(
            request.stages[0][1]), request.overrides, sample=sample, claimed=claimed,
            origin=request.origin, stages=request.stages)
    built = _Built(*parts, claimed=claimed is not None)
    validation.check_overrides_applied(preset.name, built.backbone, request.overrides)
    hidden = getattr(built.backbone, "hidden_size", 512)
    built.pretrainer.compile(
        optimizer=optimizer(request.learning_rate, request.steps, request.family, hidden),
        jit_compile=use_xla(request.xla))
    return built


def _claim(request, text, model, existing):
    """Claims the run directory, saving a new run's tokenizer into it once; returns the
    tokenizer's hash (what run.json records)."""
    hashes = []
    kept = {k: v for k, v in model.extra.items() if k != TOKENIZER_SAMPLE}

    def save_tokenizer():
        if not model.claimed:  # a claimed one is in the directory already
            runs.save_claimed_tokenizer(
                request.out, model.tokenizer,
                {k: v for k, v in model.extra.items() if k == TOKENIZER_SAMPLE})
        hashes.append(runs.tokenizer_fingerprint(request.out, model.tokenizer, kept))
        return hashes[-1]

    runs.claim(request.out, request.settings(), fresh=not request.resume,
               data=text.fingerprint, corpus_changed=request.corpus_changed,
               existing=existing, corpus_checked=text.recorded is not None,
               save_tokenizer=save_tokenizer,
               earlier_tokenizer=lambda: fingerprints.tokenizer(model.tokenizer, kept))
    return hashes[-1] if model.tokenizer is not None else None


def _fit(request, model, done):
    """Trains to `request.steps` from step `done`; says the loss it went from and to."""
    steps = request.steps
    if done < steps:
        if getattr(presets.pretraining(request.preset.name, required=False), "stages", None):
            say(presets.describe_stages(
                request.preset.name, steps,
                given={name for name, value in request.run.inputs if value},
                lengths=request.stages, length_from="--data" if request.data else
                "--sequence-length"))
        say(f"Compiling the training step{' with XLA' if model.pretrainer.jit_compile else ''}"
            " (the first step traces it)...")
    return fit_saying(model.pretrainer, model.dataset, steps, request.out,
                      request.checkpoint_every, request.resume, done)


def fit_saying(pretrainer, dataset, steps, out, checkpoint_every, resume, done):
    """`fit_resumable` to `steps` from step `done`, with the progress lines of the commands
    that pretrain (`pretrain`, `transfer-vocabulary`); says the loss it went from and to."""
    # A live progress bar with ETA on a terminal; one line per chunk when piped.
    tracker = TrainingProgress(steps)
    result = fit_resumable(pretrainer, dataset, steps, out, checkpoint_every=checkpoint_every,
                           resume=resume, callbacks=[StepProgbar(steps), tracker],
                           verbose=1 if sys.stdout.isatty() else 2, start=done)
    if result["history"]:
        (first_step, _), last = tracker.first, result["history"][-1]
        start = result["history"][-2]["step"] if len(result["history"]) > 1 else done
        print(f"Loss {_loss(tracker.first_loss)} at step {first_step} -> "
              f"{_loss(last.get('loss'))} over steps {start + 1}-{last['step']}.")
    else:
        print(f"Nothing left to train: {out} already reached step {steps}.")
    return result


def _save(request, text, model, result, tokenizer_sha256):
    """Saves the run (backbone, run.json; the tokenizer is there since the claim) unless a
    rerun of a saved, finished run trained nothing; returns its run.json info."""
    out, preset = request.out, request.preset
    # sequence_length: the last stage's, which export, embed and finetune read.
    info = {"model": preset.name, "family": preset.family.name,
            "sequence_length": request.sequence_length, "overrides": {**request.overrides, **request.data_settings},
            "corpus": text.corpus, "steps": request.steps, "seed": request.seed,
            **({"stages": [list(stage) for stage in request.stages]}
               if len(request.stages) > 1 else {}), **model.extra}
    saved = all(os.path.isfile(os.path.join(out, name))
                for name in (runs.RUN_FILE, runs.BACKBONE_FILE))
    if result["history"] or not saved:
        say(f"Saving the run to {out}...")
        runs.save_run(out, info, model.backbone, model.tokenizer, overwrite=True,
                      tokenizer_sha256=tokenizer_sha256,
                      head_weights=head_weights(model.pretrainer))
        print(f"Saved the backbone and tokenizer to {out}.")
    return info


def _export(request, exported, model, info):
    """`--export`: the run's SavedModel (and its text-in copy) from the model in memory, or
    why nothing is exported."""
    export, version, overwrite = request.export, request.version, request.overwrite
    backbone, tokenizer = model.backbone, model.tokenizer
    family, length = info["family"], info["sequence_length"]
    if exported:
        print(f"{os.path.join(export, str(version))} already holds this run's export and "
              f"the run trained nothing new: nothing exported (--version {version + 1} "
              "exports another, --overwrite replaces it).")
    elif export:
        say(f"Exporting a SavedModel to {export}...")
        export_loaded(backbone, tokenizer, family, export, version, overwrite, length,
                      with_text=False)
        if request.text_export and tokenizer is not None and getattr(
                tokenizer, "in_graph", True):
            say(f"Also exporting a text-in copy (serve_text: strings in, for servers "
                f"with tensorflow-text ops) to {export.rstrip('/')}-text...")
            export_loaded(backbone, tokenizer, family, export.rstrip("/") + "-text", version,
                          overwrite, length, with_text=True)

"""The checked arguments of a pretraining run (`PretrainRequest`) and the checks of its data.

`PretrainRequest.checked` checks every argument of `keras-ctx pretrain` once,
at the boundary (the CLI and the Python `pretrain` both go through it), one
message per rule; what is below trusts the request. `resolve_text` turns `--corpus` / `--data` into a `TrainingText` once: it
fingerprints the text (`keras_ctx.data.fingerprints`), refuses an `--out`
inside it (the run's own files would become corpus on the next read), and
refuses to resume a run on another corpus than its checkpoints'. `pretrain`
passes that object down; nothing below it looks at the corpus source again
to decide what it is.
"""

import dataclasses
import glob
import os

from keras_ctx import registry, runs
from keras_ctx.common import validation
from keras_ctx.common.errors import ConfigError, RunDirectoryError
from keras_ctx.data import fingerprints, knowledge_masking, prepare
from keras_ctx.families.common import data_settings
from keras_ctx.models import presets

VOCABULARY_SIZE = 8000  # --vocabulary-size when neither given nor fixed by --data
# --sequence-length when not given, for a preset whose record gives its stages no length.
SEQUENCE_LENGTH = 64
# `--set` keys that change the run's data, not its backbone: a preset's published
# `Pretraining` fields, each with its rule; a family takes those its recipe reads.
DATA_RULES = {"mask_rate": validation.open_fraction,
              "mask_token_rate": validation.probability,
              "random_token_rate": validation.probability,
              "mean_span": validation.positive_number,
              "max_span": validation.positive_int}


@dataclasses.dataclass(frozen=True)
class PretrainRequest:
    """One `keras-ctx pretrain`'s arguments, each checked once by `checked`.

    The fields are `keras_ctx.commands.pretrain.pretrain`'s arguments, with
    `preset` resolved to its `Preset`, `vocabulary_size` to the run's (the
    data's with `data`, else 8000) and `manifest` the checked manifest of `data`.
    `sequence_length` None: the lengths of the preset's stages where its record gives
    them (BERT's 128 then 512, Devlin et al. 2019, A.2), each stage trained in turn in
    the run, else 64; resolved to the last stage's length (what run.json records), and
    `stages` to ((first step, length), ...) of the stages the run trains.
    """

    preset: object
    out: str
    corpus: object = "builtin"
    steps: int = 300
    batch_size: int = 16
    sequence_length: object = None
    vocabulary_size: object = None
    learning_rate: object = None
    seed: int = 0
    strategy: str = "default"
    mixed_precision: bool = False
    xla: str = "auto"
    checkpoint_every: int = 100
    resume: bool = True
    overrides: dict = dataclasses.field(default_factory=dict)
    export: object = None
    overwrite: bool = False
    show_contexts: bool = True
    data: object = None
    corpus_changed: str = "refuse"
    version: int = 1
    manifest: object = None
    data_settings: dict = dataclasses.field(default_factory=dict)
    languages: tuple = ()  # a multilingual recipe's: each --corpus source's language
    parallel: tuple = ()  # its (source, target, file) parallel pairs
    glove: object = None  # a recipe over word vectors' GloVe text file (CoVe's)
    phrases: object = None  # a knowledge-masking recipe's lexicon files (ERNIE's), one
    entities: object = None  # name a line (`--phrases`, `--entities`)
    source: object = None  # --from: the checkpoint a continued pretraining starts from
    origin: object = dataclasses.field(default=None, compare=False, repr=False)  # its model
    stages: tuple = ()  # ((first step, sequence length), ...) the run trains, in order

    @classmethod
    def checked(cls, preset, out, **arguments):
        """The request of these arguments; ConfigError (one line) on the first bad one.

        Nothing is read but the preset table and `--data`'s manifest; nothing is written.
        """
        given = cls(preset, out, **arguments)
        validation.check_given(out=out, corpus=given.corpus, export=given.export,
                               data=given.data)
        preset = presets.preset(preset)  # the one lookup: unknown names fail here
        validation.check_args(**{name: getattr(given, name) for name in (
            "steps", "batch_size", "sequence_length", "checkpoint_every", "learning_rate",
            "vocabulary_size", "seed")})
        if given.export:  # --version says where the export goes: unread without one
            validation.check_arg("version", given.version)
        validation.check_export_path(given.export)
        if given.corpus_changed not in runs.CORPUS_CHANGED:
            raise ConfigError(f"--corpus-changed takes {' or '.join(runs.CORPUS_CHANGED)}, "
                              f"got {given.corpus_changed!r}.")
        check_out_outside_corpus(given.corpus if given.data is None else given.data, out)
        manifest, vocabulary_size = None, given.vocabulary_size or VOCABULARY_SIZE
        if given.data is not None:  # its flags are the data's: one that differs is refused
            manifest = check_prepared(given.data, preset, given.sequence_length,
                                      given.vocabulary_size, given.batch_size)
            vocabulary_size = manifest["settings"]["vocabulary_size"]
        stages = stage_lengths(preset.name, given.steps, given.sequence_length,
                               manifest and manifest["settings"]["sequence_length"])
        overrides = dict(given.overrides or {})
        languages, parallel = _multilingual(preset.family, given)
        request = dataclasses.replace(given, preset=preset, out=os.fspath(out),
                                      languages=languages, parallel=parallel,
                                      **_lexicon_files(preset.family, given),
                                      vocabulary_size=vocabulary_size, manifest=manifest,
                                      data_settings=_data_settings(preset, overrides),
                                      overrides=overrides, stages=stages,
                                      sequence_length=stages[-1][1])
        request._check_overrides()
        if given.source is not None:  # its tokenizer's vocabulary is the run's
            from keras_ctx.commands.pretrain_from import resolve_source

            origin = resolve_source(given.source, preset, request.overrides,
                                    given.vocabulary_size, given.data)
            request = dataclasses.replace(request, origin=origin, vocabulary_size=int(
                origin.tokenizer.vocabulary_size()))
        return request

    def _check_overrides(self):
        """`--set` keys, types and values, against the config the run builds from."""
        preset, family, overrides = self.preset, self.preset.family, self.overrides
        validation.check_overrides(preset.name, preset.backbone_cls, preset.config, overrides)
        config = {**validation.constructor_defaults(preset.backbone_cls), **preset.config,
                  **family.recipe_config(self.run), **overrides}
        limit = config.get("max_sequence_length")
        for number, (first, length) in enumerate(self.stages, 1):
            if len(self.stages) > 1 and isinstance(limit, int) and length > limit:
                raise ConfigError(
                    f"{preset.name}'s stage {number} trains at length {length} from step "
                    f"{first} (its paper's stages, docs/pretraining-defaults.md) but the "
                    f"backbone has max_sequence_length {limit}: give --sequence-length "
                    f"{limit} or less (one stage at that length), or drop --set "
                    "max_sequence_length.")
        validation.check_override_values(preset.name, family, config, overrides,
                                         self.sequence_length)

    @property
    def family(self):
        return self.preset.family

    @property
    def run(self):
        """The `Run` (sizes and seed) the family's recipe builds from."""
        return registry.Run(self.preset.name, self.batch_size, self.sequence_length,
                            self.vocabulary_size, self.seed,
                            data=tuple(sorted(self.data_settings.items())),
                            inputs=(("languages", self.languages), ("parallel", self.parallel),
                                    ("corpora", self._corpora()), ("glove", self.glove),
                                    *((name, path) for name, path in self.lexicons.items())))

    def run_at(self, sequence_length):
        """The `Run` of one stage: the run's at that stage's sequence length."""
        return dataclasses.replace(self.run, sequence_length=sequence_length)

    @property
    def lexicons(self):
        """{"phrases" / "entities": its file} of the lexicons given (ERNIE's recipe's)."""
        return {name: path for name, path in (("phrases", self.phrases),
                                              ("entities", self.entities)) if path}

    def _corpora(self):
        """One `--corpus` source per language (with `languages`), else ()."""
        if not self.languages:
            return ()
        single = isinstance(self.corpus, (str, os.PathLike))
        return (self.corpus,) if single else tuple(self.corpus)

    @property
    def text_export(self):
        """Whether `--export` also writes a text-in copy (families with a text framing)."""
        return bool(self.export) and self.family.framing is not None

    def settings(self):
        """What pretrain_settings.json records (a resumed run must repeat it)."""
        return {"model": self.preset.name, "overrides": {**self.overrides, **self.data_settings},
                "corpus": None if self.data else self.corpus,
                **({"data": self.data} if self.data else {}),
                "sequence_length": self.sequence_length, "batch_size": self.batch_size,
                **({"stages": [list(stage) for stage in self.stages]}
                   if len(self.stages) > 1 else {}),
                "vocabulary_size": self.vocabulary_size, "seed": self.seed,
                "learning_rate": self.learning_rate, "steps": self.steps,
                "checkpoint_every": self.checkpoint_every, "strategy": self.strategy,
                "mixed_precision": self.mixed_precision, "xla": self.xla,
                **({"languages": list(self.languages),
                    "parallel": [list(pair) for pair in self.parallel]}
                   if self.languages else {}),
                **({"parallel": [list(pair) for pair in self.parallel], "glove": self.glove}
                   if self.glove else {}),
                **self.lexicons,
                **({"from": self.source} if self.source is not None else {})}


def _multilingual(family, given):
    """The checked (languages, parallel) of a recipe that reads them (its dataset's
    `check_inputs`, XLM's); refused for any other recipe."""
    check = getattr(family.dataset, "check_inputs", None)
    if given.data is not None:  # prepared data's inputs are the ones it recorded
        if given.languages or given.parallel or given.glove:
            raise ConfigError("--languages, --parallel and --glove are --data's own (recorded "
                              "when it was prepared): drop them.")
        return (), ()
    reads_glove = getattr(check, "reads_glove", False)  # a recipe over word vectors (CoVe's)
    if given.glove and not reads_glove:
        raise ConfigError(f"--glove is read by a recipe over word vectors (CoVe's); the "
                          f"{family.name} recipe reads none: drop it.")
    if check is None:
        if given.languages or given.parallel:
            raise ConfigError(f"--languages and --parallel are read by a multilingual recipe "
                              f"(XLM's); the {family.name} recipe reads one --corpus: drop them.")
        return (), ()
    return check(given.corpus, given.languages, given.parallel,
                 *((given.glove,) if reads_glove else ()))


def stage_lengths(preset, steps, sequence_length=None, data_length=None):
    """((first step, sequence length), ...) of the stages a run of `steps` trains.

    One stage at `sequence_length` where given (`--sequence-length`), or at the
    prepared data's (`data_length`, `--data`); else the stages of the preset's
    record that a run of `steps` reaches (`presets.stage_plan`), where each gives
    its length (BERT's: 90% of the steps at 128, the rest at 512), consecutive
    stages of one length merged; else one stage at SEQUENCE_LENGTH.
    """
    if sequence_length is not None or data_length is not None:
        return ((0, sequence_length if sequence_length is not None else data_length),)
    record = presets.pretraining(preset, required=False)
    plan = presets.stage_plan(preset, steps) if record is not None and record.stages else []
    if not plan or not all(stage.sequence_length for stage, _ in plan):
        return ((0, SEQUENCE_LENGTH),)
    stages = []
    for stage, first in plan:
        if not stages or stages[-1][1] != stage.sequence_length:
            stages.append((first, stage.sequence_length))
    return tuple(stages)


def _lexicon_files(family, given):
    """{"phrases" / "entities": the file, as given} of the lexicons a knowledge-masking
    recipe reads (the family's dataset's `lexicons`, ERNIE's); each is read once here, so
    a missing, empty or non-UTF-8 file is refused before anything is written. Refused
    for any other recipe and with --data."""
    readable = getattr(family.dataset, "lexicons", ())
    files = {}
    for name in ("phrases", "entities"):
        path = getattr(given, name)
        if path is None:
            continue
        if name not in readable:
            raise ConfigError(f"--{name} is read by a recipe with knowledge masking "
                              f"(ERNIE's); the {family.name} recipe reads no lexicon: drop it.")
        if given.data is not None:
            raise ConfigError(f"--{name} is read when the corpus is: --data holds examples "
                              f"already; drop --{name}, or pretrain from --corpus.")
        knowledge_masking.read_lexicon(path, f"--{name}")
        files[name] = os.fspath(path)
    return files


def _data_settings(preset, overrides):
    """The data settings among the `--set` values (`DATA_RULES`), checked and taken out
    of `overrides` (what is left goes to the backbone)."""
    settings, family = {}, preset.family
    readable = data_settings(family, preset.name)
    for key in [key for key in overrides if key in DATA_RULES]:
        if key not in readable:
            raise ConfigError(
                f"--set {key}: the {family.name} recipe does not read `{key}` for its data"
                + (f" (it reads {', '.join(readable)})" if readable else "")
                + "; drop it, or build the data in Python (keras_ctx.data.pipelines).")
        settings[key] = DATA_RULES[key](key, overrides.pop(key))
    return settings


def _inside(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([path, root]) == root


def _corpus_roots(corpus):
    """The directories whose files (recursively) a path / directory / glob source reads."""
    sources = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
    roots = []
    for item in map(os.fspath, sources):
        if os.path.isdir(item):
            roots.append(item)
        elif glob.has_magic(item) and "**" in item:
            roots.append(item[:item.index("**")] or ".")
    return roots


def check_out_outside_corpus(corpus, out):
    """Refuses an --out inside a directory (or recursive glob) the corpus is read from."""
    if not isinstance(corpus, (str, os.PathLike, list, tuple)):
        return
    if isinstance(corpus, str) and (corpus == "builtin" or corpus.startswith("tfds:")):
        return
    for root in _corpus_roots(corpus):
        if _inside(out, root):
            raise ConfigError(
                f"--out {out} is inside the corpus directory {root}: the run's own files "
                "(its vocabulary, logs) would be read as corpus. Choose an --out outside it.")


@dataclasses.dataclass(frozen=True)
class TrainingText:
    """A pretraining run's text, resolved once.

    Attributes:
        source: the `--corpus` source, or the `--data` directory, as given
            (what the run's settings record).
        prepared: whether `source` is a `keras-ctx prepare` directory.
        fingerprint: {"corpus": ...}, its fingerprint (`keras_ctx.data.fingerprints`).
        recorded: the data the run directory recorded when the fingerprint was
            checked against it (`keras_ctx.runs.check_data`; None: not checked,
            a fresh run).
    """

    source: object
    prepared: bool
    fingerprint: dict
    recorded: object = None

    @property
    def corpus(self):
        """The `--corpus` source (None for prepared data)."""
        return None if self.prepared else self.source


def resolve_text(request, existing):
    """The run's `TrainingText`; raises before any work on bad data.

    Args:
        request: the `PretrainRequest` (its `--out` already checked outside the corpus).
        existing: `keras_ctx.runs.look(request.out)`: a resumed run's data must be
            this one, unless `corpus_changed="continue"`.
    """
    source = request.data if request.data is not None else request.corpus
    fingerprint = {"corpus": fingerprints.corpus(source)}
    # XLM's TLM pairs, CoVe's GloVe vectors and ERNIE's lexicons are the run's text too:
    # their files join the corpus' (a rerun with another content is another corpus).
    inputs = ([pair[2] for pair in request.parallel] + [request.glove] * bool(request.glove)
              + list(request.lexicons.values()))
    if inputs:
        more, corpus = fingerprints.corpus(inputs), fingerprint["corpus"]
        fingerprint["corpus"] = {**corpus, "files": corpus.get("files", []) + more["files"]}
    if request.resume:
        _check_lexicons_kept(request, existing)
    recorded = (runs.check_data(request.out, fingerprint, request.corpus_changed, existing)
                if request.resume else None)
    return TrainingText(source, request.data is not None, fingerprint, recorded)


def _check_lexicons_kept(request, existing):
    """Refuses, naming the flag, a rerun whose --phrases / --entities file is not the run's
    (left out, added or another path): before the corpus check, which would only say the
    text changed (the files' content is part of it)."""
    recorded = existing.settings or {}
    for name in ("phrases", "entities"):
        before, now = recorded.get(name), request.lexicons.get(name)
        if existing.settings is not None and before != now:
            was = f"with --{name} {before}" if before else f"without --{name}"
            given = f"gives --{name} {now}" if now else f"leaves --{name} out"
            raise RunDirectoryError(
                f"{request.out} holds a run trained {was} and this rerun {given}: resume "
                "it with its own arguments, choose another --out, or pass --no-resume to "
                "start over there.")


def check_prepared(data, preset, sequence_length, vocabulary_size=None, batch_size=None):
    """The checked manifest of `pretrain --data DATA`; refuses flags the data cannot take.

    The data was tokenized for one model family, sequence length and
    vocabulary (and, for layouts cut for a batch, one batch size): a flag
    that differs would be recorded and ignored, so it is refused.
    """
    manifest = prepare.load_manifest(data)
    settings = manifest["settings"]
    preset = presets.preset(preset)  # a Preset passes through: no lookup
    family = preset.family
    if sequence_length is None:  # not given: the data's
        sequence_length = settings["sequence_length"]
    if settings["family"] != family.name or settings["sequence_length"] != sequence_length:
        raise prepare.PreparedDataError(
            f"{data} was prepared for {settings['model']} ({settings['family']}) at "
            f"sequence length {settings['sequence_length']}, not {preset.name} at "
            f"{sequence_length}; prepare it for this model and length.")
    given = {"vocabulary_size": vocabulary_size}
    if settings.get("batch_size") is not None:  # examples cut for one batch size (XLNet)
        given["batch_size"] = batch_size
    for key, value in given.items():
        if value is not None and value != settings[key]:
            flag = "--" + key.replace("_", "-")
            raise prepare.PreparedDataError(
                f"{flag} {value} cannot apply to {data}: it was prepared with {flag} "
                f"{settings[key]}. Drop {flag} (the data's is used), or prepare the data "
                f"again with {flag} {value}.")
    return manifest

"""Checks of a pretraining run's data and sizes, made before its directory is claimed.

`resolve_text` turns `--corpus` / `--data` into a `TrainingText` once: it
fingerprints the text (`keras_ctx.data.fingerprints`), refuses an `--out`
inside it (the run's own files would become corpus on the next read), and
refuses to resume a run on another corpus than its checkpoints'. `pretrain`
passes that object down; nothing below it looks at the corpus source again
to decide what it is.
"""

import dataclasses
import glob
import os

from keras_ctx import runs
from keras_ctx.data import fingerprints
from keras_ctx.common.errors import ConfigError


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


def resolve_text(corpus, out, data=None, resume=True, corpus_changed="refuse"):
    """The run's `TrainingText`; raises before any work on bad data.

    Args:
        corpus: the `--corpus` source (unused when `data` is given).
        out: the run directory.
        data: a `keras-ctx prepare` directory to train on instead, or None.
        resume: whether an earlier run in `out` is to be resumed (its data
            must then be this one, unless `corpus_changed="continue"`).
        corpus_changed: "refuse" or "continue" (see `keras_ctx.runs.check_data`).
    """
    source = data if data is not None else corpus
    check_out_outside_corpus(source, out)
    fingerprint = {"corpus": fingerprints.corpus(source)}
    recorded = runs.check_data(out, fingerprint, corpus_changed) if resume else None
    return TrainingText(source, data is not None, fingerprint, recorded)


def check_prepared(data, preset, sequence_length, vocabulary_size=None, batch_size=None):
    """The checked manifest of `pretrain --data DATA`; refuses flags the data cannot take.

    The data was tokenized for one model family, sequence length and
    vocabulary (and, for layouts cut for a batch, one batch size): a flag
    that differs would be recorded and ignored, so it is refused.
    """
    from keras_ctx import handles
    from keras_ctx.data import prepare

    manifest = prepare.load_manifest(data)
    settings = manifest["settings"]
    preset = handles.preset(preset)  # a Preset passes through: no lookup
    family = preset.family
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


def check_sequence_length(backbone, sequence_length):
    """Refuses a --sequence-length the built backbone cannot take (before the claim)."""
    limit = getattr(backbone, "max_sequence_length", None)
    if isinstance(limit, int) and sequence_length > limit:
        raise ConfigError(
            f"--sequence-length {sequence_length} is longer than the backbone's "
            f"max_sequence_length {limit}: use --sequence-length <= {limit} or "
            f"--set max_sequence_length={sequence_length}.")

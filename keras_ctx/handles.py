"""One way to name a model: the handles every `from_preset` and CLI command accepts.

A handle is one of

- a preset name (`bert-base`): the architecture only, randomly initialised
  (one log line says so);
- a local directory in any format `keras-ctx convert` reads (a Hugging Face
  checkpoint, a google-research TF checkpoint, allennlp ELMo, a keras-hub
  preset), detected as `convert` detects it (`keras_ctx.convert.formats`);
- a keras-ctx run directory (`pretrain` / `convert` --out);
- `hf://ORG/NAME[@REVISION]`: a Hugging Face Hub repository, downloaded with
  `huggingface_hub.snapshot_download` into its cache (HF_HUB_CACHE; offline
  with HF_HUB_OFFLINE=1 once cached), only the files the converter reads;
- `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]`: a Kaggle model (the
  keras-hub presets live there), downloaded with `kagglehub` into its cache
  (KAGGLEHUB_CACHE).

    >>> resolved = keras_ctx.handles.resolve("hf://sentence-transformers/all-MiniLM-L6-v2")
    >>> resolved.backbone, resolved.tokenizer, resolved.info["family"]

It sits below the models: `Backbone.from_preset`, `keras_ctx.models.from_preset`
and the text tasks' `from_preset` import it. It reads every family's classes and
converters through the registry's entries (`keras_ctx.registry`) and the
converters' machinery (`keras_ctx.convert`, which imports no model), and run
directories through `keras_ctx.run_files`, so it imports no model itself.
"""

import dataclasses
import logging
import os
import re

from keras_ctx import registry, run_files
from keras_ctx.common.errors import one_line
from keras_ctx.common.files import missing_link
from keras_ctx.common.validation import check_overrides
from keras_ctx.convert import formats, heads
from keras_ctx.convert.base import CheckpointError
from keras_ctx.convert.huggingface import (
    CONVERTERS, read_config)
from keras_ctx.convert.kerashub import is_keras_hub_preset

HF_SCHEME = "hf://"
KAGGLE_SCHEME = "kaggle://"
logger = logging.getLogger(__name__)

# What the format of a Hub repository is told by (downloaded first, a few KB).
HF_PROBE_FILES = ["config.json", "metadata.json"]
# What `convert.huggingface` reads: config, safetensors (single or sharded +
# index) and the tokenizer files `tokenizer_from_huggingface` knows.
HF_CHECKPOINT_FILES = [
    "config.json", "model.safetensors", "model.safetensors.index.json",
    "model-*-of-*.safetensors", "tokenizer_config.json", "vocab.txt", "vocab.json",
    "merges.txt", "spiece.model", "sentencepiece.bpe.model", "30k-clean.model",
    "tokenizer.json",
]
# What `keras_hub.models.Backbone.from_preset` / `Tokenizer.from_preset` read.
KERAS_HUB_PRESET_FILES = ["config.json", "metadata.json", "model.weights.h5",
                          "model.weights.json", "model_*.weights.h5", "tokenizer.json",
                          "assets/*", "assets/**/*"]
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


@dataclasses.dataclass
class Resolved:
    """What a handle names, loaded.

    Attributes:
        handle: the handle as given.
        kind: "preset" (random weights), "run" (a keras-ctx run directory) or
            "checkpoint" (a converted local, hf:// or kaggle:// checkpoint).
        backbone: the backbone (with `.tokenizer` and `.family` set).
        tokenizer: its tokenizer, or None (ELMo reads characters).
        info: run.json's keys: `model`, `family`, `sequence_length` (and, for
            checkpoints, `source_format`).
        head: with `head=True`, the checkpoint's masked-LM head when it has one
            (a `MaskedLMHead`); else None.
        directory: the local directory read (None for presets).
    """

    handle: str
    kind: str
    backbone: object
    tokenizer: object
    info: dict
    head: object = None
    directory: str = None

    @property
    def has_weights(self):
        return self.kind != "preset"


def resolve(handle, head=False, need_tokenizer=False, **overrides):
    """Loads what `handle` names.

    Args:
        handle: a preset name, a local directory (checkpoint or run),
            `hf://ORG/NAME[@REVISION]` or `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/N]`.
        head: also load the checkpoint's masked-LM head when it has one (a
            classifier checkpoint's head is a task model: `head=True` refuses it,
            naming `keras_ctx.tasks.classifier_from_huggingface`, which loads it).
        need_tokenizer: raise when a backbone that reads token ids comes
            without its tokenizer (for callers that turn text into ids).
        **overrides: backbone config values to change (unknown keys raise);
            on a checkpoint only those that keep every weight's shape.

    Returns:
        A `Resolved`.
    """
    name = os.fspath(handle)
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"A model handle is a non-empty string, got {handle!r}.")
    if name.startswith(HF_SCHEME):
        directory = huggingface_directory(name[len(HF_SCHEME):])
    elif name.startswith(KAGGLE_SCHEME):
        directory = kaggle_directory(name[len(KAGGLE_SCHEME):])
    elif os.path.exists(name):
        directory = name
    elif missing_link(name):  # a link into a Hugging Face cache whose blob is gone
        raise CheckpointError(missing_link(name))
    elif name in registry.preset_names():
        if need_tokenizer:  # before building: a refusal, not a random model and its warning
            raise CheckpointError(
                f"{name} is a preset name: an architecture with random weights and no "
                f"tokenizer, so text cannot become ids; give a run directory (`keras-ctx "
                f"pretrain {name} --out DIR` trains one) or a checkpoint (hf://ORG/NAME, a "
                "directory).")
        backbone = build_preset(name, overrides)
        logger.warning("%s is a preset name: its weights are random (untrained). Give a "
                       "checkpoint (hf://ORG/NAME, kaggle://..., a directory) for trained "
                       "ones.", name)
        return Resolved(name, "preset", backbone, None,
                        formats.run_info(name, backbone, "preset"))
    else:
        raise CheckpointError(
            f"Unknown model handle {name!r}: not a preset name (`keras-ctx presets` lists "
            "them), not an existing directory, and not hf://ORG/NAME[@REVISION] or "
            "kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION].")
    resolved = _from_directory(name, directory, head)
    tokenizer = resolved.tokenizer
    if need_tokenizer and tokenizer is None and "character_ids" not in resolved.backbone.input:
        if resolved.kind == "run":
            run_files.load_run(directory, need_tokenizer=True)  # raises the run's own message
        raise CheckpointError(
            f"{name} has no tokenizer files (vocab.txt, vocab.json + merges.txt, "
            "spiece.model, tokenizer.json or a keras-hub tokenizer.json), and text cannot "
            "become ids without them: use a checkpoint that has its tokenizer files.")
    if overrides:
        resolved.backbone = _with_overrides(name, resolved.backbone, overrides)
    return resolved


def load(handle, need_tokenizer=False):
    """(info, backbone, tokenizer) of a handle: what `runs.load_run` returns for a run.

    The one function the CLI commands load their model through.
    """
    resolved = resolve(handle, need_tokenizer=need_tokenizer)
    return resolved.info, resolved.backbone, resolved.tokenizer


def canonical(handle):
    """What to record as a model's origin: existing paths made absolute, other handles as given."""
    name = os.fspath(handle)
    return os.path.abspath(name) if os.path.exists(name) else name


def from_preset(handle, **overrides):
    """The backbone `handle` names (see `resolve`), its `.tokenizer` set."""
    return resolve(handle, **overrides).backbone


def build_preset(name, overrides=None, family=None):
    """A randomly initialised backbone of preset `name`: its `family`'s class and config
    (default the registry's family of `name`), `overrides` changed in the config
    (unknown keys raise). Its `.family` is set: families that share a class (ERNIE
    and BERT) are told apart by it, as the converters do for checkpoints."""
    family = family or registry.of_preset(name)
    config, _ = family.presets[name]
    config = dict(config)
    overrides = dict(overrides or {})
    check_overrides(name, family.backbone, config, overrides)
    backbone = family.backbone(**{**config, **overrides})
    backbone.family = family.name
    return backbone


def _from_directory(name, directory, head):
    if run_files.is_finetuned(directory):
        run_files.read_info(directory)  # raises: names the run it came from, and `export`
    if run_files.is_run(directory):
        info, backbone, tokenizer = run_files.load_run(directory)
        backbone.tokenizer, backbone.family = tokenizer, info["family"]
        return Resolved(name, "run", backbone, tokenizer, info, None, directory)
    format = formats.detect_format(directory)
    model_head = None
    if head and format == "huggingface":
        backbone, model_head = _huggingface_head(directory)
    else:
        backbone, format = formats.load(directory, format)
    info = formats.run_info(name, backbone, format)
    return Resolved(name, "checkpoint", backbone, getattr(backbone, "tokenizer", None), info,
                    model_head, directory)


def _huggingface_head(directory):
    """(backbone, masked-LM head or None) of a Hugging Face checkpoint: `convert.heads` decides."""
    config = read_config(directory)
    classifier = next((a for a in config.get("architectures") or []
                       if a.endswith(("ForSequenceClassification", "ForTokenClassification"))),
                      None)
    if classifier is not None:  # the tasks sit above the handles: they read it
        raise CheckpointError(
            f"{directory} holds a {classifier}, whose head is a task model: load it with "
            "keras_ctx.tasks.classifier_from_huggingface(directory), or resolve the "
            "backbone alone (head=False).")
    return heads.with_masked_lm_head(directory)


def _with_overrides(name, backbone, overrides):
    """The backbone rebuilt with `overrides` in its config and its weights kept."""
    config = backbone.get_config()
    check_overrides(name, type(backbone), config, overrides)
    rebuilt = type(backbone).from_config({**config, **overrides})
    try:
        rebuilt.set_weights(backbone.get_weights())
    except ValueError as error:
        raise CheckpointError(f"{name}: the overrides {sorted(overrides)} change the shape "
                              f"of the checkpoint's weights ({error}); override only "
                              "settings such as dropout.") from None
    rebuilt.tokenizer, rebuilt.family = backbone.tokenizer, backbone.family
    return rebuilt


# ---------------------------------------------------------------- hf://


def _truthy(value):
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def _hf_snapshot(repo, revision, patterns):
    """snapshot_download of `patterns`, huggingface_hub's errors as one-line CheckpointErrors.

    The cache and offline settings are read when called (not when
    huggingface_hub was imported), so setting them in a running process works.
    """
    from huggingface_hub import errors, snapshot_download

    handle = HF_SCHEME + repo + (f"@{revision}" if revision else "")
    try:
        return snapshot_download(
            repo, revision=revision, allow_patterns=patterns,
            cache_dir=os.environ.get("HF_HUB_CACHE") or None,
            local_files_only=_truthy(os.environ.get("HF_HUB_OFFLINE")))
    except errors.GatedRepoError:
        raise CheckpointError(
            f"{handle} is gated: accept its terms on https://huggingface.co/{repo} and log "
            "in (`hf auth login`, or set HF_TOKEN).") from None
    except errors.RevisionNotFoundError:
        raise CheckpointError(f"{handle}: the repository has no revision {revision!r}; give "
                              "a branch, tag or commit it has.") from None
    except errors.RepositoryNotFoundError:
        raise CheckpointError(
            f"{handle}: no such model repository on the Hugging Face Hub (or it is private: "
            "log in with `hf auth login`, or set HF_TOKEN).") from None
    except (errors.LocalEntryNotFoundError, errors.IncompleteSnapshotError):
        raise CheckpointError(
            f"{handle} is not (completely) in the Hugging Face cache "
            f"({os.environ.get('HF_HUB_CACHE') or 'HF_HUB_CACHE'}) and the Hub cannot be "
            "reached (no network, or HF_HUB_OFFLINE=1): download it once with network "
            "access.") from None
    except errors.HfHubHTTPError as error:
        raise CheckpointError(f"{handle}: the Hugging Face Hub answered with an error "
                              f"({one_line(error)}).") from None


def huggingface_directory(spec):
    """The local (cached) directory of `ORG/NAME[@REVISION]`, with only the files needed.

    The config comes first: an unsupported model_type is refused before any
    weights are downloaded.
    """
    repo, _, revision = spec.partition("@")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo) or "@" in revision:
        raise CheckpointError(f"hf://{spec} is not hf://ORG/NAME[@REVISION] "
                              "(e.g. hf://google-bert/bert-base-uncased).")
    revision = revision or None
    handle = HF_SCHEME + spec
    directory = _hf_snapshot(repo, revision, HF_PROBE_FILES)
    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise CheckpointError(
            missing_link(os.path.join(directory, "config.json")) or f"{handle} has no "
            "config.json: not a Hugging Face transformers checkpoint or keras-hub preset.")
    if is_keras_hub_preset(directory):  # keras-hub presets are on the Hub too
        return _hf_snapshot(repo, revision, KERAS_HUB_PRESET_FILES)
    model_type = read_config(directory).get("model_type")
    if model_type not in CONVERTERS:
        raise CheckpointError(f"{handle}: model_type {model_type!r} is not supported; "
                              f"supported: {', '.join(sorted(CONVERTERS))}.")
    directory = _hf_snapshot(repo, revision, HF_CHECKPOINT_FILES)
    if not any(os.path.isfile(os.path.join(directory, n))
               for n in ("model.safetensors", "model.safetensors.index.json")):
        for name in ("model.safetensors", "model.safetensors.index.json"):
            if missing_link(os.path.join(directory, name)):  # the cache's blob is gone
                raise CheckpointError(missing_link(os.path.join(directory, name)))
        files = _hf_repo_files(repo, revision, directory)
        pickles = sorted(f for f in files if f.endswith(PICKLE_SUFFIXES))
        if pickles:
            raise CheckpointError(
                f"{handle} has only PyTorch pickle weights ({', '.join(pickles[:2])}), which "
                "keras-ctx does not load (unpickling can run code): use a revision with "
                "model.safetensors (the Hub's safetensors convert bot can add one).")
        raise CheckpointError(f"{handle} has no model.safetensors (or sharded index).")
    return directory


def _hf_repo_files(repo, revision, directory):
    """The repository's file names: the Hub's listing when reachable, else the local copy."""
    names = set()
    for root, _, files in os.walk(directory):
        names.update(os.path.relpath(os.path.join(root, f), directory) for f in files)
    if not _truthy(os.environ.get("HF_HUB_OFFLINE")):
        try:
            from huggingface_hub import HfApi

            names.update(HfApi().list_repo_files(repo, revision=revision))
        except Exception:  # noqa: BLE001  (only a better message is lost)
            pass
    return names


# ---------------------------------------------------------------- kaggle://


def kaggle_directory(spec):
    """The local (cached) directory of a Kaggle model `OWNER/MODEL/FRAMEWORK/VARIATION[/N]`."""
    import kagglehub
    import requests

    handle = KAGGLE_SCHEME + spec
    if len(spec.split("/")) not in (4, 5) or not all(spec.split("/")):
        raise CheckpointError(f"{handle} is not kaggle://OWNER/MODEL/FRAMEWORK/VARIATION"
                              "[/VERSION] (e.g. kaggle://keras/bert/keras/bert_tiny_en_uncased/2).")
    try:
        return kagglehub.model_download(spec)
    except requests.exceptions.HTTPError as error:
        status = getattr(error.response, "status_code", None)
        if status in (401, 403):
            raise CheckpointError(
                f"{handle} needs consent or credentials: accept its license on kaggle.com "
                "and set KAGGLE_USERNAME/KAGGLE_KEY (or ~/.kaggle/kaggle.json).") from None
        if status == 404:
            raise CheckpointError(f"{handle}: no such model (or version) on Kaggle.") from None
        raise CheckpointError(f"{handle}: Kaggle answered HTTP {status}.") from None
    except requests.exceptions.RequestException:
        raise CheckpointError(
            f"{handle} is not in the kagglehub cache "
            f"({os.environ.get('KAGGLEHUB_CACHE') or '~/.cache/kagglehub'}) and Kaggle "
            "cannot be reached: download it once with network access (an unversioned "
            "handle always asks Kaggle for the latest version: add /VERSION to work "
            "offline).") from None
    except ValueError as error:
        raise CheckpointError(f"{handle}: {error}") from None


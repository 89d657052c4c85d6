"""A run directory: what `keras-ctx pretrain` leaves behind and the other commands read.

    OUT/run.json                the preset, family, sequence length and overrides
    OUT/backbone.keras          the trained backbone (what fine-tuning and export use)
    OUT/tokenizer/              the tokenizer: its files in Hugging Face's names (what
                                transformers' AutoTokenizer reads), its keras-hub config
                                (keras_tokenizer.json) and assets (keras_assets/)
    OUT/pretrain_settings.json  the arguments of the run (to resume it)
    OUT/checkpoints/            resumable training state (keras_ctx.training)
    OUT/logs/                   TensorBoard logs
    OUT/.keras_ctx.lock         held by the process writing the directory

`keras-ctx finetune --out` writes another kind of directory, a fine-tuned one:

    OUT/classifier.keras        the fine-tuned classifier (what `export` exports)
    OUT/finetune.json           the run it came from, its family, length and classes

Each file is written beside and renamed into place (keras_ctx.common.files), run.json
last: a directory with run.json is a finished run.

The files are read and written by `keras_ctx.run_files` (below the models, for the
model handles), whose names this module re-exports; here is what a resumable
pretraining run adds: the claim of a directory (its settings, corpus and tokenizer
checked against the checkpoints', `look` / `claim`), which reads the checkpoints.
"""

import dataclasses
import json
import os

from keras_ctx.common import files, validation
from keras_ctx.data import fingerprints
from keras_ctx.common.errors import RunDirectoryError, one_line
from keras_ctx.run_files import (  # noqa: F401  (the run directory's files, read as runs.X)
    BACKBONE_FILE, CLASSIFIER_FILE, FINETUNE_FILE, FINETUNE_SCHEMA, HEAD_FILE, KERAS_CONFIG,
    RUN_FILE, RUN_SCHEMA, SAVING_FILE, SETTINGS_FILE, SIZE_KEYS, TOKENIZER_DIR,
    check_backbone, check_free, check_tokenizer, is_finetuned, is_run, load_backbone,
    load_finetuned, load_head_weights, load_run, load_tokenizer, read_info, read_record, save_finetuned_info, save_run,
    save_tokenizer, saved_tokenizer_files, sizes, writing)
from keras_ctx.training import Checkpointer

CLAIMED_SAMPLE_FILE = "sample.json"
# What `save_claimed_tokenizer` keeps: the run.json field of the tokenizer's sample.
SAMPLE_SCHEMA = {"tokenizer_sample": RUN_SCHEMA["tokenizer_sample"]}


def save_claimed_tokenizer(out_dir, tokenizer, info):
    """Keeps a new run's tokenizer (and its run.json info) in OUT/tokenizer/ before training.

    A resumed run reads it back (`claimed_tokenizer`) instead of training
    again: fast trainers break ties between equally frequent pieces
    differently in each process, and the checkpoints hold the embedding
    rows of this tokenizer's ids. Nothing is kept for a run without one.
    """
    if tokenizer is None:
        return
    with files.replacing_directory(os.path.join(out_dir, TOKENIZER_DIR),
                                   overwrite=True) as staging:
        save_tokenizer(tokenizer, staging)
        with open(os.path.join(staging, CLAIMED_SAMPLE_FILE), "w", encoding="utf-8") as handle:
            json.dump(info, handle)


def claimed_tokenizer(out_dir, existing=None):
    """(tokenizer, its run.json info) kept by `save_claimed_tokenizer` in a claimed run, or None.

    `existing`: the directory's `Existing` record, when the caller has read it.
    """
    if (existing or look(out_dir)).settings is None:
        return None
    directory = os.path.join(out_dir, TOKENIZER_DIR)
    tokenizer = load_tokenizer(directory)
    if tokenizer is None:
        return None
    return tokenizer, read_record(
        os.path.join(directory, CLAIMED_SAMPLE_FILE), SAMPLE_SCHEMA,
        "the claimed tokenizer's sample",
        f"restore {directory}, or pretrain again in a new --out")


CORPUS_CHANGED = ("refuse", "continue")  # --corpus-changed (checked by the request)
# Settings a resumed run may change (said, and recorded under CHANGES_KEY with the step);
# any other change is another run and refused.
ADJUSTABLE = ("learning_rate", "steps", "checkpoint_every", "strategy", "mixed_precision",
              "xla")
CHANGES_KEY = "changes"
# Settings that follow an adjustable one: compared only while it is unchanged (BERT's
# stage boundary is 90% of --steps, Devlin et al. 2019, A.2: more steps move it).
FOLLOWS = {"stages": "steps"}
# The data's fingerprints (keras_ctx.data.fingerprints) in the settings file; "data"
# is the --data flag's prepared directory. Files written before the two were told
# apart hold the fingerprints under "data".
FINGERPRINT_KEY = "fingerprints"
# Every field `claim` wrote to the settings file (the request's settings, the fingerprints
# and the changes; "data": the --data directory, or the fingerprints in the earlier layout).
# A field of none of them (a typo, a hand edit) is refused instead of ignored: the claim
# compares only the fields this version writes. The fingerprints are compared whole
# (keras_ctx.data.fingerprints: any difference is a changed corpus or tokenizer); each
# change is {"step": the checkpoint's step, setting: [before, after]}.
_CHANGE = validation.Record({"step": (int, 0, True),
                             **{name: (list, None, False) for name in ADJUSTABLE},
                             **{name: (list, None, False) for name in FOLLOWS}})
SETTINGS_SCHEMA = {
    "model": (str, None, False), "overrides": (dict, None, False),
    "corpus": RUN_SCHEMA["corpus"], "data": ((str, dict), None, False),
    "sequence_length": (int, 1, False), "batch_size": ((int, type(None)), 1, False),
    # A run in stages: [[first step, sequence length], ...] (pretrain_checks.stage_lengths).
    "stages": (list, None, False),
    "vocabulary_size": ((int, type(None)), 1, False), "seed": ((int, type(None)), 0, False),
    "learning_rate": ((int, float, type(None)), 0, False),
    "steps": (int, 1, False), "checkpoint_every": ((int, type(None)), 1, False),
    "strategy": ((str, type(None)), None, False),
    "mixed_precision": ((bool, str, type(None)), None, False),
    "xla": ((bool, str, type(None)), None, False),
    # XLM's --languages and --parallel (source, target, file) pairs (data/xlm_recipe.py).
    "languages": (list, None, False), "parallel": (list, None, False),
    "glove": (str, None, False),  # CoVe's --glove file (data/cove_recipe.py)
    # ERNIE's --phrases / --entities lexicon files (models/ernie/family.py)
    "phrases": (str, None, False), "entities": (str, None, False),
    "from": (str, None, False),  # the checkpoint a continued pretraining started from
    FINGERPRINT_KEY: (dict, None, False),
    CHANGES_KEY: (validation.ListOf(_CHANGE), None, False)}


def _recorded_fingerprints(settings, given=None):
    """Pops and returns the fingerprints `settings` (a settings file's record) holds.

    In the earlier layout they replaced the --data path: it reads as `given`'s
    (the fingerprints, compared next, still tell whether the data is the same).
    """
    if FINGERPRINT_KEY in settings:
        return settings.pop(FINGERPRINT_KEY)
    if not isinstance(settings.get("data"), dict):
        return None
    recorded = settings.pop("data")
    if given is not None and "data" in given:
        settings["data"] = given["data"]
    return recorded


def read_settings(out_dir):
    """The settings an earlier pretrain recorded in `out_dir`, or None when there are none.

    A settings file that is not JSON (damaged outside keras-ctx: the library
    writes it atomically) raises, naming the file and saying the checkpoints
    are safe; it is never read as "another run" (whose advice, --no-resume,
    would delete them).
    """
    path = os.path.join(os.fspath(out_dir), SETTINGS_FILE)
    if not os.path.isfile(path):
        return None
    fix = (f"the checkpoints in {out_dir} are kept: delete only {SETTINGS_FILE} and run the "
           "same command again to resume from them with its arguments")
    try:
        previous = files.read_json(path, "a run's settings", fix)
        validation.check_fields(path, previous, SETTINGS_SCHEMA, fix, closed=True)
    except ValueError as error:
        raise RunDirectoryError(f"{path} is damaged: {one_line(error)}") from None
    return previous


@dataclasses.dataclass(frozen=True)
class Existing:
    """What a run directory held when a command took it: its settings file's record
    (`read_settings`; None without one) and its latest checkpoint's step (0: none).

    `pretrain` reads it once, under the run lock, and passes it to every check
    and to `claim`: nothing below reads the settings or lists the checkpoints again.
    """

    settings: object
    step: int

    def fingerprints(self, given=None):
        """(the recorded data fingerprints, the settings without them); see
        `_recorded_fingerprints`."""
        settings = dict(self.settings or {})
        return _recorded_fingerprints(settings, given), settings


def look(out_dir):
    """The `Existing` record of `out_dir` (one read of its settings, one listing of its
    checkpoints)."""
    out_dir = os.fspath(out_dir)
    return Existing(read_settings(out_dir),
                    Checkpointer(os.path.join(out_dir, "checkpoints")).latest_step())


def check_data(out_dir, data, corpus_changed="refuse", existing=None):
    """Refuses to resume `out_dir` on another corpus than its checkpoints were trained on.

    Args:
        out_dir: a run directory (a missing one, or one without recorded data,
            passes).
        data: {"corpus": fingerprint} from `keras_ctx.data.fingerprints`.
        corpus_changed: "refuse", or "continue" to resume on a changed corpus on
            purpose (allowed only while the tokenizer trained on it is the one the
            checkpoints were trained with, which `claim` checks).
        existing: `look(out_dir)`, when the caller has read it.

    Returns:
        The data recorded in `out_dir` that `data` was checked against.
    """
    existing = existing or look(out_dir)
    recorded, _ = existing.fingerprints()
    _check_corpus(out_dir, existing.step, recorded, data, corpus_changed)
    return recorded


def _check_corpus(out_dir, step, previous, data, corpus_changed):
    """`check_data` against the data recorded in settings already read (`previous`)."""
    previous = previous or {}
    if (step and corpus_changed == "refuse" and "corpus" in previous and "corpus" in data
            and previous["corpus"] != data["corpus"]):
        raise RunDirectoryError(
            f"{out_dir} was trained on another corpus than the one given now "
            f"({fingerprints.describe_change(previous['corpus'], data['corpus'])}): resuming "
            "would continue its checkpoints on other text. Give the corpus it was trained "
            "on, choose another --out, or pass --corpus-changed continue to resume on the "
            "new corpus on purpose.")


def _check_tokenizer(out_dir, step, previous, data, earlier=None):
    """Refuses a tokenizer other than the one the checkpoints of `out_dir` were trained with.

    `earlier`: returns the tokenizer's fingerprint as runs claimed before OUT/tokenizer/'s
    hash was recorded (`fingerprints.tokenizer`); asked only when the hashes differ, so
    such a run still resumes.
    """
    previous = previous or {}
    if step and previous.get("tokenizer") and data.get("tokenizer") and (
            previous["tokenizer"] != data["tokenizer"]) and (
            earlier is None or earlier() != previous["tokenizer"]):
        # Never allowed: the embeddings would continue under other ids.
        raise RunDirectoryError(
            f"{out_dir} was trained with another tokenizer than the one trained on the "
            "corpus now (its vocabulary files differ): its embeddings would continue under "
            "other ids. Give the corpus it was trained on, or start a new run (another --out, "
            "or --no-resume to start over there).")


def claim(out_dir, settings, fresh=False, data=None, corpus_changed="refuse", existing=None,
          corpus_checked=False, save_tokenizer=None, earlier_tokenizer=None):
    """Makes `out_dir` this run's directory; call only after every argument is valid.

    `out_dir` must be new or empty, or hold a run of the same `settings` (to
    resume it) trained on the same `data` (`check_data`). `existing`: `look(out_dir)`
    read under the run lock the caller holds since (None: read here);
    `corpus_checked`: `check_data` already compared the corpus with that record,
    so only the tokenizer is compared here. `save_tokenizer`: called once the
    directory passed every other check, it saves the run's tokenizer there and
    returns its fingerprint (`tokenizer_fingerprint`), recorded as
    `data["tokenizer"]` and compared with the checkpoints' (`earlier_tokenizer`: see
    `_check_tokenizer`). With `fresh` an
    earlier run of ours there starts over: its checkpoints are deleted (only
    the ones the library wrote). A directory that holds something else is
    never touched. A run whose settings file was deleted (see
    `read_settings`) but whose checkpoints are there is resumed.
    """
    out_dir = os.fspath(out_dir)
    existing = existing or look(out_dir)
    settings = json.loads(json.dumps(settings))  # tuples become lists, as read back
    path = os.path.join(out_dir, SETTINGS_FILE)
    changes = []
    step = existing.step
    if not fresh and step:
        # A checkpoint that cannot be resumed is refused before anything here changes.
        Checkpointer(os.path.join(out_dir, "checkpoints")).check(step)
    if existing.settings is not None:
        previous_data, previous = existing.fingerprints(settings)
        changes = previous.pop(CHANGES_KEY, [])
        changes = changes if isinstance(changes, list) else []
        adjusted = {k: [previous[k], settings[k]] for k in ADJUSTABLE
                    if k in previous and k in settings and previous[k] != settings[k]}
        # A setting given only once (--from, --languages, --glove, --entities) differs too: a rerun that
        # leaves out the first run's --from would resume it as another run.
        fixed = [k for k in {**previous, **settings}
                 if k not in ADJUSTABLE and previous.get(k) != settings.get(k)
                 and not (k in FOLLOWS and FOLLOWS[k] in adjusted)]
        if fixed and not fresh:
            changed = sorted(fixed)
            raise RunDirectoryError(
                f"{out_dir} holds another run ({previous.get('model')}; different "
                f"{', '.join(changed)}): resume it with its own arguments, choose another "
                "--out, or pass --no-resume to start over there.")
        if data is not None and not fresh and not corpus_checked:
            _check_corpus(out_dir, step, previous_data, data, corpus_changed)
        data = _with_tokenizer(data, save_tokenizer)
        if data is not None and not fresh:
            _check_tokenizer(out_dir, step, previous_data, data, earlier_tokenizer)
        elif data is None:
            data = previous_data
        if adjusted and not fresh and step:
            # Said and recorded: the checkpoints' steps so far were made with the old values.
            followed = {k: [previous[k], settings[k]] for k in FOLLOWS
                        if k in previous and k in settings and previous[k] != settings[k]}
            print(f"Resuming {out_dir} from step {step} with changed settings: "
                  + ", ".join(f"--{k.replace('_', '-')} {new} (was {old})"
                              for k, (old, new) in sorted(adjusted.items()))
                  + "".join(f"; so {k} {new} (was {old})"
                            for k, (old, new) in sorted(followed.items()))
                  + f"; recorded in {SETTINGS_FILE}.")
            changes = changes + [{"step": step, **adjusted, **followed}]
        elif fresh:
            changes = []
    else:
        if os.path.isdir(out_dir) and set(os.listdir(out_dir)) - {files.LOCK_FILE} and not step:
            raise RunDirectoryError(f"{out_dir} is not empty and holds no keras-ctx run: "
                                    "choose another --out.")
        data = _with_tokenizer(data, save_tokenizer)
    if fresh:
        Checkpointer(os.path.join(out_dir, "checkpoints")).clear()
    files.write_json(path, {**settings, **({FINGERPRINT_KEY: data} if data is not None else {}),
                            **({CHANGES_KEY: changes} if changes else {})})


def _with_tokenizer(data, save_tokenizer):
    """`data` with the fingerprint `save_tokenizer` returns (None: `data` as given)."""
    if save_tokenizer is None:
        return data
    return {**(data or {}), "tokenizer": save_tokenizer()}


def tokenizer_fingerprint(out_dir, tokenizer, extra):
    """The fingerprint of a run's tokenizer: the hash of OUT/tokenizer/ where it was saved
    (what run.json's tokenizer_sha256 records), else of `extra` (the run-file info a family
    keeps instead, ELMo's word vocabulary); None for neither."""
    if tokenizer is not None:
        return fingerprints.directory(os.path.join(out_dir, TOKENIZER_DIR))
    return fingerprints.tokenizer(None, extra)


def check_new_directory(out):
    """Refuses an `out` that holds anything (commands that make a new directory)."""
    if os.path.isdir(out) and os.listdir(out):
        raise ValueError(f"{out} is not empty: choose a new --out directory.")

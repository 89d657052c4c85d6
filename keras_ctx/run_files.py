"""A run directory's files: written, read and checked (what `keras_ctx.handles` loads).

    OUT/run.json                the preset, family, sequence length and overrides
    OUT/backbone.keras          the trained backbone (what fine-tuning and export use)
    OUT/tokenizer/              the tokenizer: its files in Hugging Face's names (what
                                transformers' AutoTokenizer reads), its keras-hub config
                                (keras_tokenizer.json) and assets (keras_assets/)

and a fine-tuned directory's classifier.keras + finetune.json. Below the models:
it imports none (a `.keras` file names its classes, which are registered where
they are defined, and the package's face imports every package before any of its
modules runs), so the model resolver can read runs for `Backbone.from_preset`.
`keras_ctx.runs` adds the claim of a directory by a resumable pretraining run.

Each file is written beside and renamed into place (keras_ctx.common.files), run.json
last: a directory with run.json is a finished run.
"""

import os

from keras_ctx import registry
from keras_ctx.common import files, keras_files, validation
from keras_ctx.data import fingerprints, prepared_files
from keras_ctx.data.tokenizers import (  # noqa: F401
    KERAS_CONFIG, TOKENIZER_DIR, load_tokenizer, save_tokenizer, saved_tokenizer_files)
from keras_ctx.common.errors import RunDirectoryError, one_line

RUN_FILE = "run.json"
SETTINGS_FILE = "pretrain_settings.json"
BACKBONE_FILE = "backbone.keras"
# The pretraining objective's heads, each one's own weights (not the tied token table) in
# order under its role ("pair.0", "pair.1", ...): what `keras-ctx generate` decodes XLM's CLM
# with, and `pretrain --from RUN` continues. A file of one head (arr_0, arr_1, ...: runs saved
# before the roles) holds the output head.
HEAD_FILE = "objective_head.npz"
# The roles of an objective's heads (`keras_ctx.pretraining.kept_head.HEADS`): the token
# output (a masked-LM head, XLM's PredLayer), the sentence pair (NSP / SOP), ELECTRA's
# replaced-token detection and its generator (the weights it does not share), SpanBERT's
# span boundary.
OUTPUT_HEAD = "output"
HEAD_ROLES = (OUTPUT_HEAD, "pair", "replaced_token", "generator", "span_boundary")
# Every field a writer of run.json wrote (pretrain's `_save`, convert's `run_info`,
# save_run's sizes and hash, a family's run files), with the types and ranges the
# commands need: any other field (a typo, a hand edit) is refused, naming the closest.
CLASSIFIER_FILE = "classifier.keras"
# Recorded in run.json and checked against backbone.keras when a run is loaded.
SIZE_KEYS = ("vocabulary_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
             "embedding_size", "max_sequence_length")
# pretrain --data's record of the prepared data it trained on (commands/pretrain.py
# build_prepared): the manifest's settings and tokenizer record as any version wrote them.
DATA_RECORD = validation.Record({
    "examples": (int, 0, False), "layout": (str, None, False),
    "tokenizer": (validation.Record(prepared_files.TOKENIZER_RECORD_SCHEMA), None, False),
    "settings": (validation.Record({field: (kinds, least, False) for field, (kinds, least, _)
                                    in prepared_files.SETTINGS_SCHEMA.items()}), None, False),
    "sha256": (validation.ListOf(str), None, False)})
# Every field a writer of run.json wrote (pretrain's `_save`, convert's `run_info`,
# save_run's sizes and hash, a family's run files), with the types and ranges the
# commands need: any other field (a typo, a hand edit) is refused, naming the closest,
# in the nested records too (`sizes.hiden_size`).
RUN_SCHEMA = {"family": (str, None, True), "sequence_length": (int, 1, True),
              # A run in stages (BERT's 128 then 512): [[first step, length], ...];
              # sequence_length is the last one's.
              "stages": (validation.ListOf(list), None, False),
              "model": ((str, type(None)), None, False),
              "overrides": (dict, None, False),  # a backbone config's keys: free
              "sizes": (validation.Record({k: (int, 1, False) for k in SIZE_KEYS}), None,
                        False),
              "steps": ((int, type(None)), 0, False),
              "seed": ((int, type(None)), None, False),
              "tokenizer_sha256": (str, None, False),
              "corpus": ((str, validation.ListOf(str), type(None)), None, False),
              "source_format": (str, None, False), "backbone": (str, None, False),
              "tokenizer_sample": (validation.Record(prepared_files.TOKENIZER_SAMPLE_SCHEMA),
                                   None, False),
              "vocabulary": (validation.ListOf(str), None, False),  # ELMo's words
              "data": (DATA_RECORD, None, False)}
FINETUNE_FILE = "finetune.json"
# What `export` and the commands' refusals read from finetune.json (classes: the labels'
# names, commands/finetune.py).
FINETUNE_SCHEMA = {"run": (str, None, True), "family": (str, None, True),
                   "sequence_length": (int, 1, True),
                   "classes": (validation.ListOf(str), None, True)}
# Present while save_run writes: what a killed save left may be replaced without --overwrite.
SAVING_FILE = ".keras_ctx.saving"


writing = files.writing  # the run lock, and no empty directory left behind


def is_run(directory):
    """Whether `directory` holds a keras-ctx run (finished, in progress, or stopped while
    being written: a pretrain or convert killed before run.json, which is written last)."""
    return any(os.path.isfile(os.path.join(directory, name))
               for name in (RUN_FILE, SETTINGS_FILE, SAVING_FILE, files.LOCK_FILE))


def check_free(out_dir, overwrite=False):
    """Raises unless `out_dir` holds no finished run, or `overwrite` allows replacing it.

    Call it before loading or training what is to be saved there.
    """
    out_dir = os.fspath(out_dir)
    taken = [n for n in (RUN_FILE, BACKBONE_FILE, TOKENIZER_DIR, CLASSIFIER_FILE, SETTINGS_FILE)
             if os.path.lexists(os.path.join(out_dir, n))]
    if taken and not (set(taken) & {RUN_FILE, SETTINGS_FILE, CLASSIFIER_FILE}) and (
            os.path.isfile(os.path.join(out_dir, SAVING_FILE))):
        # A save of ours killed before run.json (written last): the marker says
        # keras-ctx wrote these files, and no finished or in-progress run is lost.
        taken = []
    if taken and not overwrite:
        raise RunDirectoryError(
            f"{out_dir} already holds a run ({', '.join(taken)}); pass --overwrite "
            "(overwrite=True) to replace it, or choose another directory.")


def sizes(backbone):
    """The backbone's size settings recorded in run.json (what `load_run` checks)."""
    config = backbone.get_config()
    return {k: config[k] for k in SIZE_KEYS if isinstance(config.get(k), int)}


def save_run(out_dir, info, backbone, tokenizer=None, overwrite=False, tokenizer_sha256=None,
             head_weights=None):
    """Writes backbone.keras, tokenizer/, the objective's heads (`head_weights`: {role:
    that head's own arrays, in order}; a replaced run's are removed without) and run.json,
    each atomically.

    Refuses to replace a run already in `out_dir` unless `overwrite`; with it,
    a tokenizer/ left by the replaced run is removed when the new run has none
    (a stale tokenizer would not match the new backbone). `tokenizer_sha256`:
    the tokenizer is already in tokenizer/ with this hash (`pretrain` saved it
    when it claimed the run), so it is neither written nor hashed again.
    """
    out_dir = os.fspath(out_dir)
    check_free(out_dir, overwrite)
    arrays = _head_arrays(head_weights)  # checked before anything is written
    os.makedirs(out_dir, exist_ok=True)
    # run.json goes first out of the way and comes back last: a half-replaced
    # directory never passes for a finished run.
    run_file = os.path.join(out_dir, RUN_FILE)
    if os.path.lexists(run_file):
        os.remove(run_file)
    marker = os.path.join(out_dir, SAVING_FILE)
    with open(marker, "w", encoding="utf-8"):
        pass
    with files.replacing(os.path.join(out_dir, BACKBONE_FILE), overwrite=True) as staging:
        backbone.save(staging)
    head_file = os.path.join(out_dir, HEAD_FILE)
    if arrays:
        import numpy as np

        with files.replacing(head_file, overwrite=True) as staging, open(staging, "wb") as out:
            np.savez(out, **arrays)
    elif os.path.lexists(head_file):
        os.remove(head_file)  # another run's heads: they would not match this backbone
    tokenizer_dir = os.path.join(out_dir, TOKENIZER_DIR)
    if tokenizer_sha256 is not None:
        pass  # saved when the run was claimed
    elif tokenizer is not None:
        with files.replacing_directory(tokenizer_dir, overwrite=True) as staging:
            save_tokenizer(tokenizer, staging)
    elif saved_tokenizer_files(tokenizer_dir) is not None:
        import shutil

        shutil.rmtree(tokenizer_dir)
    # Recorded so that a tokenizer/ swapped in from another run is refused (`load_run`).
    if tokenizer_sha256 is None and tokenizer is not None:
        tokenizer_sha256 = fingerprints.directory(tokenizer_dir)
    files.write_json(run_file, {**info, "sizes": sizes(backbone),
                                **({"tokenizer_sha256": tokenizer_sha256}
                                   if tokenizer_sha256 else {})})
    os.remove(marker)


def _head_arrays(heads):
    """{"role.i": array} of {role: [arrays]}; a role outside HEAD_ROLES raises."""
    import numpy as np

    unknown = sorted(set(heads or {}) - set(HEAD_ROLES))
    if unknown:
        raise ValueError(f"head_weights has the role {unknown[0]!r}; the roles are "
                         f"{', '.join(HEAD_ROLES)}.")
    return {f"{role}.{i}": np.asarray(array) for role, arrays in (heads or {}).items()
            for i, array in enumerate(arrays)}


def load_heads(run_dir):
    """{role: that head's arrays, in order} of the objective heads a run kept (`save_run`'s
    `head_weights`), {} without any; a file of one head's arrays (written before the
    roles) is the output head."""
    import zipfile

    import numpy as np

    path = os.path.join(run_dir, HEAD_FILE)
    if not os.path.isfile(path):
        return {}
    heads = {}
    try:
        with np.load(path) as saved:
            names = list(saved.files)
            for name in names:
                role, _, index = (OUTPUT_HEAD, "", name[len("arr_"):]) if name.startswith(
                    "arr_") else name.rpartition(".")
                if role not in HEAD_ROLES or not index.isdigit():
                    raise ValueError(f"it holds {name!r}, which is no head's array")
                heads.setdefault(role, {})[int(index)] = saved[name]
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError) as error:
        raise RunDirectoryError(f"{path} is corrupt ({one_line(error)}); restore it or "
                                "pretrain the run again.") from None
    for role, arrays in heads.items():
        if sorted(arrays) != list(range(len(arrays))):
            raise RunDirectoryError(f"{path} is corrupt (its {role} head misses arrays); "
                                    "restore it or pretrain the run again.")
    return {role: [arrays[i] for i in range(len(arrays))] for role, arrays in heads.items()}


def load_head_weights(run_dir):
    """The output head's arrays a run kept (`load_heads`' OUTPUT_HEAD), or None."""
    return load_heads(run_dir).get(OUTPUT_HEAD)


def read_info(run_dir):
    """run.json of a finished run, checked for the keys the commands read."""
    path = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(path) and is_finetuned(run_dir):
        origin = _read_finetuned_info(run_dir).get("run")
        raise RunDirectoryError(
            f"{run_dir} holds a fine-tuned classifier, not a pretrained or converted run: "
            f"give the run it was fine-tuned from{f' ({origin})' if origin else ''}; "
            f"`keras-ctx export {run_dir} OUT` exports the classifier.")
    if not os.path.isfile(path) and is_run(run_dir):
        raise RunDirectoryError(
            f"{run_dir} is an unfinished keras-ctx run: the `keras-ctx pretrain` or "
            f"`convert` writing it stopped (or is still running) before {RUN_FILE}. Run "
            "that command again with the same arguments to finish it.")
    if not os.path.isfile(path):
        raise RunDirectoryError(
            f"{run_dir} is not a finished keras-ctx run (no {RUN_FILE}); give the --out "
            "directory of `keras-ctx pretrain` or `convert`.")
    fix = "restore it, or pretrain or convert the run again"
    try:
        info = files.read_json(path, "a run's run.json", fix)
        validation.check_fields(path, info, RUN_SCHEMA, fix, closed=True)
    except ValueError as error:
        raise RunDirectoryError(str(error)) from None
    return info


def read_record(path, schema, what, fix):
    """The JSON object in `path`, checked against `schema` (closed: an unknown field
    raises); {} only when there is no file.

    A damaged file raises (naming it and `fix`) instead of reading as absent.
    """
    if not os.path.isfile(path):
        return {}
    try:
        return validation.read_fields(path, what, schema, fix)
    except ValueError as error:
        raise RunDirectoryError(str(error)) from None


def _read_finetuned_info(directory):
    return read_record(os.path.join(directory, FINETUNE_FILE), FINETUNE_SCHEMA,
                        "a fine-tuned classifier's finetune.json",
                        f"restore it, or fine-tune again into {directory}")


def is_finetuned(directory):
    """Whether `directory` is a `keras-ctx finetune --out` directory (no run.json)."""
    return (os.path.isfile(os.path.join(directory, CLASSIFIER_FILE))
            and not os.path.isfile(os.path.join(directory, RUN_FILE)))


def save_finetuned_info(out_dir, info):
    files.write_json(os.path.join(out_dir, FINETUNE_FILE), info)


def load_finetuned(directory):
    """(finetune.json's info, the classifier) of a fine-tuned directory.

    Its classes (a task head, `keras_ctx.tasks`, above this module) are registered where
    they are defined: the package's face imports every package before any of its
    modules runs.

    A directory written before finetune.json existed still loads (info {}).
    """
    import zipfile

    path, info_path = (os.path.join(directory, name) for name in (CLASSIFIER_FILE, FINETUNE_FILE))
    info = _read_finetuned_info(directory)
    try:  # finetune.json's sequence length checked against the stored position table
        model = keras_files.load_model(path, claims=[(info_path, info)])
    except keras_files.ClaimedSizeError as error:  # names the file and field itself
        raise RunDirectoryError(str(error)) from None
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError) as error:
        raise RunDirectoryError(f"{path} is corrupt ({one_line(error)}); fine-tune "
                                "again.") from None
    return info, model


def load_backbone(run_dir, info=None):
    """backbone.keras, checked; `info` (run.json's) claims checked against its stored shapes."""
    import zipfile

    path = os.path.join(run_dir, BACKBONE_FILE)
    if not os.path.isfile(path):
        raise RunDirectoryError(f"{run_dir} has no {BACKBONE_FILE}; the run is incomplete.")
    try:
        return keras_files.load_model(
            path, claims=[(os.path.join(run_dir, RUN_FILE), info)] if info else ())
    except keras_files.ClaimedSizeError as error:  # names the file and field itself
        raise RunDirectoryError(str(error)) from None
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError) as error:
        raise RunDirectoryError(f"{path} is corrupt ({one_line(error)}); restore it or "
                                "pretrain/convert the run again.") from None


def check_backbone(run_dir, info, backbone):
    """Raises when backbone.keras is not the family and size run.json says it is."""
    expected = registry.get(info["family"]) if info["family"] in registry.names() else None
    if expected is not None and type(backbone) is not expected.backbone:
        found = registry.of_backbone(backbone)
        raise RunDirectoryError(
            f"{run_dir}/{BACKBONE_FILE} is a {type(backbone).__name__}"
            f"{f' ({found.name})' if found else ''} but {RUN_FILE} says {info['family']} "
            f"({expected.backbone.__name__}): the files come from different runs; pretrain "
            "or convert the run again.")
    recorded = info.get("sizes")
    found = sizes(backbone)
    if isinstance(recorded, dict):
        wrong = sorted(k for k in recorded if k in found and found[k] != recorded[k])
        if wrong:
            raise RunDirectoryError(
                f"{run_dir}/{BACKBONE_FILE} has "
                + ", ".join(f"{k}={found[k]}" for k in wrong) + f" but {RUN_FILE} records "
                + ", ".join(f"{k}={recorded[k]}" for k in wrong)
                + ": the files come from different runs; pretrain or convert the run again.")


def check_tokenizer(run_dir, info):
    """Raises when tokenizer/ is not the one run.json recorded (changed, or from another run)."""
    recorded = info.get("tokenizer_sha256")
    found = fingerprints.directory(os.path.join(run_dir, TOKENIZER_DIR))
    if recorded and found and found != recorded:
        raise RunDirectoryError(
            f"{run_dir}/{TOKENIZER_DIR}/ is not the tokenizer this run was saved with (its "
            "files changed, or come from another run): its ids would read other embedding "
            "rows. Restore the run's own tokenizer/, or pretrain or convert the run again.")


def load_run(run_dir, need_tokenizer=False):
    """(info dict, backbone, tokenizer or None) of a finished run directory.

    `need_tokenizer`: raise (one line) when a backbone that reads token ids
    comes without its tokenizer, for the commands that turn text into ids.
    """
    info = read_info(run_dir)
    backbone = load_backbone(run_dir, info)
    check_backbone(run_dir, info, backbone)
    check_tokenizer(run_dir, info)
    tokenizer = load_tokenizer(os.path.join(run_dir, TOKENIZER_DIR))
    # ELMo reads characters: it needs no tokenizer.
    if need_tokenizer and tokenizer is None and "character_ids" not in backbone.input:
        raise RunDirectoryError(
            f"{run_dir} has no {TOKENIZER_DIR}/ (or it lacks {KERAS_CONFIG}), and text "
            "cannot become ids without the tokenizer the backbone was trained with: "
            "pretrain the run again, or convert a checkpoint that has tokenizer files.")
    return info, backbone, tokenizer

"""The JSON records keras-ctx reads back, read strictly (issue 55: nothing is silent).

Each record (run.json, pretrain_settings.json, the claimed tokenizer's sample.json,
finetune.json, a saved task's task.json, prepared data's manifest.json, settings.json
and tokenizer_record.json, a CVT run's vocabulary.json) holds the fields its writers
wrote: each field they write reads back unchanged, a misspelt field is refused naming
the file, the field and the closest known one, and a value of the wrong type names the
file and the field. Nested values (run.json's tokenizer_sample, sizes and data record,
the settings' changes, finetune.json's classes, a manifest's shards) are records too,
named by their path (`tokenizer_sample.sentences`, `shards[0].file`).
"""

import json

import pytest

from keras_ctx import run_files, runs
from keras_ctx.common import files, validation
from keras_ctx.data import prepared_files
from keras_ctx.tasks import cvt_tagger
from keras_ctx.tasks.text import task as text_task

pytestmark = pytest.mark.backend_neutral("JSON records read back: no model runs")


def _refused(read, *words):
    """The one-line message `read()` raises; each of `words` is in it."""
    with pytest.raises(ValueError) as raised:
        read()
    message = str(raised.value)
    assert "\n" not in message and all(word in message for word in words), message
    return message


# ------------------------------------------------------------------- the closed option

def test_a_closed_schema_names_the_unknown_field_and_the_closest_known_one():
    schema = {"sequence_length": (int, 1, True), "seed": (int, 0, False)}
    record = {"sequence_length": 8, "sequence_lenght": 16}
    assert validation.check_fields("f.json", record, schema, "fix it") is record  # open
    message = _refused(lambda: validation.check_fields("f.json", record, schema, "fix it",
                                                       closed=True),
                       "f.json", "'sequence_lenght'", "did you mean 'sequence_length'?",
                       "fix it")
    assert message.endswith("fix it.")
    # No close name: the known ones are listed.
    _refused(lambda: validation.check_fields("f.json", {"zzz": 1}, schema, "fix it",
                                             closed=True),
             "'zzz' (known: seed, sequence_length)")
    # `object`: a field read without a check, a bool included.
    assert validation.check_fields("f.json", {"x": True}, {"x": (object, None, True)}, "",
                                   closed=True) == {"x": True}


# ------------------------------------------------------------------------- run.json

class _Backbone:
    """What save_run asks of a backbone: its config (sizes) and a save."""

    def get_config(self):
        return {"vocabulary_size": 64, "hidden_size": 8, "num_layers": 1, "num_heads": 2,
                "intermediate_size": 16, "max_sequence_length": 32}

    def save(self, path):
        with open(path, "wb") as handle:
            handle.write(b"stub")


# Every field a writer of run.json writes: pretrain's `_save` (with a family's run files,
# ELMo's vocabulary, and a prepared run's data record), convert's `run_info`; save_run
# adds sizes and the tokenizer's hash.
RUN_INFO = {"model": "bert-tiny", "family": "bert", "sequence_length": 16,
            "overrides": {"num_layers": 1}, "corpus": "corpus.txt", "steps": 3, "seed": 0,
            "tokenizer_sample": {"sentences": 5, "corpus_sentences": 5, "seed": 0},
            "vocabulary": ["<pad>", "<S>", "</S>", "<UNK>", "bank"],
            "data": {"examples": 4, "layout": "bert", "tokenizer": {}, "settings": {},
                     "sha256": ["0" * 64]},
            "source_format": "huggingface", "backbone": "BertBackbone"}


def _run(tmp_path, **edit):
    out = tmp_path / "run"
    run_files.save_run(out, RUN_INFO, _Backbone())
    if edit:
        info = json.loads((out / run_files.RUN_FILE).read_text())
        (out / run_files.RUN_FILE).write_text(json.dumps({**info, **edit}))
    return out


def test_every_field_run_json_writers_write_reads_back(tmp_path):
    info = run_files.read_info(_run(tmp_path))
    assert info == {**RUN_INFO, "sizes": _Backbone().get_config()}
    assert set(info) <= set(run_files.RUN_SCHEMA)


@pytest.mark.parametrize("edit, words", [
    ({"sequence_lenght": 16}, ("'sequence_lenght'", "did you mean 'sequence_length'?")),
    ({"tokenizer_sha": "ab"}, ("'tokenizer_sha'", "did you mean 'tokenizer_sha256'?")),
    ({"sizes": {"hiden_size": 8}}, ("'sizes.hiden_size'", "did you mean 'sizes.hidden_size'?")),
    ({"source_format": 3}, ("source_format=3, not a string",)),
    ({"corpus": {"path": "x"}}, ("corpus={'path': 'x'}, not a string or a list or null",)),
    ({"vocabulary": "bank"}, ("vocabulary='bank', not a list",)),
])
def test_a_misspelt_or_mistyped_run_json_field_is_refused(tmp_path, edit, words):
    out = _run(tmp_path, **edit)
    _refused(lambda: run_files.read_info(out), str(out / run_files.RUN_FILE), *words)


# -------------------------------------------------------------- pretrain_settings.json

SETTINGS = {"model": "bert-tiny", "overrides": {}, "corpus": "corpus.txt",
            "sequence_length": 16, "batch_size": 2, "vocabulary_size": 64, "seed": 0,
            "learning_rate": 1e-3, "steps": 3, "checkpoint_every": 1, "strategy": "default",
            "mixed_precision": False, "xla": "auto"}


def test_every_field_claim_writes_reads_back(tmp_path):
    data = {"corpus": {"files": []}, "tokenizer": "ab"}
    runs.claim(tmp_path / "run", SETTINGS, data=data)
    assert runs.read_settings(tmp_path / "run") == {**SETTINGS, runs.FINGERPRINT_KEY: data}
    # The --data form, the earlier layout (fingerprints under "data") and the changes.
    for record in ({**SETTINGS, "corpus": None, "data": "prepared"},
                   {**SETTINGS, "data": {"corpus": {"files": []}}},
                   {**SETTINGS, runs.CHANGES_KEY: [{"step": 2, "steps": [3, 5]}]}):
        files.write_json(str(tmp_path / "run" / runs.SETTINGS_FILE), record)
        assert runs.read_settings(tmp_path / "run") == record


def test_the_settings_pretrain_records_read_back(tmp_path):
    from keras_ctx.commands.pretrain_checks import PretrainRequest

    out = tmp_path / "run"
    request = PretrainRequest.checked("bert-tiny", str(out), learning_rate=1e-3,
                                      overrides={"num_layers": 1})
    runs.claim(str(out), request.settings())
    assert runs.read_settings(out) == request.settings()


@pytest.mark.parametrize("edit, words", [
    ({"learning_rat": 1e-3}, ("'learning_rat'", "did you mean 'learning_rate'?")),
    ({"steps": "3"}, ("steps='3', not an integer >= 1",)),
    ({"changes": {"step": 2}}, ("changes={'step': 2}, not a list",)),
])
def test_a_misspelt_or_mistyped_settings_field_is_refused(tmp_path, edit, words):
    (tmp_path / "run").mkdir()
    files.write_json(str(tmp_path / "run" / runs.SETTINGS_FILE), {**SETTINGS, **edit})
    _refused(lambda: runs.read_settings(tmp_path / "run"), runs.SETTINGS_FILE,
             "the checkpoints", *words)


# ----------------------------------------------------- sample.json and finetune.json

def test_the_claimed_tokenizers_sample_is_read_strictly(tmp_path):
    path, sample = str(tmp_path / runs.CLAIMED_SAMPLE_FILE), {"tokenizer_sample": {"seed": 0}}
    files.write_json(path, sample)
    assert runs.read_record(path, runs.SAMPLE_SCHEMA, "a sample", "fix") == sample
    files.write_json(path, {"tokenizer_sampel": {"seed": 0}})
    _refused(lambda: runs.read_record(path, runs.SAMPLE_SCHEMA, "a sample", "fix"),
             path, "did you mean 'tokenizer_sample'?")


FINETUNED = {"run": "/runs/bert", "family": "bert", "sequence_length": 16,
             "classes": ["neg", "pos"]}


def test_finetune_json_reads_back_and_refuses_a_misspelt_field(tmp_path):
    read = run_files._read_finetuned_info
    run_files.save_finetuned_info(str(tmp_path), FINETUNED)
    assert read(str(tmp_path)) == FINETUNED
    files.write_json(str(tmp_path / run_files.FINETUNE_FILE), {**FINETUNED, "clases": []})
    _refused(lambda: read(str(tmp_path)), run_files.FINETUNE_FILE,
             "did you mean 'classes'?")
    files.write_json(str(tmp_path / run_files.FINETUNE_FILE), {**FINETUNED, "classes": "pos"})
    _refused(lambda: read(str(tmp_path)), "classes='pos', not a list")


# ------------------------------------------------------------------------ task.json

# What TextTask.save writes (keras_ctx/tasks/text/task.py).
TASK = {"task": "TextClassifier", "family": "bert", "sequence_length": 16,
        "truncation": "round_robin", "settings": {"num_classes": 2}}


@pytest.mark.parametrize("edit, words", [
    ({}, ()),
    ({"truncaton": "waterfall"}, ("'truncaton'", "did you mean 'truncation'?")),
    ({"settings": "x"}, ("settings='x', not an object",)),
])
def test_task_json_reads_back_and_refuses_a_misspelt_field(tmp_path, edit, words):
    files.write_json(str(tmp_path / text_task.TASK_FILE), {**TASK, **edit})
    if not edit:
        assert text_task.read_task_info(str(tmp_path)) == TASK
    else:
        _refused(lambda: text_task.read_task_info(str(tmp_path)), text_task.TASK_FILE,
                 *words)


# ----------------------------------------------------------------- prepared data

def _prepared(tmp_path, **edits):
    """A prepared directory of one shard with every field `prepare` writes; `edits`:
    {"manifest" | "settings" | "tokenizer" | "shard": fields to change}."""
    out = tmp_path / "data"
    out.mkdir()
    shard = out / "shard-00000.tfrecord"
    shard.write_bytes(b"records")
    settings = {"model": "bert-tiny", "family": "bert", "corpus": "corpus.txt",
                "corpus_fingerprint": {"files": []}, "sequence_length": 16,
                "vocabulary_size": 64, "seed": 0, "shard_bytes": 1 << 20, "duplicate": 1,
                "batch_size": None, "tokenizer_sample": 100, **edits.get("settings", {})}
    tokenizer = {"tokenizer_sample": {"sentences": 5, "corpus_sentences": 5, "seed": 0},
                 "vocabulary_size": 64, "run_files": {}, **edits.get("tokenizer", {})}
    record = {"file": shard.name, "examples": 2, "sha256": prepared_files.sha256(shard),
              "source": ["corpus.txt", 0, 10], "made_with": "ab", "token_counts": [1, 2],
              **edits.get("shard", {})}
    manifest = {"version": prepared_files.MANIFEST_VERSION, "settings": settings,
                "layout": "bert", "copies": 1, "features": {"token_ids": 16},
                "tokenizer": tokenizer, "examples": 2, "shards": [record],
                "corpus_bytes": 10, "token_counts": [1, 2], **edits.get("manifest", {})}
    prepared_files.write_json(str(out / prepared_files.MANIFEST), manifest)
    return out, manifest


def test_every_field_prepare_writes_reads_back(tmp_path):
    out, manifest = _prepared(tmp_path)
    assert prepared_files.load_manifest(str(out)) == manifest


@pytest.mark.parametrize("part, edit, words", [
    ("manifest", {"exampels": 2}, ("'exampels'", "did you mean 'examples'?")),
    ("manifest", {"corpus_bytes": "10"}, ("corpus_bytes='10', not an integer >= 0",)),
    ("settings", {"sequence_lenght": 16}, ("did you mean 'settings.sequence_length'?",)),
    ("settings", {"corpus": 3}, ("settings.corpus=3, not a string",)),
    ("tokenizer", {"run_file": {}}, ("did you mean 'tokenizer.run_files'?",)),
    ("tokenizer", {"run_files": []}, ("tokenizer.run_files=[], not an object",)),
    ("shard", {"made_whit": "ab"}, ("did you mean 'shards[0].made_with'?",)),
    ("shard", {"token_counts": "12"}, ("shards[0].token_counts='12', not a list",)),
])
def test_a_misspelt_or_mistyped_prepared_field_is_refused(tmp_path, part, edit, words):
    out, _ = _prepared(tmp_path, **{part: edit})
    _refused(lambda: prepared_files.load_manifest(str(out)), prepared_files.MANIFEST, *words)


def test_the_tokenizer_record_is_read_strictly(tmp_path):
    # ELMo keeps its words in the record's run files (no tokenizer/).
    words = ["<pad>", "<S>", "</S>", "<UNK>", "bank"]
    path = str(tmp_path / prepared_files.TOKENIZER_RECORD)
    prepared_files.write_json(path, {"tokenizer_sample": {"seed": 0}, "sha256": None,
                                     "run_files": {"vocabulary": words}})
    assert prepared_files.load_tokenizer(str(tmp_path)) == words
    prepared_files.write_json(path, {"run_file": {"vocabulary": words}})
    _refused(lambda: prepared_files.load_tokenizer(str(tmp_path)),
             prepared_files.TOKENIZER_RECORD, "did you mean 'run_files'?")
    prepared_files.write_json(path, {"vocabulary_size": "64", "run_files": {}})
    _refused(lambda: prepared_files.load_tokenizer(str(tmp_path)),
             "vocabulary_size='64', not an integer >= 1")


# ------------------------------------------------------------ a CVT run's vocabulary

@pytest.mark.parametrize("edit, words", [
    ({"tag": ["O"]}, ("'tag'", "did you mean 'tags'?")),
    ({"padding_id": "0"}, ("padding_id='0', not an integer >= 0",)),
    ({"words": ["bank", 3]}, ("words[1]=3, not a string",)),
    ({"tags": []}, ("lists no tags",)),
])
def test_a_cvt_vocabulary_with_a_misspelt_or_mistyped_field_is_refused(tmp_path, edit,
                                                                        words):
    # What save_cvt_tagger writes; the weights are never read: the record fails first.
    for name in ("encoder.keras", "tagger.weights.h5"):
        (tmp_path / name).write_bytes(b"")
    record = {"words": ["bank"], "padding_id": 0, "unknown_id": 1, "tags": ["O", "B"],
              "hidden_size": 8, **edit}
    files.write_json(str(tmp_path / "vocabulary.json"), record)
    with pytest.raises(ValueError) as raised:  # ConfigError, CheckpointError
        cvt_tagger.load_cvt_tagger(str(tmp_path))
    assert all(word in str(raised.value) for word in ("vocabulary.json", *words)), raised.value



# ------------------------------------------------------------ files of earlier versions

@pytest.mark.parametrize("record", [
    # pretrain of ELMo as keras_ctx/recipes.py wrote it at 2f5de12 (no sizes, no hash)
    {"model": "elmo-tiny", "family": "elmo", "sequence_length": 16, "overrides": {},
     "corpus": "builtin", "steps": 3, "seed": 0, "vocabulary": ["<pad>", "<S>", "</S>"]},
    # convert as keras_ctx/recipes.py wrote it before 1b78f73
    {"model": "/checkpoints/bert", "family": "bert", "sequence_length": 128},
])
def test_a_run_json_of_an_earlier_version_still_reads(tmp_path, record):
    files.write_json(str(tmp_path / run_files.RUN_FILE), record)
    assert run_files.read_info(str(tmp_path)) == record


def test_a_settings_file_of_the_first_version_still_reads(tmp_path):
    # What keras_ctx/recipes.py recorded at 56da98e, the settings file's first version.
    record = {"model": "bert-tiny", "overrides": {}, "corpus": "builtin",
              "sequence_length": 16, "batch_size": 2, "vocabulary_size": 8000, "seed": 0}
    files.write_json(str(tmp_path / runs.SETTINGS_FILE), record)
    assert runs.read_settings(tmp_path) == record


# ------------------------------------------------------------------- nested fields

def _run_json(tmp_path, edit):
    out = _run(tmp_path, **edit)
    return lambda: run_files.read_info(out), str(out / run_files.RUN_FILE)


def _settings_json(tmp_path, edit):
    (tmp_path / "run").mkdir()
    path = tmp_path / "run" / runs.SETTINGS_FILE
    files.write_json(str(path), {**SETTINGS, **edit})
    return lambda: runs.read_settings(tmp_path / "run"), str(path)


def _finetune_json(tmp_path, edit):
    files.write_json(str(tmp_path / run_files.FINETUNE_FILE), {**FINETUNED, **edit})
    return lambda: run_files._read_finetuned_info(str(tmp_path)), run_files.FINETUNE_FILE


def _sample_json(tmp_path, edit):
    path = str(tmp_path / runs.CLAIMED_SAMPLE_FILE)
    files.write_json(path, edit)
    return lambda: runs.read_record(path, runs.SAMPLE_SCHEMA, "a sample", "fix"), path


def _manifest_json(tmp_path, edit):
    out, _ = _prepared(tmp_path, manifest=edit)
    return lambda: prepared_files.load_manifest(str(out)), prepared_files.MANIFEST


_SAMPLE = RUN_INFO["tokenizer_sample"]


@pytest.mark.parametrize("record, edit, words", [
    # Each nested value a writer writes, broken: the file and the field's path named.
    (_run_json, {"tokenizer_sample": {**_SAMPLE, "sentences": "5"}},
     ("tokenizer_sample.sentences='5', not an integer >= 0",)),
    (_run_json, {"tokenizer_sample": {**_SAMPLE, "sentences": -1}},
     ("tokenizer_sample.sentences=-1, not an integer >= 0",)),
    (_run_json, {"tokenizer_sample": {"sentence": 5}},
     ("'tokenizer_sample.sentence'", "did you mean 'tokenizer_sample.sentences'?")),
    (_run_json, {"tokenizer_sample": {**_SAMPLE, "seed": True}},
     ("tokenizer_sample.seed=True, not an integer or null",)),
    (_run_json, {"tokenizer_sample": [5]}, ("tokenizer_sample=[5], not an object",)),
    (_run_json, {"sizes": {"num_layers": 0}}, ("sizes.num_layers=0, not an integer >= 1",)),
    (_run_json, {"vocabulary": ["bank", 3]}, ("vocabulary[1]=3, not a string",)),
    (_run_json, {"corpus": ["a.txt", None]},
     ("corpus[1]=None, not a string",)),
    (_run_json, {"data": {**RUN_INFO["data"], "layuot": "bert"}},
     ("'data.layuot'", "did you mean 'data.layout'?")),
    (_run_json, {"data": {**RUN_INFO["data"], "settings": {"seed": -1}}},
     ("data.settings.seed=-1, not an integer >= 0",)),
    (_run_json, {"data": {**RUN_INFO["data"], "tokenizer": {"tokenizer_sample": {"sed": 0}}}},
     ("did you mean 'data.tokenizer.tokenizer_sample.seed'?",)),
    (_run_json, {"data": {**RUN_INFO["data"], "sha256": [1]}},
     ("data.sha256[0]=1, not a string",)),
    (_settings_json, {"changes": [{"step": 2, "stpes": [3, 5]}]},
     ("'changes[0].stpes'", "did you mean 'changes[0].steps'?")),
    (_settings_json, {"changes": [{"steps": [3, 5]}]}, ("lacks the field 'changes[0].step'",)),
    (_settings_json, {"changes": [{"step": 2, "steps": 5}]},
     ("changes[0].steps=5, not a list",)),
    (_settings_json, {"corpus": ["a.txt", 3]}, ("corpus[1]=3, not a string",)),
    (_finetune_json, {"classes": ["neg", 1]}, ("classes[1]=1, not a string",)),
    (_sample_json, {"tokenizer_sample": {"corpus_sentence": 5}},
     ("did you mean 'tokenizer_sample.corpus_sentences'?",)),
    (_manifest_json, {"features": {"token_ids": -16}}, ("features.token_ids=-16, not an "
                                                        "integer >= 0",)),
    (_manifest_json, {"token_counts": [1, -2]}, ("token_counts[1]=-2, not an integer >= 0",)),
    (_manifest_json, {"shards": [{}]}, ("lacks the field 'shards[0].file'",)),
])
def test_a_broken_nested_field_is_refused_naming_the_file_and_its_path(tmp_path, record,
                                                                       edit, words):
    read, path = record(tmp_path, edit)
    _refused(read, path, *words)


@pytest.mark.parametrize("family", ["bert", "elmo"])
def test_the_records_of_a_trained_tokenizer_read_back(tmp_path, family):
    # The real writers: train_tokenizer's sample record and the family's run files (ELMo's
    # words) in run.json (save_run) and the claimed tokenizer's sample.json.
    from keras_ctx import registry
    from keras_ctx.data import corpora, tokenizers

    sample = corpora.Sample(["the bank of the river is wide", "a bank lends money"] * 20)
    sample.seen = 50
    tokenizer, sampled = tokenizers.train_tokenizer(registry.get(family), sample,
                                                    registry.Run(f"{family}-tiny", 2, 16, 64))
    assert sampled == {"tokenizer_sample": {"sentences": 40, "corpus_sentences": 50,
                                            "seed": 0}}
    saved, extra = registry.get(family).run_files(tokenizer)  # ELMo: no tokenizer/
    info = {"model": f"{family}-tiny", "family": family, "sequence_length": 16,
            "overrides": {}, "corpus": ["a.txt"], "steps": 3, "seed": 0, **extra, **sampled}
    run_files.save_run(tmp_path / "run", info, _Backbone())
    assert run_files.read_info(tmp_path / "run") == {**info,
                                                     "sizes": _Backbone().get_config()}
    runs.save_claimed_tokenizer(str(tmp_path / "claimed"), saved, sampled)
    path = str(tmp_path / "claimed" / runs.TOKENIZER_DIR / runs.CLAIMED_SAMPLE_FILE)
    assert runs.read_record(path, runs.SAMPLE_SCHEMA, "a sample", "fix") == (
        sampled if saved is not None else {})

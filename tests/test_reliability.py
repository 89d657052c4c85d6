"""Nothing lost, nothing silent (issue 22): writes, locks, divergence, input checks."""

import json
import os
import signal
import subprocess
import sys
import time

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_ctx
from keras_ctx import cli, runs
from keras_ctx.training import Checkpointer, TrainingDiverged, fit_resumable

from tests.test_cli import write_corpus

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "bank", "river", "money",
         "on", "a", "good", "bad", "film", "was", "it", "."]
TINY_SET = ["--set", "num_layers=1", "--set", "hidden_size=32", "--set", "num_heads=2",
            "--set", "intermediate_size=64", "--vocabulary-size", "200",
            "--sequence-length", "16", "--batch-size", "4", "--steps", "2",
            "--checkpoint-every", "2"]


def tiny_backbone(seed=0):
    keras.utils.set_random_seed(seed)
    return keras_ctx.models.from_preset("bert-tiny", num_layers=1, hidden_size=32,
                                        num_heads=2, intermediate_size=64,
                                        vocabulary_size=len(VOCAB), max_sequence_length=32)


def make_run(directory, seed=0):
    import keras_hub

    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    backbone = tiny_backbone(seed)
    runs.save_run(str(directory), {"model": "bert-tiny", "family": "bert",
                                   "sequence_length": 16}, backbone, tokenizer)
    return backbone


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("run") / "run"
    make_run(directory)
    return directory


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def cli_output(argv):
    """(exit code, what it printed) of `keras-ctx ARGV`, where no capsys is at hand."""
    import contextlib
    import io

    stream = io.StringIO()
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        code = cli.main(list(argv))
    return code, stream.getvalue()


def one_line_error(output):
    errors = [line for line in output.splitlines() if "error:" in line]
    assert errors and "Traceback" not in output, output[-2000:]
    return errors[0]


# ------------------------------------------------------------ 1. writes, --no-resume

SAVER = """
import sys, keras, keras_ctx
from keras_ctx import runs
keras.utils.set_random_seed(1)
model = keras_ctx.models.from_preset("bert-tiny", num_layers=2, hidden_size=256,
                                     num_heads=4, intermediate_size=1024,
                                     vocabulary_size=20000)
print("ready", flush=True)
while True:
    runs.save_run(sys.argv[1], {"family": "bert", "sequence_length": 16}, model,
                  overwrite=True)
"""


def test_sigkill_while_saving_the_backbone_keeps_the_previous_one(tmp_path):
    run_dir = tmp_path / "run"
    make_run(run_dir)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for delay in (0.3, 0.9):
        child = subprocess.Popen([sys.executable, "-c", SAVER, str(run_dir)], env=env,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(delay)  # the loop spends nearly all its time writing backbone.keras
        assert child.poll() is None, "the saving loop stopped before the kill"
        child.send_signal(signal.SIGKILL)
        child.wait()
        model = keras.saving.load_model(run_dir / "backbone.keras", compile=False)
        sizes = {model.get_layer("token_embedding").vocabulary_size}
        # Killed before the rename: the old backbone; after it: the whole new one.
        assert sizes <= {len(VOCAB), 20000}
    # The next save removes what the killed writers left beside the file.
    runs.save_run(
        str(run_dir), {"family": "bert", "sequence_length": 16}, tiny_backbone(),
        overwrite=True)
    assert sorted(os.listdir(run_dir)) == ["backbone.keras", "run.json"]


def test_no_resume_never_deletes_what_keras_ctx_did_not_write(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    user = tmp_path / "user"
    (user / "checkpoints").mkdir(parents=True)
    (user / "checkpoints" / "thesis.txt").write_text("years of work")
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(user), "--no-resume", *TINY_SET)
    assert code == 2 and "holds no keras-ctx run" in one_line_error(output)
    assert (user / "checkpoints" / "thesis.txt").read_text() == "years of work"

    # A keras-ctx run whose new arguments fail validation keeps its checkpoints.
    ours = tmp_path / "ours"
    step = ours / "checkpoints" / "step-000000002"
    step.mkdir(parents=True)
    (ours / runs.SETTINGS_FILE).write_text("{}")
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(ours), "--no-resume", *TINY_SET,
                           "--set", "num_layers=-1")
    assert code == 2 and "num_layers" in one_line_error(output)
    assert step.is_dir()


def test_checkpointer_clear_deletes_only_its_step_directories(tmp_path):
    (tmp_path / "step-000000004").mkdir()
    (tmp_path / "step-000000006.partial").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    Checkpointer(str(tmp_path)).clear()
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_pretrain_export_refuses_an_existing_export_before_any_work(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    for existing in ("export/1", "export-text/1"):
        (tmp_path / existing).mkdir(parents=True)
        (tmp_path / existing / "saved_model.pb").write_text("served in production")
        code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                               "--out", str(tmp_path / "run"), "--export",
                               str(tmp_path / "export"), *TINY_SET)
        assert code == 2 and "already holds an export" in one_line_error(output)
        assert "--overwrite" in output
        assert (tmp_path / existing / "saved_model.pb").read_text() == "served in production"
        assert not (tmp_path / "run").exists(), "nothing is claimed before validation"
        (tmp_path / existing / "saved_model.pb").unlink()
        (tmp_path / existing).rmdir()


def test_finetune_export_and_output_are_not_replaced_implicitly(tiny_run, tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("the film was good\tpos\nthe film was bad\tneg\n"
                     "it was good\tpos\nit was bad\tneg\n")
    (tmp_path / "export" / "1").mkdir(parents=True)
    (tmp_path / "export" / "1" / "saved_model.pb").write_text("served")
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1",
                           "--export", str(tmp_path / "export"))
    assert code == 2 and "already holds an export" in one_line_error(output)
    assert (tmp_path / "export" / "1" / "saved_model.pb").read_text() == "served"
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    assert code == 0, output
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    assert code == 2 and "--overwrite" in one_line_error(output)


# ------------------------------------------------------------ 2. convert into a run

def test_convert_into_an_existing_run_refuses_unless_overwrite(tiny_run, tmp_path, capsys):
    from keras_ctx.convert import to_huggingface

    source = tmp_path / "hf"
    to_huggingface(tiny_backbone(seed=5), str(source))
    run_dir = tmp_path / "run"
    make_run(run_dir, seed=0)
    before = (run_dir / "backbone.keras").read_bytes()
    code, output = run_cli(capsys, "convert", str(source), str(run_dir))
    assert code == 2 and "already holds a run" in one_line_error(output)
    assert (run_dir / "backbone.keras").read_bytes() == before
    code, output = run_cli(capsys, "convert", str(source), str(run_dir), "--overwrite")
    assert code == 0, output
    assert (run_dir / "backbone.keras").read_bytes() != before
    # No stale tokenizer from the replaced run: the source had none.
    assert not (run_dir / "tokenizer").exists()


# ------------------------------------------------------------ 3. lock

HOLDER = """
import sys, time
from keras_ctx.common.files import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def test_second_process_on_a_locked_run_dir_names_the_holder(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)],
                              stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=os.getcwd()))
    try:
        assert holder.stdout.readline().strip() == "locked"
        code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                               "--out", str(out), *TINY_SET)
        assert code == 2 and f"in use by process {holder.pid}" in one_line_error(output)
        assert not (out / runs.SETTINGS_FILE).exists()
    finally:
        holder.kill()
        holder.wait()
    # The holder died without releasing: its lock (naming a dead pid) is taken over.
    from keras_ctx.common.files import RunLock

    lock = RunLock(out)
    assert lock.holder() == holder.pid
    with lock:
        assert lock.holder() == os.getpid()


# ------------------------------------------------------------ 4. divergence

class NanFrom(keras.optimizers.schedules.LearningRateSchedule):
    """1e-2, then NaN from optimizer step `first_bad` on (a `--learning-rate nan`)."""

    def __init__(self, first_bad):
        self.first_bad = first_bad

    def __call__(self, step):
        return keras.ops.where(step < self.first_bad, 1e-2, float("nan"))

    def get_config(self):
        return {"first_bad": self.first_bad}


def regression(learning_rate=1e-2):
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate), "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True)))
    return model, dataset.batch(8, drop_remainder=True).repeat()


def test_update_to_non_finite_weights_keeps_no_checkpoint_and_resume_works(tmp_path):
    # The third update is NaN; the loss before it (what the loss guard sees) is finite.
    model, data = regression(NanFrom(2))
    with pytest.raises(TrainingDiverged, match="last good checkpoint \\(step 2\\)"):
        fit_resumable(model, data, steps=6, out_dir=str(tmp_path), checkpoint_every=1,
                      verbose=0)
    assert Checkpointer(str(tmp_path / "checkpoints")).steps() == [1, 2]
    model, data = regression(NanFrom(10**9))
    result = fit_resumable(model, data, steps=4, out_dir=str(tmp_path), checkpoint_every=1,
                           verbose=0)
    assert result["step"] == 4
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)


def test_nan_checkpoint_tensor_and_truncated_optimizer_state_refuse_to_load(tmp_path):
    model, data = regression()
    fit_resumable(model, data, steps=2, out_dir=str(tmp_path / "a"), checkpoint_every=2,
                  verbose=0)
    weights = tmp_path / "a" / "checkpoints" / "step-000000002" / "model.weights.h5"
    with h5py.File(weights, "r+") as handle:
        names = []
        handle.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset)
                          else None)
        handle[names[0]][...] = np.nan
    model, data = regression()
    with pytest.raises(ValueError, match="cannot be restored.*NaN"):
        fit_resumable(model, data, steps=4, out_dir=str(tmp_path / "a"), checkpoint_every=2,
                      verbose=0)

    model, data = regression()
    fit_resumable(model, data, steps=2, out_dir=str(tmp_path / "b"), checkpoint_every=2,
                  verbose=0)
    npz = tmp_path / "b" / "checkpoints" / "step-000000002" / "optimizer.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    model, data = regression()
    with pytest.raises(ValueError, match="cannot be restored"):
        fit_resumable(model, data, steps=4, out_dir=str(tmp_path / "b"), checkpoint_every=2,
                      verbose=0)


# ------------------------------------------------------------ 5. token ids

def test_out_of_range_ids_raise_in_eager_naming_the_vocabulary_size():
    backbone = tiny_backbone()
    inputs = {"token_ids": np.array([[2, 5, -1]]), "padding_mask": np.ones((1, 3), "int32"),
              "segment_ids": np.zeros((1, 3), "int32")}
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"\\[0, {len(VOCAB)}\\)"):
        backbone(inputs)
    inputs["token_ids"] = np.array([[2, 5, len(VOCAB)]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary size") as error:
        backbone(inputs)
    from keras_ctx.common.errors import one_line

    assert one_line(error.value) == (
        f"The token ids of layer token_embedding must be in [0, {len(VOCAB)}) (the "
        "vocabulary size); an id outside it was given. Check the tokenizer matches the model.")


def test_out_of_range_ids_raise_under_jit_compile(tmp_path):
    from keras_ctx.pretraining import CausalLMPretrainer

    keras.utils.set_random_seed(0)
    backbone = keras_ctx.models.from_preset("gpt2", num_layers=1, hidden_size=32,
                                            num_heads=2, intermediate_size=64,
                                            vocabulary_size=50, max_sequence_length=16)
    pretrainer = CausalLMPretrainer(backbone)
    pretrainer.compile(keras.optimizers.Adam(1e-3), jit_compile=True)
    ids = np.full((4, 8), 60, "int32")  # XLA would clamp these to row 49
    dataset = tf.data.Dataset.from_tensors(
        {"token_ids": ids, "padding_mask": np.ones_like(ids)}).repeat()
    # tf.data is checked in the pipeline (TensorFlow's error), arrays in numpy (ValueError).
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                       match="token_ids must be in \\[0, 50\\)"):
        fit_resumable(pretrainer, dataset, steps=1, out_dir=str(tmp_path), verbose=0)
    assert not Checkpointer(str(tmp_path / "checkpoints")).steps()
    # A Pretrainer's own fit and evaluate (what users call) check them too,
    # and no weight moved (before: the step trained on row 49).
    before = [np.array(v) for v in backbone.weights]
    arrays = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    for run in (lambda: pretrainer.fit(dataset, steps_per_epoch=1, verbose=0),
                lambda: pretrainer.evaluate(dataset, steps=1, verbose=0),
                lambda: pretrainer.fit(arrays, batch_size=2, verbose=0)):
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                           match="token_ids must be in \\[0, 50\\)"):
            run()
    for old, new in zip(before, backbone.weights):
        np.testing.assert_array_equal(old, np.array(new))
    fine = tf.data.Dataset.from_tensors(
        {"token_ids": ids % 50, "padding_mask": np.ones_like(ids)}).repeat()
    assert np.isfinite(pretrainer.fit(fine, steps_per_epoch=1, verbose=0).history["loss"][0])


def test_serving_signatures_check_ids_int64_range_and_length(tmp_path):
    from keras_ctx.export import export_saved_model

    path = export_saved_model(tiny_backbone(), str(tmp_path), sequence_length=8)
    served = tf.saved_model.load(path)
    ids = np.full((1, 8), 5, "int32")
    ones = np.ones((1, 8), "int32")
    serve = served.signatures["serving_default"]
    ok = serve(token_ids=ids, padding_mask=ones, segment_ids=0 * ones)
    assert ok["sequence_output"].shape == (1, 8, 32)
    ids[0, 3] = -1
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"input token_ids must be in \\[0, {len(VOCAB)}\\)"):
        serve(token_ids=ids, padding_mask=ones, segment_ids=0 * ones)

    def example(token_id):
        features = {"token_ids": [5] * 7 + [token_id], "padding_mask": [1] * 8,
                    "segment_ids": [0] * 8}
        return tf.train.Example(features=tf.train.Features(feature={
            k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
            for k, v in features.items()})).SerializeToString()

    examples = served.signatures["serve_examples"]
    assert examples(examples=tf.constant([example(5)]))["sequence_output"].shape[0] == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside int32|must be in"):
        examples(examples=tf.constant([example(2**32 + 5)]))  # not wrapped to 5

    free = export_saved_model(tiny_backbone(), str(tmp_path / "free"))
    serve = tf.saved_model.load(free).signatures["serving_default"]
    long = np.full((1, 33), 5, "int32")
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the 32 positions the model has"):
        serve(token_ids=long, padding_mask=np.ones_like(long), segment_ids=0 * long)


# ------------------------------------------------------------ 6. typos, ranges

def test_from_preset_typos_raise_naming_the_closest_key():
    with pytest.raises(ValueError, match="'num_layer'.*did you mean 'num_layers'"):
        keras_ctx.models.from_preset("bert-tiny", num_layer=1)
    with pytest.raises(ValueError, match="'hiden_size'.*did you mean 'hidden_size'"):
        keras_ctx.models.from_preset("bert-tiny", hiden_size=64)


@pytest.mark.parametrize("flags, message", [
    (["--set", "foo=1"], "Unknown config key 'foo'"),
    (["--learning-rate", "-1"], "--learning-rate must be a positive"),
    (["--learning-rate", "nan"], "--learning-rate must be a positive"),
    (["--vocabulary-size", "5"], "--vocabulary-size must be at least"),
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--batch-size", "0"], "--batch-size must be a positive integer"),
    (["--set", "num_heads=0"], "--set num_heads must be a positive integer"),
])
def test_bad_flags_are_one_line_errors_before_the_run_dir_is_claimed(tmp_path, capsys,
                                                                     flags, message):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(tmp_path / "run"), *TINY_SET, *flags)
    assert code == 2 and message in one_line_error(output)
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------ 7. finetune's TSV

@pytest.mark.parametrize("text, header, message", [
    ("text\tlabel\ngood film\tpos\nbad film\tneg\n", None, None),
    ("sentence\tsentiment\ngood film\tpos\nbad film\tneg\n", None, None),
    ("review\tstars\ngood film\tpos\nbad film\tneg\nfine film\tpos\n", None,
     ":1: the label 'stars' occurs on no other line"),
    ("review\tstars\ngood film\tpos\nbad film\tneg\nfine film\tpos\n", True, None),
    ("pos\tgood film\nneg\tbad film\npos\tfine film\nneg\tawful film\n", None,
     "columns swapped"),
    ("good film\tpos\tx\nbad film\tneg\n", None, ":1: expected exactly 2"),
    ("good film\tpos\nbad film\tpos\n", None, "at least two classes"),
    ("good film\tpos\nbad film\t \n", None, ":2: the label is empty"),
])
def test_labelled_tsv_is_read_strictly(tmp_path, text, header, message):
    from keras_ctx.data.labelled import read_labelled_tsv

    path = tmp_path / "train.tsv"
    path.write_text(text)
    if message is None:
        texts, labels = read_labelled_tsv(str(path), header=header)
        assert texts[0] == "good film" and set(labels) == {"pos", "neg"}
    else:
        with pytest.raises(ValueError) as error:
            read_labelled_tsv(str(path), header=header)
        assert message in str(error.value) and str(path) in str(error.value)


def test_labels_are_stripped(tmp_path):
    from keras_ctx.data.labelled import read_labelled_tsv

    path = tmp_path / "train.tsv"
    path.write_text("good film\tpos \r\nbad film\t neg\r\nok film\tpos\r\n")
    assert read_labelled_tsv(str(path), header=False)[1] == ["pos", "neg", "pos"]


def test_finetune_on_three_columns_fails_naming_the_line(tiny_run, tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("the film was good\tpos\textra\nthe film was bad\tneg\n")
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    assert code == 2 and f"{train}:1: expected exactly 2" in one_line_error(output)


# ------------------------------------------------------------ 8. resume, poisoning

def test_tuple_overrides_round_trip_so_the_run_can_resume(tmp_path):
    settings = {"model": "elmo-tiny", "overrides": {"filters": ((1, 32), (2, 32))}}
    runs.claim(str(tmp_path / "run"), settings)
    runs.claim(str(tmp_path / "run"), settings)  # the same arguments again: resume


def test_failed_validation_does_not_poison_out_for_the_corrected_command(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    write_corpus(corpus, documents=10)
    out = tmp_path / "run"
    code, output = run_cli(capsys, "pretrain", "bert-tiny", "--corpus", str(corpus),
                           "--out", str(out), *TINY_SET, "--set", "num_layers=-1")
    assert code == 2
    assert not out.exists(), "a failed command claimed --out"
    runs.claim(str(out), {"model": "bert-tiny", "anything": "corrected"})


# ------------------------------------------------------------ 9. the poor cases

def copy_run(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


def test_broken_run_directories_are_one_line_errors(tiny_run, tmp_path, capsys):
    import shutil

    no_tokenizer = copy_run(tiny_run, tmp_path / "a")
    shutil.rmtree(no_tokenizer / "tokenizer")
    missing_keys = copy_run(tiny_run, tmp_path / "b")
    (missing_keys / "run.json").write_text('{"model": "bert-tiny"}')
    corrupt = copy_run(tiny_run, tmp_path / "c")
    (corrupt / "backbone.keras").write_bytes(b"PK\x03\x04 not really a zip")
    for directory, message in ((no_tokenizer, "has no tokenizer/"),
                               (missing_keys, "lacks the field 'family'"),
                               (corrupt, "backbone.keras is corrupt")):
        code, output = run_cli(capsys, "embed", str(directory), "the bank")
        assert code == 2 and message in one_line_error(output), output


def test_embed_save_reports_the_file_it_wrote(tiny_run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = run_cli(capsys, "embed", str(tiny_run), "the bank", "--save", "ro")
    assert code == 0 and "Saved to ro.npz." in output and (tmp_path / "ro.npz").is_file()
    code, output = run_cli(capsys, "embed", str(tiny_run), "the bank", "--save", "ro")
    assert code == 2 and "--overwrite" in one_line_error(output)


def test_checkpoint_index_without_weight_map_or_escaping_the_directory(tmp_path):
    from keras_ctx.convert.huggingface import read_tensors
    from safetensors.numpy import save_file

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    save_file({"secret": np.ones(3, "float32")}, str(tmp_path / "outside.safetensors"))
    index = checkpoint / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match="weight_map"):
        read_tensors(str(checkpoint))
    index.write_text(json.dumps({"weight_map": {"secret": "../outside.safetensors"}}))
    with pytest.raises(ValueError, match="outside the checkpoint directory"):
        read_tensors(str(checkpoint))


def test_keras_call_wrappers_and_ansi_codes_are_removed():
    from keras_ctx.common.errors import one_line

    class Refuses(keras.layers.Layer):
        def call(self, x):
            raise ValueError("the real problem; the fix")

    with pytest.raises(ValueError) as error:
        Refuses()(np.ones((1, 2)))
    assert one_line(error.value) == "the real problem; the fix"
    assert one_line(ValueError("\x1b[1mbold\x1b[0m message\nmore")) == "bold message"


def test_a_50_megabyte_line_is_streamed_in_bounded_pieces(tmp_path):
    import tracemalloc

    from keras_ctx.data import corpora

    path = tmp_path / "one_line.txt"
    word = "word " * 200_000  # 1 MB
    with open(path, "w") as handle:
        for _ in range(50):
            handle.write(word)
        handle.write("\n\nsecond document.\n")
    tracemalloc.start()
    longest, total, documents = 0, 0, 0
    for document in corpora.documents(str(path)).as_numpy_iterator():
        documents += 1
        for sentence in document:
            longest = max(longest, len(sentence))
            total += sentence.count(b" ") + 1
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == 50 * 200_000 + 2  # no word lost or cut
    assert longest <= corpora.MAX_LINE_CHARS
    assert peak < 16 * 2**20, f"peak Python memory {peak / 2**20:.0f} MiB"

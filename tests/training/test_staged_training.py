"""A run in stages (issue 54): BERT's 90% of the steps at 128 and the last 10% at 512
(Devlin et al. 2019, A.2) in ONE run: one model, optimizer and schedule, each stage on its
own dataset, a killed run resumed in its stage at that stage's data position."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.commands import pretrain as pretrain_command
from keras_ctx.commands.pretrain_checks import PretrainRequest, stage_lengths
from keras_ctx.common.errors import ConfigError
from keras_ctx.models.presets import describe_stages
from keras_ctx.training import Checkpointer, StagedInput, fit_resumable
from tests.cli_helpers import VOCAB

BATCH, SHORT, LONG, RATE = 2, 4, 8, 0.1


def _stage_arrays(length, offset, batches=12):
    """(x, y) of `batches` batches of rows of `length` values: each batch its own mean."""
    rng = np.random.default_rng(length)
    x = rng.uniform(0.5, 1.5, size=(batches * BATCH, length, 1)).astype("float32") + offset
    y = rng.uniform(-1, 1, size=(batches * BATCH, 1)).astype("float32")
    return x, y


def _staged(boundary):
    """A StagedInput: rows of SHORT values, then from `boundary` rows of LONG ones."""
    stages = []
    for first, (length, offset) in ((0, (SHORT, 0.0)), (boundary, (LONG, 2.0))):
        x, y = _stage_arrays(length, offset)
        stages.append((first, tf.data.Dataset.from_tensor_slices((x, y)).batch(
            BATCH, drop_remainder=True).repeat()))
    return StagedInput(tuple(stages))


def _mean_model():
    """w * mean(x) over a row of any length, trained by plain SGD (a numpy reference)."""
    inputs = keras.Input((None, 1))
    pooled = keras.layers.GlobalAveragePooling1D()(inputs)
    outputs = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")(pooled)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.SGD(RATE), "mse")
    return model


def _sgd_reference(steps, boundary):
    """The weight by hand: SGD on (y - w m)^2, stage 1's batches in order, then stage 2's
    from its first (m: a row's mean), and the lengths each step read."""
    w, lengths = 1.0, []
    arrays = {SHORT: _stage_arrays(SHORT, 0.0), LONG: _stage_arrays(LONG, 2.0)}
    for step in range(steps):
        length, index = (SHORT, step) if step < boundary else (LONG, step - boundary)
        x, y = arrays[length]
        m = x[index * BATCH:(index + 1) * BATCH].mean(axis=(1, 2))
        y = y[index * BATCH:(index + 1) * BATCH, 0]
        w -= RATE * np.mean(-2 * m * (y - w * m))
        lengths.append(length)
    return w, lengths


def _weight(model):
    return float(keras.ops.convert_to_numpy(model.weights[0])[0, 0])


def _iterations(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def test_stages_train_in_order_on_one_optimizer(tmp_path):
    # 10 steps, stage 2 from step 9: nine batches of 4 values, then one of 8.
    straight = _mean_model()
    result = fit_resumable(straight, _staged(9), steps=10, out_dir=str(tmp_path),
                           checkpoint_every=4, verbose=0)
    want, lengths = _sgd_reference(10, 9)
    assert lengths == [SHORT] * 9 + [LONG] and result["step"] == 10
    assert _iterations(straight) == 10  # one optimizer across the switch
    assert _weight(straight) == pytest.approx(want, rel=1e-5)
    # Stage 1's data alone for 10 steps is another weight: the switch is what matches.
    assert _weight(straight) != pytest.approx(_sgd_reference(10, 10)[0], rel=1e-3)
    # Chunks end at the boundary: a checkpoint there, none across it.
    assert Checkpointer(str(tmp_path / "checkpoints")).steps() == [9, 10]


@pytest.mark.parametrize("kill", [11, 6])
def test_a_killed_run_resumes_in_its_stage_at_its_data_position(tmp_path, kill):
    # Killed in stage 2 (a checkpoint at step 11), then resumed to 13: stage 2's batches
    # 2 and 3 follow, not its first ones again. Killed in stage 1 (step 6): resumed there,
    # then switched at step 9.
    out = str(tmp_path / "run")
    first = _mean_model()
    fit_resumable(first, _staged(9), steps=kill, out_dir=out, checkpoint_every=2, verbose=0)
    resumed = _mean_model()
    fit_resumable(resumed, _staged(9), steps=13, out_dir=out, checkpoint_every=2, verbose=0)
    assert _iterations(resumed) == 13
    assert _weight(resumed) == pytest.approx(_sgd_reference(13, 9)[0], rel=1e-5)


def test_staged_input_refuses_stages_out_of_order():
    data = tf.data.Dataset.from_tensor_slices(np.zeros((4, 2), "float32")).batch(2)
    for firsts in ((1, 5), (0, 5, 5), (0, 7, 3)):
        with pytest.raises(ValueError, match="start at step 0 and at increasing"):
            StagedInput(tuple((first, data) for first in firsts))


TINY = dict(num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32)


def test_pretrain_without_sequence_length_plans_bert_stages_at_their_lengths(tmp_path):
    out = str(tmp_path / "run")
    request = PretrainRequest.checked("bert-tiny", out, steps=10, overrides=dict(TINY))
    # Devlin et al. 2019, A.2: 90% of 10 steps at 128, from step 9 at 512.
    assert request.stages == ((0, 128), (9, 512)) and request.sequence_length == 512
    assert request.settings()["stages"] == [[0, 128], [9, 512]]
    # One length given: one stage, and the log says the later stage is not run and why.
    one = PretrainRequest.checked("bert-tiny", out, steps=10, sequence_length=64,
                                  overrides=dict(TINY))
    assert one.stages == ((0, 64),) and "stages" not in one.settings()
    line = describe_stages("bert-tiny", 10, lengths=one.stages)
    assert "2. MLM + NSP from step 9 at length 512" in line
    assert "[not run: this run trains at one length, 64 (--sequence-length)" in line
    assert "[at length 64 in this run (--sequence-length)]" in line
    assert "not run" not in describe_stages("bert-tiny", 10, lengths=request.stages)
    # Fewer positions than stage 2's length: refused in one line, before training.
    with pytest.raises(ConfigError, match="stage 2 trains at length 512 from step 9"):
        PretrainRequest.checked("bert-tiny", out, steps=10,
                                overrides=dict(TINY, max_sequence_length=128))
    # A run too short to reach stage 2 trains one stage at 128; a family whose stages give
    # no length keeps the one default length.
    assert PretrainRequest.checked("bert-tiny", out, steps=1).stages == ((0, 128),)
    # --data: one stage at the length the data was prepared at (no --sequence-length).
    assert stage_lengths("bert-tiny", 10, None, 32) == ((0, 32),)
    assert "(--data); without --data it runs]" in describe_stages(
        "bert-tiny", 10, lengths=((0, 32),), length_from="--data")
    assert PretrainRequest.checked("roberta-base", out, steps=10).stages == ((0, 64),)


@pytest.mark.slow  # builds BERT's pipeline twice and a model: ~6 s on a loaded machine
def test_pretrain_builds_each_stage_on_its_own_dataset_at_its_length(tmp_path):
    request = PretrainRequest.checked("bert-tiny", str(tmp_path / "run"), steps=10,
                                      overrides=dict(TINY))
    import keras_hub

    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    lines = [f"the bank of the river {i} . it was a good film ." for i in range(40)]
    documents = tf.data.Dataset.from_tensor_slices([[line, line] for line in lines])
    _, _, dataset, _, _ = pretrain_command.build(
        request.preset, documents, request.run_at(128), request.overrides,
        claimed=(tokenizer, {}), stages=request.stages)
    shapes = [(first, (data.element_spec[0] if isinstance(data.element_spec, tuple)
                       else data.element_spec)["token_ids"].shape.as_list())
              for first, data in dataset.stages]
    assert shapes == [(0, [16, 128]), (9, [16, 512])]


@pytest.mark.slow  # a CLI run whose last step compiles at length 512: ~1 min loaded
def test_cli_run_without_sequence_length_trains_both_stages(tmp_path):
    import json

    from tests.cli_helpers import cli_output, write_corpus

    corpus, out = tmp_path / "corpus.txt", tmp_path / "run"
    write_corpus(corpus, documents=20)
    code, output = cli_output([
        "pretrain", "bert-tiny", "--corpus", str(corpus), "--out", str(out), "--steps", "10",
        "--checkpoint-every", "4", "--batch-size", "4", "--vocabulary-size", "200",
        *[flag for key, value in TINY.items() for flag in ("--set", f"{key}={value}")]])
    assert code == 0, output[-2000:]
    assert "1. MLM + NSP from step 0 at length 128" in output
    assert "2. MLM + NSP from step 9 at length 512" in output and "not run" not in output
    with open(out / "run.json") as handle:
        info = json.load(handle)
    assert info["sequence_length"] == 512  # the last stage's: what export and embed read
    assert info["stages"] == [[0, 128], [9, 512]]
    with open(out / "pretrain_settings.json") as handle:
        assert json.load(handle)["stages"] == [[0, 128], [9, 512]]
    assert Checkpointer(str(out / "checkpoints")).steps() == [9, 10]


def test_a_rerun_with_more_steps_moves_the_boundary_another_length_is_another_run(tmp_path):
    from keras_ctx import runs
    from keras_ctx.common.errors import RunDirectoryError

    out = str(tmp_path / "run")

    def settings(**arguments):
        return PretrainRequest.checked("bert-tiny", out, overrides=dict(TINY),
                                       **arguments).settings()

    runs.claim(out, settings(steps=10))
    # --steps is adjustable and the stage boundary follows it (90% of the steps).
    runs.claim(out, settings(steps=20), existing=runs.look(out))
    assert runs.read_settings(out)["stages"] == [[0, 128], [18, 512]]
    with pytest.raises(RunDirectoryError, match="different sequence_length, stages"):
        runs.claim(out, settings(steps=20, sequence_length=128), existing=runs.look(out))

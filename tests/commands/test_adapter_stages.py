"""MAD-X's three stages through the commands' functions (Pfeiffer et al. 2020): a language
adapter trained by masked LM (`keras-ctx adapter-language`), a task adapter on it
(`finetune --task-adapter --language-adapter`), another language's adapter swapped in
(`export --language-adapter`). Their refusals: test_adapter_refusals.py."""

import keras
import numpy as np
import pytest

from keras_ctx import handles, peft, runs
from keras_ctx.commands import adapter, adapter_stack
from keras_ctx.commands.finetune import finetune
from tests.cli_helpers import VOCAB, make_run, write_corpus

pytestmark = pytest.mark.slow  # ~1 min: stage 1's masked LM and stage 2 compile and train

LABELLED = [("the film was good", "pos"), ("a good film", "pos"), ("it was bad", "neg"),
            ("the bad film", "neg"), ("good money on the bank", "pos"),
            ("bad river", "neg"), ("it was a good river", "pos"), ("the bank was bad", "neg")]


def _weights_by_path(backbone, leave_out=()):
    """{variable path: array} of `backbone`'s weights, the adapters named (and their on/off
    switches) left out."""
    skipped = {id(v) for name in leave_out for v in peft.adapter_variables(backbone, name).values()}
    return {v.path: np.array(v) for v in backbone.weights
            if id(v) not in skipped and not any(f"gate_{n}/" in v.path for n in leave_out)}


def _adapter_arrays(model, name):
    return {key: np.array(v) for key, v in peft.adapter_variables(model, name).items()}


def _german_adapter(run, path, seed=5):
    """A second language adapter for the same backbone, built by hand (its weights drawn
    large enough to change what the classifier computes)."""
    backbone = handles.load(str(run))[1]
    peft.add_adapter(backbone, "de", "madx_language")
    rng = np.random.default_rng(seed)
    for variable in peft.adapter_variables(backbone, "de").values():
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    peft.save_adapter(backbone, "de", path)
    return path


@pytest.fixture(scope="module")
def madx(tmp_path_factory):
    """Stage 1 (English, a dozen steps) and stage 2 on it, run once for the module."""
    root = tmp_path_factory.mktemp("madx")
    run = root / "run"
    make_run(run)
    write_corpus(root / "en.txt", documents=20)
    stage1 = adapter.language_adapter(str(run), str(root / "en.txt"), "en", str(root / "en"),
                                      steps=12, batch_size=4, sequence_length=16,
                                      learning_rate=1e-2, checkpoint_every=12)
    with open(root / "train.tsv", "w", encoding="utf-8") as handle:
        handle.writelines(f"{text}\t{label}\n" for text, label in LABELLED * 2)
    finetune(str(run), str(root / "train.tsv"), str(root / "task"), epochs=2, batch_size=4,
             learning_rate=1e-2, task_adapter=True, language_adapter=stage1["path"])
    return {"root": root, "run": run, "stage1": stage1,
            "de": _german_adapter(run, str(root / "de.safetensors"))}


def test_stage_one_trains_the_language_adapter_alone_and_its_loss_falls(madx):
    stage1, run = madx["stage1"], madx["run"]
    trained = stage1["backbone"]
    fresh = handles.load(str(run))[1]
    # The backbone as read, bit for bit: only the adapter (and the fresh MLM head) trained.
    before, after = _weights_by_path(fresh), _weights_by_path(trained, ["en"])
    assert before.keys() == after.keys()
    for path, value in before.items():
        np.testing.assert_array_equal(after[path], value, err_msg=path)
    # The adapter moved from the weights the same seed gives it before training.
    keras.utils.set_random_seed(0)
    adapter.add_language_adapter(fresh, "en", 2, "run")
    first, last = _adapter_arrays(fresh, "en"), _adapter_arrays(trained, "en")
    assert any("invertible" in key for key in last)  # MAD-X's invertible adapter came too
    moved = [key for key in first if not np.array_equal(first[key], last[key])]
    assert len(moved) == len(first), sorted(set(first) - set(moved))
    assert stage1["step"] == 12
    assert stage1["last_loss"] < 0.95 * stage1["first_loss"], stage1
    # The file holds the trained adapter, for this backbone.
    loaded = handles.load(str(run))[1]
    assert peft.load_adapter(loaded, stage1["path"]) == "en"
    for key, value in _adapter_arrays(loaded, "en").items():
        np.testing.assert_array_equal(value, last[key])


def test_stage_two_leaves_the_backbone_and_the_language_adapter_as_they_were(madx):
    task = madx["root"] / "task"
    classifier = runs.load_finetuned(str(task))[1]
    backbone = classifier.backbone
    assert peft.active_adapters(backbone) == ["en", adapter_stack.TASK_ADAPTER]
    fresh = handles.load(str(madx["run"]))[1]
    before = _weights_by_path(fresh)
    after = _weights_by_path(backbone, ["en", adapter_stack.TASK_ADAPTER])
    assert before.keys() == after.keys()
    for path, value in before.items():
        np.testing.assert_array_equal(after[path], value, err_msg=path)
    stage1 = _adapter_arrays(madx["stage1"]["backbone"], "en")
    for key, value in _adapter_arrays(backbone, "en").items():
        np.testing.assert_array_equal(value, stage1[key], err_msg=key)
    # The task adapter trained and was saved alone beside the classifier.
    keras.utils.set_random_seed(0)
    saved = peft.load_adapter(fresh, str(task / adapter_stack.TASK_ADAPTER_FILE))
    for key, value in _adapter_arrays(fresh, saved).items():
        np.testing.assert_array_equal(value, _adapter_arrays(backbone, "task")[key])


def _token_inputs(model, seed=3):
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, len(VOCAB), size=(3, 16)).astype("int32")
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids),
              "segment_ids": np.zeros_like(ids)}
    return {k: v for k, v in inputs.items() if k in model.input}


def test_stage_three_swaps_the_language_adapter_as_the_python_api_does(madx):
    task = madx["root"] / "task"
    classifier = runs.load_finetuned(str(task))[1]
    inputs = _token_inputs(classifier)
    english = keras.ops.convert_to_numpy(classifier(inputs))
    swapped = adapter_stack.with_language_adapter(classifier, str(task), madx["de"])
    assert peft.active_adapters(classifier.backbone) == ["de", adapter_stack.TASK_ADAPTER]
    german = keras.ops.convert_to_numpy(swapped(inputs))
    assert np.abs(german - english).max() > 1e-3
    # By hand: the run's backbone, the German adapter, the task adapter, the saved head.
    from keras_ctx.tasks import SequenceClassifier

    backbone = handles.load(str(madx["run"]))[1]
    peft.load_adapter(backbone, madx["de"])
    peft.load_adapter(backbone, str(task / adapter_stack.TASK_ADAPTER_FILE))
    by_hand = SequenceClassifier(backbone, num_classes=2)
    saved = runs.load_finetuned(str(task))[1]
    for layer in by_hand.layers:
        if layer is not backbone and layer.weights:
            layer.set_weights(saved.get_layer(layer.name).get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(by_hand(inputs)), german,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.runs_on("tensorflow", "jax", reason="SavedModel export")
def test_export_serves_the_classifier_with_the_target_languages_adapter(madx, tmp_path,
                                                                         capsys):
    import tensorflow as tf

    from tests.cli_helpers import run_cli

    task = madx["root"] / "task"
    code, output = run_cli(capsys, "export", str(task), str(tmp_path / "served"),
                           "--language-adapter", madx["de"])
    assert code == 0, output
    expected = runs.load_finetuned(str(task))[1]
    adapter_stack.with_language_adapter(expected, str(task), madx["de"])
    inputs = _token_inputs(expected)
    served = tf.saved_model.load(str(tmp_path / "served" / "1")).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(served["logits"].numpy(),
                               keras.ops.convert_to_numpy(expected(inputs)), atol=1e-5)


def test_stage_one_resumes_its_checkpoints_and_refuses_other_settings(madx, tmp_path, capsys):
    import shutil

    from keras_ctx.common.errors import ConfigError

    root, out = madx["root"], str(tmp_path / "en")
    shutil.copytree(root / "en", out)
    arguments = dict(batch_size=4, sequence_length=16, checkpoint_every=12, overwrite=True)
    with pytest.raises(ConfigError, match="learning_rate=0.01, and this run has "
                                          "learning_rate=0.001"):
        adapter.language_adapter(str(madx["run"]), str(root / "en.txt"), "en", out, steps=14,
                                 learning_rate=1e-3, **arguments)
    capsys.readouterr()
    result = adapter.language_adapter(str(madx["run"]), str(root / "en.txt"), "en", out,
                                      steps=14, learning_rate=1e-2, **arguments)
    assert "Resuming from step 12" in capsys.readouterr().out
    assert result["step"] == 14
    # Two more steps moved the adapter on from the one saved at step 12.
    twelve = handles.load(str(madx["run"]))[1]
    peft.load_adapter(twelve, madx["stage1"]["path"])
    before = _adapter_arrays(twelve, "en")
    after = _adapter_arrays(result["backbone"], "en")
    assert all(not np.array_equal(before[key], after[key]) for key in before)

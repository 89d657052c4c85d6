"""MAD-X's adapters train with the optimizer and length of the released scripts: Hugging
Face Trainer's defaults under AdapterHub's commands (adapter-hub/adapter-transformers
@6303b5a, src/transformers/training_args.py: weight_decay 0.0, adam_epsilon 1e-8,
max_grad_norm 1.0, warmup_steps 0 and get_linear_schedule_with_warmup's linear decay to 0;
run_language_modeling.py's --block_size: the model's maximum). Each check stops the command
where it would start training, so nothing trains here (stage 1 itself: test_adapter_stages.py)."""

import pytest

from keras_ctx.commands import adapter
from keras_ctx.commands.finetune import finetune
from keras_ctx.tasks.heads import SequenceClassifier
from tests.cli_helpers import make_run, write_corpus


class _Stopped(Exception):
    """Raised where training would start, once what it was given is recorded."""


def _trainer_linear_rate(peak, steps, step):
    """transformers' get_linear_schedule_with_warmup at warmup 0 (optimization.py @6303b5a):
    lr_lambda(t) = max(0, (T - t) / max(1, T)) times the peak rate."""
    return peak * max(0.0, (steps - step) / max(1, steps))


def _assert_trainer_defaults(optimizer, peak, steps):
    """`optimizer` is Trainer's AdamW: no decay, epsilon 1e-8, betas 0.9 / 0.999, a global
    clip of 1.0, and its rate at updates 0, T/2 and T the linear decay's."""
    assert type(optimizer).__name__ == "AdamW"
    assert optimizer.weight_decay == 0.0  # Keras' AdamW default: 0.004
    assert optimizer.epsilon == pytest.approx(1e-8)  # Keras': 1e-7
    assert (optimizer.beta_1, optimizer.beta_2) == (0.9, 0.999)
    assert optimizer.global_clipnorm == 1.0 and optimizer.clipnorm is None  # Keras': none
    for step in (0, steps // 2, steps):
        optimizer.iterations.assign(step)
        assert float(optimizer.learning_rate) == pytest.approx(
            _trainer_linear_rate(peak, steps, step), rel=1e-6), step


@pytest.fixture
def bert_run(tmp_path):
    """A tiny BERT run (position limit 32, recorded sequence length 16) and some text."""
    make_run(tmp_path / "run")
    write_corpus(tmp_path / "en.txt", documents=4)
    return tmp_path


def _stage_one(monkeypatch, root, **arguments):
    """(the optimizer, the rows' length) `adapter-language` trains with."""
    import keras_ctx.training

    seen = {}

    class Rows:  # stands in for the rows, which are test_transfer_data.py's subject
        def repeat(self):
            return self

    def rows(documents, tokenizer, batch_size, sequence_length, seed=0):
        seen["length"] = sequence_length
        return Rows()

    def stop(model, dataset, *args, **kwargs):
        seen["optimizer"] = model.optimizer
        raise _Stopped

    monkeypatch.setattr(adapter, "language_adapter_dataset", rows)
    monkeypatch.setattr(keras_ctx.training, "fit_resumable", stop)
    with pytest.raises(_Stopped):
        adapter.language_adapter(str(root / "run"), str(root / "en.txt"), "en",
                                 str(root / "out"), **arguments)
    return seen["optimizer"], seen["length"]


def test_stage_one_trains_with_trainers_adamw_and_linear_decay(monkeypatch, bert_run):
    optimizer, _ = _stage_one(monkeypatch, bert_run, steps=40, batch_size=4,
                              sequence_length=16)
    _assert_trainer_defaults(optimizer, 1e-4, 40)  # AdapterHub's --learning_rate 1e-4


def test_stage_one_reads_the_models_whole_length_by_default(monkeypatch, bert_run):
    # The released block size is the tokenizer's maximum, i.e. the model's position limit
    # (512 for mBERT), not the length the source run recorded (16 here).
    assert _stage_one(monkeypatch, bert_run, steps=2, batch_size=4)[1] == 32
    assert adapter.RELEASED_SEQUENCE_LENGTH == 512


def test_task_adapter_trains_as_adapterhubs_command_by_default(monkeypatch, bert_run):
    seen = {}

    def stop(model, *args, **kwargs):
        seen.update(kwargs, optimizer=model.optimizer)
        raise _Stopped

    monkeypatch.setattr(SequenceClassifier, "fit", stop)
    with open(bert_run / "train.tsv", "w", encoding="utf-8") as handle:
        handle.writelines(f"{text}\t{label}\n" for text, label in
                          [("a good film", "pos"), ("it was bad", "neg")] * 20)
    with pytest.raises(_Stopped):
        finetune(str(bert_run / "run"), str(bert_run / "train.tsv"), str(bert_run / "task"),
                 task_adapter=True)
    # AdapterHub's command: --num_train_epochs 10.0 --per_device_train_batch_size 32.
    assert (seen["epochs"], seen["batch_size"]) == (10, 32)
    # 40 examples in batches of 32: 2 updates an epoch, 20 in all (Trainer's t_total).
    _assert_trainer_defaults(seen["optimizer"], 1e-4, 20)


def _trainer_adamw_updates(weights, gradients, peak):
    """transformers @6303b5a's Trainer step in numpy: clip_grad_norm_(max_norm 1.0) over every
    gradient, then its AdamW (eps added to sqrt(v), bias-corrected step size, no decay) at
    the linear rate of `_trainer_linear_rate` over len(gradients) updates."""
    import math

    import numpy as np

    weights = [w.copy() for w in weights]
    first, second = [np.zeros_like(w) for w in weights], [np.zeros_like(w) for w in weights]
    total = len(gradients)
    for t, grads in enumerate(gradients):
        norm = math.sqrt(sum(float((g ** 2).sum()) for g in grads))
        grads = [g * min(1.0, 1.0 / (norm + 1e-6)) for g in grads]
        size = _trainer_linear_rate(peak, total, t) * math.sqrt(1 - 0.999 ** (t + 1)) / (
            1 - 0.9 ** (t + 1))
        for i, g in enumerate(grads):
            first[i] = 0.9 * first[i] + 0.1 * g
            second[i] = 0.999 * second[i] + 0.001 * g ** 2
            weights[i] = weights[i] - size * first[i] / (np.sqrt(second[i]) + 1e-8)
    return weights


def test_adapter_optimizer_steps_as_trainers_clipped_adamw():
    import keras
    import numpy as np

    from keras_ctx.commands.adapter_stack import adapter_optimizer

    rng = np.random.default_rng(0)
    start = [rng.normal(size=(4, 3)), rng.normal(size=(3,))]
    gradients = [[rng.normal(0, 2, size=w.shape) for w in start] for _ in range(6)]  # norms > 1
    expected = _trainer_adamw_updates(start, gradients, 1e-2)
    variables = [keras.Variable(w.astype("float32")) for w in start]
    optimizer = adapter_optimizer(1e-2, 6)
    for grads in gradients:
        optimizer.apply([keras.ops.convert_to_tensor(g.astype("float32")) for g in grads],
                        variables)
    for variable, want, first in zip(variables, expected, start):
        assert np.abs(want - first).max() > 1e-2  # the weights moved
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), want, atol=1e-6)

"""keras_ctx.optimizers.bert_adamw: BERT's AdamW (Devlin et al. 2019; its optimization.py)."""

import keras
import numpy as np

import keras_ctx


def test_bert_adamw_decays_weights_but_not_biases_or_norms():
    backbone = keras_ctx.models.BertBackbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                             hidden_size=8, intermediate_size=16,
                                             max_sequence_length=16)
    t5 = keras_ctx.models.T5Backbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                     hidden_size=8, intermediate_size=16)
    variables = backbone.trainable_variables + t5.trainable_variables
    optimizer = keras_ctx.optimizers.bert_adamw(0.1)
    config = optimizer.get_config()
    assert (config["weight_decay"], config["beta_1"], config["beta_2"], config["epsilon"]) == (
        0.01, 0.9, 0.999, 1e-6)
    for v in variables:  # nonzero everywhere, so that decay shows
        v.assign(np.full(v.shape, 2.0, "float32"))
    # Zero gradients: Adam moves nothing, so all that changes is the decoupled decay.
    optimizer.apply([keras.ops.zeros(v.shape, "float32") for v in variables], variables)
    moved = {}
    for v in variables:
        value = np.unique(keras.ops.convert_to_numpy(v))
        assert len(value) == 1, v.path
        moved[v.path] = float(value[0])
    decayed = 2.0 * (1 - 0.1 * 0.01)
    undecayed = [p for p, value in moved.items() if value == 2.0]
    assert all(np.isclose(value, decayed) for p, value in moved.items() if p not in undecayed)
    names = {p.rsplit("/", 1)[-1] for p in undecayed}
    assert names == {"bias", "gamma", "beta", "scale", "relative_attention_bias"}, names
    assert any(p.endswith("embeddings") for p in moved if p not in undecayed)
    assert any(p.endswith("kernel") for p in moved if p not in undecayed)


def _peak(made):
    """The peak rate of a 1000-step run's optimizer (the warm-up ends at step 100)."""
    schedule = made._learning_rate
    if not callable(schedule):
        return float(schedule)
    return max(float(schedule(step)) for step in (99, 100, 101))


def test_each_family_pretrains_with_its_papers_optimizer():
    from keras_ctx import families
    from keras_ctx.commands.pretrain import optimizer

    from keras_ctx.common import compat

    kernel, bias, gamma = (keras.Variable(np.ones(2), name=n) for n in ("kernel", "bias", "gamma"))
    # What each family compiles with: its recipe's paper's settings, written beside the
    # recipe in keras_ctx/optimizers.py (which names each source).
    recipes = sorted(n for n in families.names() if families.get(n).dataset is not None)
    for name in recipes:
        made = optimizer(None, 1000, families.get(name), 128)
        paper = (families.get(name).optimizer or keras_ctx.optimizers.bert_recipe).published
        kind, beta_2, epsilon, decay, clip, rate = (
            paper.kind, paper.beta_2, paper.epsilon, paper.weight_decay,
            paper.global_clipnorm, paper.default_rate)
        assert type(made).__name__ == kind, name
        assert (getattr(made, "beta_2", None), getattr(made, "epsilon", None),
                made.weight_decay, made.global_clipnorm) == (beta_2, epsilon, decay, clip), name
        assert made.clipnorm is None, name  # a global norm, never each variable's alone
        np.testing.assert_allclose(_peak(made), rate, rtol=1e-6, err_msg=name)
        if decay:  # biases and norms are never decayed
            decays = compat.bound(made, "use_weight_decay")
            assert decays(kernel) and not decays(bias) and not decays(gamma), name
    # T5's rate is Adafactor's relative step: 1 / sqrt(max(n, 10^4)) (Raffel et al. 2020).
    t5 = optimizer(None, 1000, families.get("t5"), 128)
    assert t5.relative_step
    # ELMo: Adagrad's accumulators start at 1.0 (bilm-tf).
    assert optimizer(None, 10, families.get("elmo"), 128).initial_accumulator_value == 1.0
    # --learning-rate wins over every default.
    for name in ("bert", "t5", "elmo"):
        np.testing.assert_allclose(_peak(optimizer(5e-4, 1000, families.get(name), 128)), 5e-4,
                                   rtol=1e-6, err_msg=name)


def test_xlm_pretrains_with_adam_and_its_inverse_square_root_warmup():
    from keras_ctx import families
    from keras_ctx.commands.pretrain import optimizer
    from keras_ctx.models import presets

    # XLM README: --optimizer adam_inverse_sqrt,beta1=0.9,beta2=0.98,lr=0.0001; xlm/optim.py
    # AdamInverseSqrtWithWarmup: 1e-7 + t (lr - 1e-7) / 4000 for t < 4000, then
    # lr sqrt(4000 / t), t counted from 0. By hand at lr 1e-4:
    expected = {0: 1e-7, 1: 1.24975e-7, 2000: 5.005e-5, 4000: 1e-4, 16000: 5e-5}
    record = presets.pretraining("xlm-mlm-enfr-1024")
    assert (record.learning_rate, record.warmup_steps) == (1e-4, 4000)
    made = optimizer(record.learning_rate, 100_000, families.get("xlm"), 1024)
    assert type(made).__name__ == "Adam" and (made.beta_1, made.beta_2) == (0.9, 0.98)
    assert made.global_clipnorm == 5.0 and made.weight_decay is None
    schedule = made._learning_rate
    assert schedule.warmup_steps == record.warmup_steps
    rates = [float(schedule(step)) for step in expected]
    np.testing.assert_allclose(rates, list(expected.values()), rtol=1e-5)
    # Without --learning-rate: the paper's 1e-4 at XLM's widths; a short run warms up
    # over 10% of its updates (100 of 1000), then decays by the inverse square root.
    short = optimizer(None, 1000, families.get("xlm"), 1024)._learning_rate
    np.testing.assert_allclose([float(short(s)) for s in (0, 100, 400)],
                               [1e-7, 1e-4, 5e-5], rtol=1e-5)

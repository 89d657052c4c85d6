"""Optimizers with the settings of the papers that pretrained the models, and the one each
family's `keras-ctx pretrain` recipe compiles with (`Family.optimizer`)."""

import dataclasses
from typing import Optional

import keras

from keras_ctx.common import validation
from keras_ctx.schedules import (WARMUP_FRACTION, XLM_WARMUP_STEPS, InverseSqrtWithWarmup,
                                 WarmupThenDecay)

# Variables that BERT's AdamWeightDecayOptimizer leaves undecayed: every bias and the
# LayerNorm parameters (Keras names: gamma, beta; our RMS norms': scale). Matched as
# substrings of the variable's name, as Keras' exclude_from_weight_decay does.
NO_DECAY = ("bias", "gamma", "beta", "scale")


def bert_adamw(learning_rate, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               **kwargs):
    """AdamW as BERT pretrained (Devlin et al. 2019, Appendix A.2; its optimization.py).

    Decoupled weight decay 0.01 (Loshchilov & Hutter 2019), not applied to biases or
    LayerNorm parameters, beta_1 0.9, beta_2 0.999, epsilon 1e-6. Keras' own default
    AdamW instead decays every weight (LayerNorm and biases too) by 0.004.

    Args:
        learning_rate: a float or a `keras.optimizers.schedules` schedule (BERT: 1e-4
            with 10k warmup steps, then linear decay).
        weight_decay, beta_1, beta_2, epsilon: BERT's values by default.
        **kwargs: passed to `keras.optimizers.AdamW` (e.g. `global_clipnorm=1.0`, BERT's).

    Returns:
        A `keras.optimizers.AdamW`.

    Example:
    >>> pretrainer.compile(optimizer=keras_ctx.optimizers.bert_adamw(1e-4), jit_compile=True)
    """
    # Keras takes a negative decay or a beta of 1 without a word (and trains nowhere).
    optimizer = keras.optimizers.AdamW(
        learning_rate, weight_decay=validation.non_negative_number("weight_decay", weight_decay),
        beta_1=validation.rate("beta_1", beta_1), beta_2=validation.rate("beta_2", beta_2),
        epsilon=validation.positive_number("epsilon", epsilon), **kwargs)
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer


# --- what `keras-ctx pretrain` compiles each family with (Family.optimizer) ------------------
#
# Each takes (learning_rate, steps, hidden_size): the run's --learning-rate (None: the
# default below), its number of updates and the backbone's width, and returns the
# optimizer of the family's paper. The peak rates of the papers are for their model
# sizes and batches of thousands of sequences; a run without --learning-rate uses
# 1e-3 for a hidden size up to 256 and 1e-4 above, except where the optimizer's own
# scale differs (ELMo's Adagrad, T5's Adafactor).

@dataclasses.dataclass(frozen=True)
class Published:
    """What a recipe's paper sets, which the tests check the built optimizer against:
    Keras' class name, beta_2, epsilon, weight decay (never on biases and norms), global
    clip norm, and the peak rate without --learning-rate at hidden size 128."""

    kind: str
    beta_2: Optional[float] = 0.999
    epsilon: Optional[float] = 1e-6
    weight_decay: Optional[float] = 0.01
    global_clipnorm: Optional[float] = 1.0
    default_rate: float = 1e-3


def published(**settings):
    """Records `Published(**settings)` on a recipe as its `published` attribute."""
    def record(recipe):
        recipe.published = Published(**settings)
        return recipe

    return record


def _peak_rate(learning_rate, hidden_size):
    """The run's --learning-rate, or the default for `hidden_size` (see above)."""
    return learning_rate or (1e-3 if hidden_size <= 256 else 1e-4)


def _warmup_then_decay(learning_rate, steps, hidden_size):
    """BERT's schedule over `steps` at the run's peak rate (the default for `hidden_size`)."""
    return WarmupThenDecay.for_steps(_peak_rate(learning_rate, hidden_size), steps)


@published(kind="AdamW")
def bert_recipe(learning_rate, steps, hidden_size):
    """BERT (Devlin et al. 2019, A.2): AdamW (`bert_adamw`), 10% warm-up then linear decay,
    gradients clipped to a global norm of 1.0 (its optimization.py's clip_by_global_norm;
    Keras' `clipnorm` would clip each variable's gradient alone). ELECTRA (Clark et al. 2020,
    Table 6), XLNet (Yang et al. 2019, Table 7: epsilon 1e-6, decay 0.01, linear decay) and
    SpanBERT (Joshi et al. 2020, section 4.1) train with the same settings."""
    return bert_adamw(_warmup_then_decay(learning_rate, steps, hidden_size),
                      global_clipnorm=1.0)


@published(kind="AdamW", beta_2=0.98)
def roberta_recipe(learning_rate, steps, hidden_size):
    """RoBERTa (Liu et al. 2019, section 3.1 and Table 9): AdamW with beta_2 0.98 (for
    stability with large batches), epsilon 1e-6, weight decay 0.01; BERT's warm-up and
    linear decay. BART follows RoBERTa's pretraining set-up (Lewis et al. 2020, section 5)."""
    return bert_adamw(_warmup_then_decay(learning_rate, steps, hidden_size),
                      beta_2=0.98, global_clipnorm=1.0)


@published(kind="AdamW", epsilon=1e-8)
def gpt_recipe(learning_rate, steps, hidden_size):
    """GPT (Radford et al. 2018, section 4.1): Adam with "a modified version of L2
    regularization ... w = 0.01 on all non bias or gain weights" (decoupled weight decay,
    finetune-transformer-lm's `--l2 0.01 --e 1e-8`), beta_2 0.999, epsilon 1e-8. GPT-2
    keeps GPT's optimisation (Radford et al. 2019). Warm-up then linear decay here (the
    paper anneals with a cosine after 2000 warm-up steps)."""
    return bert_adamw(_warmup_then_decay(learning_rate, steps, hidden_size),
                      epsilon=1e-8, global_clipnorm=1.0)


@published(kind="AdamW", beta_2=0.95, epsilon=1e-8, weight_decay=0.1)
def gpt3_recipe(learning_rate, steps, hidden_size):
    """GPT-3 (Brown et al. 2020, Appendix B): Adam beta_1 0.9, beta_2 0.95, epsilon 1e-8,
    weight decay 0.1, gradients clipped to global norm 1.0 (GPT-Neo trained the same way)."""
    return bert_adamw(_warmup_then_decay(learning_rate, steps, hidden_size),
                      weight_decay=0.1, beta_2=0.95, epsilon=1e-8, global_clipnorm=1.0)


@published(kind="Lamb")
def albert_recipe(learning_rate, steps, hidden_size):
    """ALBERT (Lan et al. 2020, section 4.1): LAMB (You et al. 2019) with BERT's betas,
    epsilon 1e-6 and weight decay 0.01 off biases and LayerNorm (albert's lamb_optimizer.py);
    BERT's warm-up, linear decay and global-norm clip 1.0 (albert's optimization.py).
    Keras' Lamb decays the weights outside the trust ratio (decoupled), where albert's
    adds the decay to the update inside it."""
    optimizer = keras.optimizers.Lamb(
        _warmup_then_decay(learning_rate, steps, hidden_size), beta_1=0.9,
        beta_2=0.999, epsilon=1e-6, weight_decay=0.01, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer


T5_LEARNING_RATE = 0.01  # T5: 1 / sqrt(max(n, 10^4)), i.e. 0.01 for the first 10^4 steps


@published(kind="Adafactor", beta_2=None, epsilon=None, weight_decay=None,
           global_clipnorm=None, default_rate=T5_LEARNING_RATE)
def t5_recipe(learning_rate, steps, hidden_size):
    """T5 (Raffel et al. 2020, section 3.1.2): Adafactor (Shazeer & Stern 2018) with the
    "inverse square root" schedule 1 / sqrt(max(n, 10^4)). Keras' Adafactor with
    `relative_step` caps a constant rate at 1 / sqrt(n): at 0.01 that is T5's schedule."""
    return keras.optimizers.Adafactor(learning_rate or T5_LEARNING_RATE, relative_step=True)


ELMO_LEARNING_RATE = 0.2


@published(kind="Adagrad", beta_2=None, epsilon=1e-7, weight_decay=None,
           global_clipnorm=10.0, default_rate=ELMO_LEARNING_RATE)
def elmo_recipe(learning_rate, steps, hidden_size):
    """ELMo (Peters et al. 2018; bilm-tf's training.py): Adagrad at a constant 0.2 with
    initial accumulator 1.0, gradients clipped to global norm 10."""
    return keras.optimizers.Adagrad(learning_rate or ELMO_LEARNING_RATE,
                                    initial_accumulator_value=1.0, global_clipnorm=10.0)


@published(kind="Adam", beta_2=0.98, epsilon=1e-8, weight_decay=None, global_clipnorm=5.0)
def xlm_recipe(learning_rate, steps, hidden_size):
    """XLM (Lample & Conneau 2019; facebookresearch/XLM README's MLM/TLM commands:
    `--optimizer adam_inverse_sqrt,beta1=0.9,beta2=0.98,lr=0.0001`): Adam (no weight
    decay, epsilon 1e-8: xlm/optim.py's defaults) with `InverseSqrtWithWarmup`, gradients
    clipped to a global norm of 5 (train.py's --clip_grad_norm default). The warm-up is
    XLM's 4000 updates, or 10% of a shorter run's (keras_ctx's own: a run under 40,000
    updates would otherwise spend most of it warming up)."""
    warmup = max(1, min(XLM_WARMUP_STEPS, int(steps * WARMUP_FRACTION)))
    return keras.optimizers.Adam(
        InverseSqrtWithWarmup(_peak_rate(learning_rate, hidden_size), warmup),
        beta_1=0.9, beta_2=0.98, epsilon=1e-8, global_clipnorm=5.0)


COVE_LEARNING_RATE = 1.0


@published(kind="SGD", beta_2=None, epsilon=None, weight_decay=None, global_clipnorm=5.0,
           default_rate=COVE_LEARNING_RATE)
def cove_recipe(learning_rate, steps, hidden_size):
    """CoVe (McCann et al. 2017; salesforce/cove OpenNMT-py/train.py @9a0d90b, the defaults
    its README's commands keep): plain SGD at 1.0, gradients clipped to a global norm of 5
    (`-max_grad_norm 5`, onmt/Optim.py's clip_grad_norm over every parameter). train.py
    halves the rate after an epoch whose validation perplexity rose; `keras-ctx pretrain`
    holds no validation set, so the rate stays constant (our choice)."""
    return keras.optimizers.SGD(learning_rate or COVE_LEARNING_RATE, global_clipnorm=5.0)

"""Optimizers with the settings of the papers that pretrained the models."""

import keras

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
        **kwargs: passed to `keras.optimizers.AdamW` (e.g. `clipnorm=1.0`, BERT's).

    Returns:
        A `keras.optimizers.AdamW`.

    Example:
    >>> pretrainer.compile(optimizer=keras_ctx.optimizers.bert_adamw(1e-4), jit_compile=True)
    """
    optimizer = keras.optimizers.AdamW(learning_rate, weight_decay=weight_decay, beta_1=beta_1,
                                       beta_2=beta_2, epsilon=epsilon, **kwargs)
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY))
    return optimizer

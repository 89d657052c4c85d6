"""Every learning-rate schedule keras_ctx ships, registered and serializable.

Each is a `keras.optimizers.schedules.LearningRateSchedule` registered under
the "keras_ctx" package with a `get_config` that holds every constructor
argument, so a model compiled with one saves to a `.keras` file with its
optimizer and reloads with the same rates.

- `WarmupThenDecay`: linear warm-up, then linear decay to 0 (BERT's schedule,
  what `keras-ctx pretrain` trains with).
- `SlantedTriangular`: ULMFiT's STLR (Howard & Ruder 2018, Eq. 3).
- `ScaledLearningRate`: any rate times a per-update scale variable
  (AWD-LSTM's variable-length BPTT).
- `CvtLearningRate`: cvt_text's warm-up then inverse square-root decay.
- `InverseSqrtWithWarmup`: XLM's linear warm-up from a small rate, then
  inverse square-root decay.
"""

import math

import keras
from keras import ops

from keras_ctx.common import compat, validation

LearningRateSchedule = keras.optimizers.schedules.LearningRateSchedule

# Devlin et al. 2019 (BERT, App. A.2): warm-up over the first 10% of the steps.
WARMUP_FRACTION = 0.1
# Howard & Ruder 2018, Sec. 4 (hyperparameters): cut_frac 0.1, ratio 32.
STLR_CUT_FRACTION = 0.1
STLR_RATIO = 32.0
# cvt_text configure.py (Clark et al. 2018).
CVT_LEARNING_RATE = 0.5
CVT_WARM_UP_STEPS = 5000
CVT_LEARNING_RATE_DECAY = 0.005
# facebookresearch/XLM xlm/optim.py `AdamInverseSqrtWithWarmup` defaults.
XLM_WARMUP_STEPS = 4000
XLM_WARMUP_INITIAL_RATE = 1e-7


def _positive_int(name, value):
    # A whole float counts (a warm-up computed as a share of the steps); the check itself
    # is the one checks module's.
    whole = int(value) if isinstance(value, float) and value.is_integer() else value
    return validation.positive_int(name, whole)


@keras.saving.register_keras_serializable(package="keras_ctx")
class WarmupThenDecay(LearningRateSchedule):
    """Linear warm-up to `learning_rate`, then linear decay to `end_learning_rate`.

        eta_t = eta * (t + 1) / W                                   if t < W
                eta_end + (eta - eta_end) * (1 - min(t - W, D) / D)  otherwise

    with W = `warmup_steps`, D = `decay_steps` and t the update count from 0
    (BERT's schedule, Devlin et al. 2019; W is 10% of the steps there).

    Args:
        learning_rate: the peak rate eta.
        warmup_steps: W, updates spent rising (>= 1).
        decay_steps: D, updates spent falling after the warm-up (>= 1).
        end_learning_rate: the rate after W + D updates.

    Example:
    >>> schedule = WarmupThenDecay.for_steps(1e-4, total_steps=10_000)
    >>> optimizer = keras.optimizers.AdamW(schedule, weight_decay=0.01)
    """

    def __init__(self, learning_rate, warmup_steps, decay_steps, end_learning_rate=0.0):
        self.learning_rate = validation.positive_number("learning_rate", learning_rate)
        self.warmup_steps = _positive_int("warmup_steps", warmup_steps)
        self.decay_steps = _positive_int("decay_steps", decay_steps)
        self.end_learning_rate = validation.non_negative_number("end_learning_rate",
                                                                end_learning_rate)

    @classmethod
    def for_steps(cls, learning_rate, total_steps, warmup_fraction=WARMUP_FRACTION):
        """The schedule of a `total_steps` run: warm-up over `warmup_fraction` of it."""
        total_steps = _positive_int("total_steps", total_steps)
        warmup = max(1, int(total_steps * warmup_fraction))
        return cls(learning_rate, warmup, max(1, total_steps - warmup))

    def __call__(self, step):
        t = ops.cast(step, "float32")
        warmup = float(self.warmup_steps)
        rising = self.learning_rate * (t + 1.0) / warmup
        done = ops.minimum(ops.maximum(t - warmup, 0.0), float(self.decay_steps))
        falling = self.end_learning_rate + (self.learning_rate - self.end_learning_rate) * (
            1.0 - done / float(self.decay_steps))
        return ops.where(t < warmup, rising, falling)

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps, "end_learning_rate": self.end_learning_rate}


@keras.saving.register_keras_serializable(package="keras_ctx")
class SlantedTriangular(LearningRateSchedule):
    """Slanted triangular learning rates (Howard & Ruder 2018, Eq. 3).

        cut   = floor(T * cut_frac)
        p     = t / cut                                   if t < cut
                1 - (t - cut) / (cut * (1 / cut_frac - 1)) otherwise
        eta_t = eta_max * (1 + p * (ratio - 1)) / ratio

    `t` is the optimizer's update count (0 for the first update). p reaches 0
    at t = cut / cut_frac, which is T when T * cut_frac is an integer and
    earlier otherwise (floor); from there the rate stays at eta_max / ratio
    (p is clipped at 0) instead of turning negative.

    Args:
        max_learning_rate: eta_max.
        total_steps: T, the number of updates of the whole fine-tuning run.
        cut_fraction: the fraction of T spent increasing (0.1 in the paper).
        ratio: how much smaller the lowest rate is than eta_max (32).

    Example:
    >>> schedule = SlantedTriangular(0.01, total_steps=1000)
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.7, beta_2=0.99)
    """

    def __init__(self, max_learning_rate, total_steps, cut_fraction=STLR_CUT_FRACTION,
                 ratio=STLR_RATIO):
        max_learning_rate = validation.positive_number("max_learning_rate", max_learning_rate)
        total_steps = _positive_int("total_steps", total_steps)
        cut_fraction = validation.open_fraction("cut_fraction", cut_fraction)
        ratio = validation.number_at_least("ratio", ratio, 1)
        cut = math.floor(total_steps * cut_fraction)
        if cut < 1:
            raise ValueError(
                f"total_steps * cut_fraction = {total_steps} * {cut_fraction} < 1 leaves no "
                "increasing phase: train for more steps or raise cut_fraction.")
        self.max_learning_rate = float(max_learning_rate)
        self.total_steps = int(total_steps)
        self.cut_fraction = float(cut_fraction)
        self.ratio = float(ratio)
        self.cut = cut

    def __call__(self, step):
        t = ops.cast(step, "float32")
        cut = float(self.cut)
        rising = t / cut
        falling = 1.0 - (t - cut) / (cut * (1.0 / self.cut_fraction - 1.0))
        p = ops.maximum(ops.where(t < cut, rising, falling), 0.0)
        return self.max_learning_rate * (1.0 + p * (self.ratio - 1.0)) / self.ratio

    def get_config(self):
        return {"max_learning_rate": self.max_learning_rate, "total_steps": self.total_steps,
                "cut_fraction": self.cut_fraction, "ratio": self.ratio}


@keras.saving.register_keras_serializable(package="keras_ctx")
class ScaledLearningRate(LearningRateSchedule):
    """A learning rate (float or schedule) times a scale variable set per update.

        eta_t = scale * base(t)

    The optimizer evaluates its learning rate inside `apply`, after the loss
    is computed: a model that assigns `scale` in its step rescales that very
    update, for any Keras optimizer (Adam's m / sqrt(v) step included). AWD-LSTM's
    variable-length BPTT sets scale = length / bptt (Merity et al. 2017, Sec. 4.1).
    The scale is per-update state, not configuration: a reloaded schedule
    starts at 1 until its model sets it again.

    Args:
        learning_rate: a float or a `LearningRateSchedule` (e.g. `SlantedTriangular`).
        scale: a scalar float32 `keras.Variable` (default: a new one, 1.0).

    Example:
    >>> scale = keras.Variable(1.0, trainable=False)
    >>> adam = keras.optimizers.Adam(ScaledLearningRate(1e-3, scale))
    """

    def __init__(self, learning_rate, scale=None):
        if isinstance(learning_rate, dict):
            learning_rate = keras.optimizers.schedules.deserialize(learning_rate)
        self.learning_rate = learning_rate
        # A reloaded schedule has no owner: its scale stays 1 until one is given.
        self.scale = scale if scale is not None else keras.Variable(
            1.0, dtype="float32", trainable=False, name="learning_rate_scale")

    def __call__(self, step):
        base = self.learning_rate
        if isinstance(base, LearningRateSchedule):
            base = base(step)
        return ops.cast(base, "float32") * ops.cast(self.scale, "float32")

    def get_config(self):
        base = self.learning_rate
        if isinstance(base, LearningRateSchedule):
            base = keras.optimizers.schedules.serialize(base)
        return {"learning_rate": base}


@keras.saving.register_keras_serializable(package="keras_ctx")
class CvtLearningRate(LearningRateSchedule):
    """cvt_text's learning rate: warm-up, then inverse square-root decay.

        eta_t = eta * min(t, warm_up_steps) / warm_up_steps / (1 + decay * sqrt(t))

    t is the update count from 0 (cvt_text's global_step: the first update has
    rate 0). Defaults: eta 0.5, 5000 warm-up steps, decay 0.005 (Clark et al. 2018).
    """

    def __init__(self, learning_rate=CVT_LEARNING_RATE, warm_up_steps=CVT_WARM_UP_STEPS,
                 decay=CVT_LEARNING_RATE_DECAY):
        self.learning_rate = validation.positive_number("learning_rate", learning_rate)
        self.warm_up_steps = _positive_int("warm_up_steps", warm_up_steps)
        self.decay = validation.non_negative_number("decay", decay)

    def __call__(self, step):
        t = ops.cast(step, "float32")
        warm_up = ops.minimum(t, float(self.warm_up_steps)) / float(self.warm_up_steps)
        return self.learning_rate * warm_up / (1.0 + self.decay * ops.sqrt(t))

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warm_up_steps": self.warm_up_steps,
                "decay": self.decay}


@keras.saving.register_keras_serializable(package="keras_ctx")
class InverseSqrtWithWarmup(LearningRateSchedule):
    """XLM's `AdamInverseSqrtWithWarmup` rate (facebookresearch/XLM xlm/optim.py).

        eta_t = eta_0 + t * (eta - eta_0) / W     if t < W
                eta * sqrt(W / t)                 otherwise

    with t the update count from 0 (XLM's num_updates: the first update runs at
    eta_0), W = `warmup_steps` (XLM's 4000) and eta_0 = `initial_learning_rate`
    (XLM's warmup_init_lr, 1e-7).
    """

    def __init__(self, learning_rate, warmup_steps=XLM_WARMUP_STEPS,
                 initial_learning_rate=XLM_WARMUP_INITIAL_RATE):
        self.learning_rate = validation.positive_number("learning_rate", learning_rate)
        self.warmup_steps = _positive_int("warmup_steps", warmup_steps)
        self.initial_learning_rate = validation.non_negative_number(
            "initial_learning_rate", initial_learning_rate)

    def __call__(self, step):
        t = ops.cast(step, "float32")
        warmup = float(self.warmup_steps)
        rising = self.initial_learning_rate + t * (
            self.learning_rate - self.initial_learning_rate) / warmup
        falling = self.learning_rate * ops.sqrt(warmup / ops.maximum(t, warmup))
        return ops.where(t < warmup, rising, falling)

    def get_config(self):
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "initial_learning_rate": self.initial_learning_rate}


def scale_learning_rate(optimizer, scale):
    """Makes `optimizer`'s learning rate `ScaledLearningRate(its rate, scale)` (in place).

    A rate already wrapped is rewrapped around `scale` (a reloaded model
    compiles again); a LossScaleOptimizer's inner optimizer is the one changed.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    base = compat.attribute(inner, "learning_rate")  # as given, not its current value
    if isinstance(base, ScaledLearningRate):
        base = base.learning_rate
    elif isinstance(base, keras.Variable):
        base = float(keras.ops.convert_to_numpy(base))
    elif callable(base) and not isinstance(
            base, keras.optimizers.schedules.LearningRateSchedule):
        raise ValueError("A callable learning rate cannot be rescaled per update; pass a "
                         "float or a keras LearningRateSchedule.")
    inner.learning_rate = ScaledLearningRate(base, scale)
    return optimizer

"""Scalar mix of layer representations (ELMo, Peters et al., 2018, eq. 1)."""

import keras
from keras import ops

from keras_ctx.layers import _checks

# Added to the variance before the square root in the layer norm (allennlp's
# ScalarMix; its older releases use 1e-12 for float32).
LAYER_NORM_EPSILON = 1e-12


def _first_mask(mask):
    """`mask` as Keras passes it (None, a tensor or a list of them) -> one mask."""
    if isinstance(mask, (list, tuple)):
        return next((m for m in mask if m is not None), None)
    return mask


@keras.saving.register_keras_serializable(package="keras_ctx")
class ScalarMix(keras.layers.Layer):
    """`ELMo_k = gamma * sum_j s_j h_{k,j}`, s = softmax of trainable scalars.

    Mixes `mixture_size` same-shaped representations (e.g. the layers of a
    biLM) with softmax-normalised scalar weights and a scale `gamma`
    (Peters et al., 2018, eq. 1). The softmax and the weighted sum are
    computed in float32; the output is in the compute dtype.

    With `do_layer_norm`, each input is first normalised as allennlp's
    `ScalarMix` does: one mean and one variance over all non-masked elements
    of the whole tensor (batch, time and features together), then
    `(h - mean) / sqrt(var + 1e-12)`. Masked positions do not enter the
    statistics but are normalised too (they are not zeroed). Without a mask,
    every position counts as unmasked.

    For importing allennlp weights: `scalar_parameters` is allennlp's
    `scalar_parameters` (a list of scalars) stacked, `gamma` its `gamma`.

    Args:
        mixture_size: number of representations mixed, at least 1.
        do_layer_norm: normalise each representation before mixing.
        initial_scalar_parameters: `mixture_size` initial values of the
            scalars before the softmax; defaults to zeros (uniform weights).
        trainable: as for any Keras layer (False freezes scalars and gamma).

    Call arguments:
        inputs: a list of `mixture_size` tensors of one shape (batch, time, dim).
        mask: optional (batch, time) mask, true/1 for real tokens; used by
            the layer norm only. Filled in by Keras when the inputs carry one.

    Returns:
        (batch, time, dim) in the compute dtype.

    Example:
    >>> layers = [np.random.rand(2, 7, 32).astype("float32") for _ in range(3)]
    >>> keras_ctx.layers.ScalarMix(mixture_size=3)(layers).shape
    (2, 7, 32)

    References:
        Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(
        self,
        mixture_size,
        do_layer_norm=False,
        initial_scalar_parameters=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.mixture_size = _checks.positive_int("mixture_size", mixture_size)
        self.do_layer_norm = bool(do_layer_norm)
        if initial_scalar_parameters is not None:
            try:
                initial_scalar_parameters = [float(s) for s in initial_scalar_parameters]
            except (TypeError, ValueError):
                raise ValueError(
                    "`initial_scalar_parameters` must be a list of "
                    f"`mixture_size` numbers, got {initial_scalar_parameters!r}."
                ) from None
            if len(initial_scalar_parameters) != self.mixture_size:
                raise ValueError(
                    "`initial_scalar_parameters` must hold `mixture_size` "
                    f"({self.mixture_size}) values, got "
                    f"{len(initial_scalar_parameters)}: {initial_scalar_parameters!r}."
                )
        self.initial_scalar_parameters = initial_scalar_parameters
        self.supports_masking = True

    def _check_count(self, count):
        if count != self.mixture_size:
            raise ValueError(
                f"ScalarMix was built with `mixture_size={self.mixture_size}` "
                f"but received {count} tensors; pass a list of exactly "
                f"{self.mixture_size} tensors or change `mixture_size`."
            )

    def _check_list(self, inputs):
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(
                f"ScalarMix expects a list of `mixture_size` ({self.mixture_size}) "
                f"tensors, got a single {type(inputs).__name__}."
            )
        self._check_count(len(inputs))

    def build(self, input_shape):
        if not isinstance(input_shape, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) for s in input_shape
        ):
            raise ValueError(
                f"ScalarMix expects a list of `mixture_size` ({self.mixture_size}) "
                f"tensors, got input shape {input_shape}."
            )
        self._check_count(len(input_shape))
        shapes = {tuple(s[1:]) for s in input_shape}
        if len(shapes) > 1:
            raise ValueError(
                "ScalarMix mixes tensors of one shape, got shapes "
                f"{[tuple(s) for s in input_shape]}."
            )
        initial = self.initial_scalar_parameters or [0.0] * self.mixture_size
        self.scalar_parameters = self.add_weight(
            name="scalar_parameters",
            shape=(self.mixture_size,),
            initializer=keras.initializers.Constant(initial),
            dtype="float32",
        )
        self.gamma = self.add_weight(
            name="gamma",
            shape=(),
            initializer=keras.initializers.Constant(1.0),
            dtype="float32",
        )
        self.built = True

    def _layer_norm(self, h, mask):
        # allennlp ScalarMix._do_layer_norm: statistics over all unmasked
        # elements of the whole tensor.
        if mask is None:
            mean = ops.mean(h)
            variance = ops.mean(ops.square(h - mean))
        else:
            count = ops.maximum(ops.sum(mask) * ops.cast(ops.shape(h)[-1], "float32"), 1.0)
            mean = ops.sum(h * mask) / count
            variance = ops.sum(ops.square((h - mean) * mask)) / count
        return (h - mean) / ops.sqrt(variance + LAYER_NORM_EPSILON)

    def call(self, inputs, mask=None):
        self._check_list(inputs)
        weights = ops.softmax(ops.cast(self.scalar_parameters, "float32"))
        if self.do_layer_norm:
            mask = _first_mask(mask)
            if mask is not None:
                mask = ops.cast(mask, "float32")[..., None]
        mixed = 0.0
        for j, h in enumerate(inputs):
            h = ops.cast(h, "float32")
            if self.do_layer_norm:
                h = self._layer_norm(h, mask)
            mixed = mixed + weights[j] * h
        return ops.cast(ops.cast(self.gamma, "float32") * mixed, self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        return _first_mask(mask)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mixture_size": self.mixture_size,
                "do_layer_norm": self.do_layer_norm,
                "initial_scalar_parameters": self.initial_scalar_parameters,
            }
        )
        return config

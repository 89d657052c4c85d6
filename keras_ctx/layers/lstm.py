"""LSTMs for ELMo and CoVe that compile under XLA, with a cuDNN path kept for speed.

`LSTMP` is an LSTM with an optional projection of the output/recurrent state
and optional cell and projection clipping: the cell of bilm-tf (TF1
`LSTMCell(num_units, num_proj, cell_clip, proj_clip)`, no peepholes), after
Sak et al. (2014). One step, with `[i, f, g, o]` the gates (Keras order):

    z = x_t W + h_{t-1} U + b
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)   ; clip to +-cell_clip
    m_t = sigmoid(o) * tanh(c_t)
    h_t = m_t P                                         ; clip to +-projection_clip

(`h_t = m_t` without a projection.)

Two implementations of the same math and the same weights:

- "loop": `x W + b` for all steps at once, then a scan over time of the
  recurrent step. On TensorFlow a `tf.scan` with a hand-written backward pass
  (`keras_ctx.backend.tf_lstm.recurrence`: the weight gradients as one matrix product
  over all steps, about 2x faster than autodiff of the scan,
  benchmarks/RESULTS.md); on other backends `ops.scan`, differentiated by the
  backend. Compiles under XLA (`jit_compile=True`, `jax.jit`) on CPU, GPU, TPU.
- "cudnn" (TensorFlow only): Keras' cuDNN kernel (`CudnnRNNV3`, what `keras.layers.LSTM` picks on
  GPU). Only for a plain LSTM (no projection, no cell clip) on a GPU, and it
  does NOT compile under XLA: a layer that picks it sets `supports_jit = False`,
  so `Model.compile(jit_compile=True)` falls back to non-XLA with a warning, as
  for `keras.layers.LSTM`.
- "auto" (default): "cudnn" when the configuration is eligible and a GPU is
  visible, else "loop". Use "loop" to keep XLA on a GPU.

Importing bilm-tf weights: its `W_0` is `concat([x, h]) -> [i, j, f, o]`
(j = our g) of shape (input + proj, 4 * units): split rows into `kernel` and
`recurrent_kernel`, reorder the gate columns to `[i, f, j, o]`, and add TF's
`forget_bias=1.0` to the forget part of `B`; `W_P_0` is `projection_kernel`.
"""

import keras
from keras import ops

from keras_ctx import backend
from keras_ctx.layers import _checks
from keras_ctx.backend.lstm_cell import cell

IMPLEMENTATIONS = ("auto", "loop", "cudnn")


@keras.saving.register_keras_serializable(package="keras_ctx")
class LSTMP(keras.layers.Layer):
    """LSTM with optional projection and clipping, XLA-friendly (see module doc).

    Args:
        units: size of the cell state (ELMo's "dim", 4096 in ELMo original).
        projection_dim: size of the projected output/recurrent state (512 in
            ELMo original); None for a plain LSTM.
        cell_clip: clip the cell state to [-cell_clip, cell_clip] (3 in ELMo).
        projection_clip: clip the projected state (3 in ELMo).
        reverse: run right to left. Outputs stay aligned with the inputs
            (output t summarises inputs t..T-1), unlike Keras' `go_backwards`.
        return_sequences: return (batch, time, out) instead of the last output.
        implementation: "auto", "loop" or "cudnn" (see module doc).
        kernel_initializer, recurrent_initializer: for `kernel` and
            `recurrent_kernel` (and `projection_kernel`).
        unit_forget_bias: start the forget-gate bias at 1 (TF/bilm-tf's
            `forget_bias=1.0`).

    Call arguments:
        inputs: (batch, time, features).
        mask: optional (batch, time) boolean; masked steps keep the state and
            output zeros. Right padding with `reverse=True` is handled: the
            backward pass starts at each sequence's last real token.

    Returns:
        (batch, time, projection_dim or units), or (batch, out) when
        `return_sequences=False` (the output after the last real step).

    Example:
    >>> layer = keras_ctx.layers.LSTMP(32, projection_dim=8, cell_clip=3.0)
    >>> layer(np.random.rand(2, 5, 4).astype("float32")).shape
    (2, 5, 8)

    References:
        Hochreiter & Schmidhuber, "Long Short-Term Memory", 1997.
        Sak et al., "Long Short-Term Memory Recurrent Neural Network
        Architectures for Large Scale Acoustic Modeling", 2014.
        Peters et al., "Deep contextualized word representations", 2018.
    """

    def __init__(
        self,
        units,
        projection_dim=None,
        cell_clip=None,
        projection_clip=None,
        reverse=False,
        return_sequences=True,
        implementation="auto",
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        unit_forget_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _checks.positive_int("units", units)
        self.projection_dim = _checks.optional_positive_int("projection_dim", projection_dim)
        self.cell_clip = _checks.optional_positive_number("cell_clip", cell_clip)
        self.projection_clip = _checks.optional_positive_number("projection_clip",
                                                                projection_clip)
        if self.projection_clip is not None and self.projection_dim is None:
            raise ValueError(
                "`projection_clip` needs a projection; set `projection_dim` or "
                "leave `projection_clip=None`."
            )
        self.reverse = bool(reverse)
        self.return_sequences = bool(return_sequences)
        self.implementation = _checks.one_of("implementation", implementation, IMPLEMENTATIONS)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.unit_forget_bias = bool(unit_forget_bias)
        if self.implementation == "cudnn" and not self.cudnn_eligible:
            raise ValueError(
                "implementation='cudnn' needs a plain LSTM: projection_dim=None "
                "and cell_clip=None (cuDNN has neither). Use 'loop' or 'auto'."
            )
        self._use_cudnn = self.implementation == "cudnn" or (
            self.implementation == "auto" and self.cudnn_eligible and backend.gpu_available()
        )
        if self._use_cudnn:
            # The cuDNN op has no XLA kernel (as for keras.layers.LSTM).
            self.supports_jit = False
        self.supports_masking = True

    @property
    def cudnn_eligible(self):
        return self.projection_dim is None and self.cell_clip is None

    @property
    def output_dim(self):
        return self.projection_dim or self.units

    def build(self, input_shape):
        features = input_shape[-1]
        if features is None or len(input_shape) != 3:
            raise ValueError(
                "LSTMP expects inputs (batch, time, features) with known features, "
                f"got shape {input_shape}."
            )
        units = self.units

        def bias_init(shape, dtype=None):
            bias = ops.zeros((4 * units,), dtype)
            if self.unit_forget_bias:
                bias = ops.concatenate(
                    [ops.zeros((units,)), ops.ones((units,)), ops.zeros((2 * units,))]
                )
            return ops.cast(bias, dtype)

        self.kernel = self.add_weight(
            name="kernel", shape=(features, 4 * units), initializer=self.kernel_initializer
        )
        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel",
            shape=(self.output_dim, 4 * units),
            initializer=self.recurrent_initializer,
        )
        self.bias = self.add_weight(name="bias", shape=(4 * units,), initializer=bias_init)
        self.projection_kernel = None
        if self.projection_dim is not None:
            self.projection_kernel = self.add_weight(
                name="projection_kernel",
                shape=(units, self.projection_dim),
                initializer=self.kernel_initializer,
            )
        self.built = True

    def _step(self, state, inputs, recurrent_kernel=None):
        """One step (autodiff) for models that run their own loop (CoVe's decoder):
        `state` (h, c), `inputs` (x W + b (batch, 4u), mask (batch, 1)), float32."""
        u = ops.cast(self.recurrent_kernel if recurrent_kernel is None else recurrent_kernel,
                     self.compute_dtype)
        p = (None if self.projection_kernel is None
             else ops.cast(self.projection_kernel, self.compute_dtype))
        h, c, *_ = cell(state[0], state[1], inputs[0], inputs[1], u, p, self.cell_clip,
                        self.projection_clip)
        return h, c

    # -- the loop: XLA-compilable, with a hand-written backward pass ---------
    def _loop(self, inputs, mask, recurrent_kernel=None, initial_state=None):
        batch = ops.shape(inputs)[0]
        w = ops.cast(self.kernel, self.compute_dtype)
        xw = ops.matmul(ops.cast(inputs, self.compute_dtype), w)
        xw = ops.cast(xw, "float32") + ops.cast(self.bias, "float32")
        if mask is None:
            m = ops.ones(ops.shape(inputs)[:2], "float32")
        else:
            m = ops.cast(mask, "float32")
        xw_t = ops.transpose(xw, (1, 0, 2))  # time major
        m_t = ops.transpose(m, (1, 0))[..., None]
        if initial_state is None:
            init = (
                ops.zeros((batch, self.output_dim), "float32"),
                ops.zeros((batch, self.units), "float32"),
            )
        else:
            init = tuple(ops.cast(s, "float32") for s in initial_state)
        u = ops.cast(self.recurrent_kernel if recurrent_kernel is None else recurrent_kernel,
                     self.compute_dtype)
        p = (None if self.projection_kernel is None
             else ops.cast(self.projection_kernel, self.compute_dtype))
        hs, cs = backend.recurrence(xw_t, m_t, init[0], init[1], u, p, self.cell_clip,
                            self.projection_clip, self.reverse)
        outputs = ops.transpose(hs * m_t, (1, 0, 2))  # zeros at masked steps
        last = 0 if self.reverse else -1  # masked steps keep the state: the final one
        final_state = (hs[last], cs[last])
        if self.return_sequences:
            return outputs, final_state
        return ops.transpose(hs, (1, 0, 2))[:, last], final_state

    def _cudnn(self, inputs, mask, recurrent_kernel=None, initial_state=None):
        if initial_state is None:
            zeros = ops.zeros((ops.shape(inputs)[0], self.units), inputs.dtype)
            initial_state = (zeros, zeros)
        h0, c0 = (ops.cast(s, inputs.dtype) for s in initial_state)
        last, outputs, final_state = backend.cudnn_lstm()(
            inputs,
            h0,
            c0,
            mask,
            kernel=self.kernel,
            recurrent_kernel=(self.recurrent_kernel if recurrent_kernel is None
                              else recurrent_kernel),
            bias=self.bias,
            activation=keras.activations.tanh,
            recurrent_activation=keras.activations.sigmoid,
            return_sequences=True,
            go_backwards=self.reverse,
        )
        if self.reverse:
            # Keras' go_backwards returns outputs in reversed time order.
            outputs = ops.flip(outputs, axis=1)
        if mask is not None:
            outputs = outputs * ops.cast(mask, outputs.dtype)[..., None]
        final_state = tuple(ops.cast(s, "float32") for s in final_state)
        return (outputs if self.return_sequences else last), final_state

    def call(self, inputs, mask=None, initial_state=None, return_state=False):
        """`initial_state`: optional (h, c), each (batch, out) / (batch, units),
        zeros if None. With `return_state`, returns (outputs, (h, c)): the state
        after the last step (float32), to start the next segment of a stream.
        """
        return self._run(inputs, mask, None, initial_state, return_state)

    def _run(self, inputs, mask, recurrent_kernel=None, initial_state=None,
             return_state=False):
        result = None
        if self._use_cudnn:
            try:
                result = self._cudnn(inputs, mask, recurrent_kernel, initial_state)
            except NotImplementedError:
                pass
        if result is None:
            result = self._loop(inputs, mask, recurrent_kernel, initial_state)
        outputs, final_state = result
        outputs = ops.cast(outputs, self.compute_dtype)
        return (outputs, final_state) if return_state else outputs

    def compute_mask(self, inputs, mask=None):
        return mask if self.return_sequences else None

    def compute_output_shape(self, input_shape):
        if self.return_sequences:
            return tuple(input_shape[:2]) + (self.output_dim,)
        return (input_shape[0], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "projection_dim": self.projection_dim,
                "cell_clip": self.cell_clip,
                "projection_clip": self.projection_clip,
                "reverse": self.reverse,
                "return_sequences": self.return_sequences,
                "implementation": self.implementation,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(
                    self.recurrent_initializer
                ),
                "unit_forget_bias": self.unit_forget_bias,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class WeightDropLSTM(LSTMP):
    """An LSTM with DropConnect on its hidden-to-hidden weights (AWD-LSTM).

    In training, each entry of `recurrent_kernel` (U) is zeroed with
    probability `weight_dropout` and the rest scaled by 1 / (1 - p), once per
    call: the same dropped U at every time step of the batch (Merity et al.
    2017, Sec. 2, "weight-dropped LSTM"; Wan et al. 2013, DropConnect). The
    input-to-hidden weights are not dropped. The loop and cuDNN paths both
    take the dropped U, so the cuDNN kernel stays usable.

    Args:
        units: hidden size.
        weight_dropout: DropConnect rate on U (0.5 in ULMFiT, Howard & Ruder
            2018, Sec. 4).
        seed: optional seed of the DropConnect masks.
        **kwargs: as `LSTMP` (no projection or clipping in AWD-LSTM).

    Call arguments:
        inputs: (batch, time, features).
        mask: optional (batch, time) boolean.
        training: drop weights only when True.

    Example:
    >>> layer = keras_ctx.layers.WeightDropLSTM(32, weight_dropout=0.5)
    >>> layer(np.random.rand(2, 5, 4).astype("float32"), training=True).shape
    (2, 5, 32)

    References:
        Merity et al., "Regularizing and Optimizing LSTM Language Models", 2017.
    """

    def __init__(self, units, weight_dropout=0.0, seed=None, **kwargs):
        super().__init__(units, **kwargs)
        self.weight_dropout = _checks.rate("weight_dropout", weight_dropout)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, mask=None, training=None, initial_state=None,
             return_state=False):
        kernel = None
        if training and self.weight_dropout > 0:
            kernel = keras.random.dropout(ops.convert_to_tensor(self.recurrent_kernel),
                                          self.weight_dropout,
                                          seed=self.seed_generator)
        return self._run(inputs, mask, kernel, initial_state, return_state)

    def get_config(self):
        return dict(super().get_config(), weight_dropout=self.weight_dropout, seed=self.seed)

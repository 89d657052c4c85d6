"""Bottleneck adapters (Houlsby et al. 2019; Pfeiffer et al. 2020, MAD-X) and invertible adapters.

    A(h) = U f(D h)            D: hidden -> hidden / reduction_factor, U back, f = ReLU
    Houlsby:  out = LN(x + y + A(y))      y = sublayer output (attention and FFN)
    Pfeiffer: r = x + y, h = LN(r), out = LN(r + A(h))   (FFN only; MAD-X Eq. 1)
    MAD-X stack: z_0 = h, z_k = r + A_k(z_{k-1})  (language adapter, then task adapter)
    Invertible (NICE coupling, MAD-X Sec. 3.2) on the embedding output e = [e1, e2]:
        o1 = e1 + F(e2), o2 = e2 + G(o1); inverse e2 = o2 - G(o1), e1 = o1 - F(e2)

`BottleneckAdapter` and `InvertibleAdapter` are plain layers for anyone's
block. `add_adapter(model, name, config)` inserts adapters into every
keras_ctx transformer block of a built model (BERT, RoBERTa, ALBERT, ELECTRA,
GPT, GPT-2, T5, BART, XLM): it attaches an `AdapterSlot` to the block, which
then takes over the block's residual add & norm at that place. A block
without adapters is unchanged (no attribute, no weights), so existing
configs, weights and .keras files are untouched. Adapters are zero-ish at
initialisation (Houlsby's near-identity init), so an adapted pretrained model
starts where the plain one is.
"""

import keras
from keras import ops

from keras_ctx.common import compat, validation
from keras_ctx.layers import _checks, activations

PLACEMENTS = ("houlsby", "pfeiffer")
PLACES = ("attention", "cross_attention", "feedforward")

# Houlsby et al. 2019: two adapters per layer, after the attention output
# projection and after the FFN. Pfeiffer et al. 2020 (MAD-X): one after the
# FFN; reduction factor 16 for task adapters, 2 for language adapters, which
# also carry an invertible adapter (reduction factor 2) on the embeddings.
ADAPTER_CONFIGS = {
    "houlsby": {"placement": "houlsby", "places": ["attention", "feedforward"],
                "reduction_factor": 16, "invertible": False},
    "pfeiffer": {"placement": "pfeiffer", "places": ["feedforward"],
                 "reduction_factor": 16, "invertible": False},
    "madx_task": {"placement": "pfeiffer", "places": ["feedforward"],
                  "reduction_factor": 16, "invertible": False},
    "madx_language": {"placement": "pfeiffer", "places": ["feedforward"],
                      "reduction_factor": 2, "invertible": True,
                      "invertible_reduction_factor": 2},
}
CONFIG_KEYS = ("placement", "places", "reduction_factor", "invertible",
               "invertible_reduction_factor", "activation")


def adapter_config(config="pfeiffer", **overrides):
    """A full adapter config dict from a name in ADAPTER_CONFIGS or a dict, plus overrides."""
    owner = f"adapter config {config!r}" if isinstance(config, str) else "an adapter config"
    if isinstance(config, str):
        config = ADAPTER_CONFIGS[validation.one_of("config", config, ADAPTER_CONFIGS)]
    merged = {"activation": "relu", "invertible": False, "invertible_reduction_factor": 2}
    merged.update(config)
    merged.update(overrides)
    validation.check_config_keys(owner, CONFIG_KEYS, merged, "key")
    _checks.one_of("placement", merged.get("placement"), PLACEMENTS)
    _checks.positive_int("reduction_factor", merged.get("reduction_factor"))
    _checks.positive_int("invertible_reduction_factor", merged["invertible_reduction_factor"])
    validation.boolean("invertible", merged["invertible"])
    _checks.activation("activation", merged["activation"])
    places = merged.get("places")
    if not isinstance(places, (list, tuple)) or not places:
        validation.refuse("places", f"a non-empty list of {', '.join(map(repr, PLACES))}",
                          places)
    merged["places"] = [_checks.one_of("place", place, PLACES) for place in places]
    return merged


def _bottleneck_width(hidden, reduction_factor):
    width = hidden // reduction_factor
    if width < 1:
        raise ValueError(f"reduction_factor {reduction_factor} leaves no units of a "
                         f"{hidden}-wide hidden state; use reduction_factor <= {hidden}.")
    return width


def _near_identity():
    # Houlsby et al. 2019, Sec. 3.6: zero-mean Gaussian, std 1e-2, truncated at two std.
    return keras.initializers.TruncatedNormal(stddev=1e-2)


class _Adapter(keras.layers.Layer):
    """Arguments and config the two adapter layers share."""

    def __init__(self, reduction_factor, activation="relu", kernel_initializer=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.reduction_factor = _checks.positive_int("reduction_factor", reduction_factor)
        self.activation = _checks.activation("activation", activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer or _near_identity())

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"reduction_factor": self.reduction_factor,
                       "activation": self.activation,
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config


@keras.saving.register_keras_serializable(package="keras_ctx")
class BottleneckAdapter(_Adapter):
    """`A(h) = U f(D h)`: down to hidden / reduction_factor, nonlinearity, back up.

    The layer returns A(h) only (no skip): where the residual goes depends on
    the placement (`AdapterSlot`). Use `h + adapter(h)` in a block of your own.

    Args:
        reduction_factor: hidden / bottleneck width (16 task, 2 language; MAD-X).
        activation: f ("relu" in MAD-X; Houlsby uses a nonlinearity too).
        kernel_initializer: None for near-identity (truncated normal, std 1e-2,
            Houlsby et al. 2019).

    Call arguments:
        inputs: (..., hidden).

    Example:
    >>> adapter = keras_ctx.layers.BottleneckAdapter(reduction_factor=16)
    >>> h = h + adapter(h)

    References:
        Houlsby et al. 2019, Parameter-Efficient Transfer Learning for NLP;
        Pfeiffer et al. 2020, MAD-X.
    """


    def __init__(self, reduction_factor=16, activation="relu", kernel_initializer=None,
                 **kwargs):
        super().__init__(reduction_factor, activation=activation,
                         kernel_initializer=kernel_initializer, **kwargs)

    def build(self, input_shape):
        hidden = input_shape[-1]
        width = _bottleneck_width(hidden, self.reduction_factor)
        self.down = keras.layers.Dense(width, activation=activations.get(self.activation),
                                       kernel_initializer=self.kernel_initializer,
                                       dtype=self.dtype_policy, name="down")
        self.down.build(input_shape)
        self.up = keras.layers.Dense(hidden, kernel_initializer=self.kernel_initializer,
                                     dtype=self.dtype_policy, name="up")
        self.up.build(tuple(input_shape[:-1]) + (width,))
        self.built = True

    def call(self, inputs):
        return self.up(self.down(inputs))



@keras.saving.register_keras_serializable(package="keras_ctx")
class InvertibleAdapter(_Adapter):
    """NICE additive coupling (Dinh et al. 2015) as MAD-X's invertible adapter.

    With e = [e1, e2] split in halves, F: e2 -> e1's width, G: o1 -> e2's
    width, both bottleneck MLPs (down by `reduction_factor`, ReLU, up):
    `o1 = e1 + F(e2)`, `o2 = e2 + G(o1)`. `call(x, inverse=True)` undoes it
    exactly: `e2 = o2 - G(o1)`, `e1 = o1 - F(e2)`. MAD-X applies it to the
    embedding output and its inverse before the output embedding layer.

    Args:
        reduction_factor: of F and G's bottleneck (2 in MAD-X).
        activation: of F and G ("relu").
        kernel_initializer: None for near-identity (truncated normal, std 1e-2).

    Call arguments:
        inputs: (..., hidden).
        inverse: apply the inverse map.

    Example:
    >>> inv = keras_ctx.layers.InvertibleAdapter()
    >>> x2 = inv(inv(x), inverse=True)   # == x

    References:
        Pfeiffer et al. 2020 (MAD-X), Sec. 3.2; Dinh et al. 2015 (NICE).
    """


    def __init__(self, reduction_factor=2, activation="relu", kernel_initializer=None,
                 **kwargs):
        super().__init__(reduction_factor, activation=activation,
                         kernel_initializer=kernel_initializer, **kwargs)

    def _mlp(self, name, width_in, width_out, batch_shape):
        inner = _bottleneck_width(width_in, self.reduction_factor)
        layers = [keras.layers.Dense(inner, activation=activations.get(self.activation),
                                     kernel_initializer=self.kernel_initializer,
                                     dtype=self.dtype_policy, name=f"{name}_down"),
                  keras.layers.Dense(width_out, kernel_initializer=self.kernel_initializer,
                                     dtype=self.dtype_policy, name=f"{name}_up")]
        layers[0].build(batch_shape + (width_in,))
        layers[1].build(batch_shape + (inner,))
        return layers

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.split = hidden // 2
        if self.split < 1:
            raise ValueError("An invertible adapter needs a hidden size of at least 2.")
        rest = hidden - self.split
        batch_shape = tuple(input_shape[:-1])
        self.f_down, self.f_up = self._mlp("f", rest, self.split, batch_shape)
        self.g_down, self.g_up = self._mlp("g", self.split, rest, batch_shape)
        self.built = True

    def call(self, inputs, inverse=False):
        first, second = inputs[..., :self.split], inputs[..., self.split:]

        def f(x):
            return self.f_up(self.f_down(x))

        def g(x):
            return self.g_up(self.g_down(x))

        if not inverse:
            first = first + f(second)
            second = second + g(first)
        else:
            second = second - g(first)
            first = first - f(second)
        return ops.concatenate([first, second], axis=-1)



def attach_sublayer(parent, attribute, layer):
    """Adds a sublayer to a built layer (Keras' own `enable_lora` unlocks the same way)."""
    with compat.unlocked(parent):
        setattr(parent, attribute, layer)


class _Gate(keras.layers.Layer):
    """A non-trainable 0/1 scalar: whether one adapter is active.

    A variable, not Python state, so that switching adapters also switches
    them inside functions traced before the switch (compiled predict/fit).
    """

    def build(self, input_shape=None):
        self.value = self.add_weight(name="value", shape=(), initializer="zeros",
                                     trainable=False)
        self.built = True

    def mix(self, on, off):
        """on where active, off where not."""
        gate = ops.cast(self.value, on.dtype)
        return gate * on + (1 - gate) * off


class _NamedAdapters(keras.layers.Layer):
    """Named adapters at one place, in the order added; `active` names the switched-on ones.

    Active adapters always stack in the order they were added (MAD-X: the
    language adapter, then the task adapter on it).
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.names = ()
        object.__setattr__(self, "configs", {})  # name -> adapter config (plain data)
        self.built = True

    def add(self, name, layer, config, before=None):
        """Adds `name` last in the stack, or just below adapter `before` (the place of an
        adapter it replaces: `keras_ctx.peft.replace_adapter`)."""
        if name in self.names:
            raise ValueError(f"An adapter named {name!r} is already here; delete it "
                             "(`delete_adapter`) or pick another name.")
        attach_sublayer(self, f"adapter_{name}", layer)
        gate = _Gate(dtype="float32", name=f"gate_{name}")
        gate.build()
        attach_sublayer(self, f"gate_{name}", gate)
        at = self.names.index(before) if before in self.names else len(self.names)
        self.names = self.names[:at] + (name,) + self.names[at:]
        self.configs[name] = config

    def remove(self, name):
        with compat.unlocked(self):
            delattr(self, f"adapter_{name}")
            delattr(self, f"gate_{name}")
        self.names = tuple(n for n in self.names if n != name)
        self.configs.pop(name, None)

    def get(self, name):
        return getattr(self, f"adapter_{name}")

    def _gate(self, name):
        return getattr(self, f"gate_{name}")

    @property
    def active(self):
        return tuple(n for n in self.names
                     if float(keras.ops.convert_to_numpy(self._gate(n).value)) > 0.5)

    @active.setter
    def active(self, names):
        for name in self.names:
            self._gate(name).value.assign(1.0 if name in names else 0.0)

    def gated_layers(self):
        """[(adapter, gate)] in stack order."""
        return [(self.get(name), self._gate(name)) for name in self.names]


class AdapterSlot(_NamedAdapters):
    """The adapters at one place of a block; owns the block's add & norm there.

    Args:
        placement: "houlsby" (adapter on the sublayer output, before the
            residual add) or "pfeiffer" (after the add & norm, MAD-X Eq. 1).
    """

    def __init__(self, placement, **kwargs):
        super().__init__(**kwargs)
        self.placement = _checks.one_of("placement", placement, PLACEMENTS)

    def add_and_norm(self, x, y, norm, normalize_first, training=None):
        """The block's `x + y` and normalisation, with the active adapters inserted.

        x: the residual input; y: the sublayer's output after dropout; norm:
        the block's layer norm there; normalize_first: pre-LN block (no norm
        after the add). Inactive adapters pass their input through.
        """
        adapters = self.gated_layers()
        if self.placement == "houlsby":
            for adapter, gate in adapters:  # Houlsby Fig. 2: y + A(y), before the skip
                y = gate.mix(y + adapter(y), y)
            out = x + y
            return out if normalize_first else norm(out)
        residual = x + y
        plain = residual if normalize_first else norm(residual)
        if not adapters:
            return plain
        # MAD-X Eq. 1-2: A_l(h, r) = U(ReLU(D(h))) + r, the task adapter
        # reading the language adapter's output, both with residual r.
        z = plain
        any_active = ops.zeros((), "float32")
        for adapter, gate in adapters:
            z = gate.mix(residual + adapter(z), z)
            any_active = ops.maximum(any_active, gate.value)
        out = z if normalize_first else norm(z)
        any_active = ops.cast(any_active, out.dtype)  # none active: the plain block
        return any_active * out + (1 - any_active) * plain


class AdapterHost:
    """A block whose residual additions run through `add_and_norm` at named places
    ("attention", "cross_attention", "feedforward"), where `keras_ctx.peft.add_adapter`
    puts adapters: keras_ctx's transformer blocks and XLNet's, or a block of your own
    that subclasses this (before keras.layers.Layer) and calls `add_and_norm`.
    """

    def adapter_width(self):
        """The width of the residual stream the adapters read and write."""
        raise NotImplementedError(f"{type(self).__name__} must say its adapter_width().")


def add_and_norm(block, place, x, y, norm, normalize_first=False, training=None):
    """A block's `norm(x + y)` (pre-LN: `x + y`), through its adapters at `place` if any.

    The hook for blocks outside keras_ctx.layers.transformer (XLNet's, or yours):
    `add_adapter` attaches an `AdapterSlot` as `block.<place>_adapters`.
    """
    slot = getattr(block, f"{place}_adapters", None)
    if slot is not None:
        return slot.add_and_norm(x, y, norm, normalize_first, training)
    x = x + y
    return x if normalize_first else norm(x)


class InvertibleAdapterSlot(_NamedAdapters):
    """Invertible adapters on a stack's input: forward in call, `inverse()` for the output."""

    def call(self, inputs):
        for adapter, gate in self.gated_layers():
            inputs = gate.mix(adapter(inputs), inputs)
        return inputs

    def inverse(self, outputs):
        for adapter, gate in reversed(self.gated_layers()):
            outputs = gate.mix(adapter(outputs, inverse=True), outputs)
        return outputs


__all__ = ["ADAPTER_CONFIGS", "AdapterSlot", "add_and_norm", "attach_sublayer", "BottleneckAdapter", "InvertibleAdapter",
           "InvertibleAdapterSlot", "adapter_config"]

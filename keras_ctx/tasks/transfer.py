"""ULMFiT's fine-tuning recipes, for any keras_ctx backbone (LSTM or Transformer).

Howard & Ruder (2018), "Universal Language Model Fine-tuning for Text Classification":

- discriminative fine-tuning (Sec. 3.2): one learning rate per layer group,
  eta^(l-1) = eta^l / 2.6, the top group at eta. `with_layer_learning_rates`
  makes these real learning rates under any Keras optimizer by scaling each
  variable's *update* (the learning rate handed to `update_step`). Scaling the
  gradient instead does nothing under Adam: m -> c m, v -> c^2 v, so the step
  m / sqrt(v) is unchanged (tests/tasks/test_transfer.py shows both);
- slanted triangular learning rates (Sec. 3.2, Eq. 3): `keras_ctx.schedules.SlantedTriangular`;
- gradual unfreezing (Sec. 3.3): `GradualUnfreezing`, from the last group, one
  more group per epoch;
- concat pooling (Sec. 3.3): h_c = [h_T; maxpool(H); meanpool(H)] over the real
  tokens, `ConcatPooling`, in `ConcatPoolClassifier` (ULMFiT's two linear
  blocks with batch normalization and dropout).

Also ELECTRA's layer-wise learning-rate decay for Transformers (Clark et al.
2020, App. A: lr * decay^(depth_max - depth)), `layer_wise_decay_multipliers`.

Layer groups are lists of variables, embeddings first, the task head last:
`layer_groups(model, backbone)`.
"""

import keras

from keras_ctx.common import compat, validation
from keras_ctx.layers.dropout import Dropout
from keras_ctx import backend
from keras_ctx.tasks.heads import ConcatPooling, Task

# Howard & Ruder 2018, Sec. 3.2: "eta^(l-1) = eta^l / 2.6 works well".
DISCRIMINATIVE_FACTOR = 2.6


# ------------------------------------------------------------------ layer groups

def _unique(variables, seen):
    out = []
    for variable in variables:
        if id(variable) not in seen:
            seen.add(id(variable))
            out.append(variable)
    return out


def backbone_layer_groups(backbone):
    """The backbone's variables by depth: [embeddings, layer 1, ..., layer L].

    A backbone may define `layer_groups()` itself (AWD-LSTM, CVT). Otherwise
    the layers that produce `hidden_states[1:]` are its blocks (or the blocks
    of the one `TransformerEncoderStack` producing them); layers before the
    first block join the embeddings, layers after the last block (final norm,
    pooler) join the top layer.
    """
    if hasattr(backbone, "layer_groups"):
        return [[v for v in g if v.trainable] for g in backbone.layer_groups()]
    outputs = backbone.output if isinstance(backbone.output, dict) else {}
    if "hidden_states" not in outputs:
        raise ValueError(
            f"{backbone.name!r} has no hidden_states output to find its layers from; pass "
            "the layer groups yourself (a list of variable lists, embeddings first).")
    producers = []
    for tensor in outputs["hidden_states"][1:]:
        layer = compat.producer(tensor)
        if layer not in producers:
            producers.append(layer)
    blocks = producers
    if len(producers) == 1 and hasattr(producers[0], "blocks"):
        stack = producers[0]
        if getattr(stack, "sharing", "none") != "none":
            raise ValueError(
                f"{backbone.name!r} shares one block's weights across layers (ALBERT): "
                "there are no per-layer weights to give per-layer learning rates.")
        blocks = list(stack.blocks)
    if any(not block.weights for block in blocks):
        raise ValueError(
            f"{backbone.name!r}'s hidden_states come from layers without weights; pass "
            "the layer groups yourself (a list of variable lists, embeddings first).")
    order = list(backbone.layers)  # topological order
    position = {id(layer): i for i, layer in enumerate(order)}
    first, last = position[id(producers[0])], position[id(producers[-1])]
    seen = set()
    groups = [[] for _ in range(len(blocks) + 1)]
    for i, block in enumerate(blocks):
        groups[i + 1] = _unique(block.trainable_weights, seen)
    for layer in order:
        if any(layer is p for p in producers) or not layer.trainable_weights:
            continue
        if position[id(layer)] < first:
            index = 0
        elif position[id(layer)] > last:
            index = len(blocks)
        else:
            raise ValueError(f"Layer {layer.name!r} sits between {backbone.name!r}'s blocks; "
                             "pass the layer groups yourself.")
        groups[index] += _unique(layer.trainable_weights, seen)
    # Weights outside the functional graph (XLNet's mask embedding for
    # two-stream pretraining) are input-side: the embeddings' group.
    groups[0] += _unique(backbone.trainable_weights, seen)
    return groups


def layer_groups(model, backbone=None):
    """Layer groups of a task model: the backbone's groups, then the head's variables.

    Args:
        model: a task model (e.g. `ConcatPoolClassifier`) or a bare backbone.
        backbone: the backbone inside `model` (default: `model.backbone`, or
            `model` itself when it has none).

    Returns:
        A list of lists of trainable variables, lowest (embeddings) first.
        Build the model first; call it before freezing anything.
    """
    if backbone is None:
        backbone = getattr(model, "backbone", model)
    groups = [list(g) for g in backbone_layer_groups(backbone)]
    if model is not backbone:
        inside = {id(v) for g in groups for v in g}
        groups.append([v for v in model.trainable_weights if id(v) not in inside])
    return [g for g in groups if g]


def discriminative_multipliers(num_groups, factor=DISCRIMINATIVE_FACTOR):
    """ULMFiT's learning-rate factors: group l of L gets factor^-(L-1-l), the top 1."""
    num_groups = validation.positive_int("num_groups", num_groups)
    factor = validation.positive_number("factor", factor)
    return [factor ** -(num_groups - 1 - l) for l in range(num_groups)]


def layer_wise_decay_multipliers(num_layers, decay):
    """ELECTRA's layer-wise decay (Clark et al. 2020; electra/model/optimization.py).

    Depth 0 for the embeddings, i + 1 for encoder layer i, num_layers + 2 for
    the task head; each gets decay^(num_layers + 2 - depth). Returns the
    factors for [embeddings, layer 1, ..., layer L, head], i.e. the groups of
    `layer_groups(task, backbone)` for a backbone with num_layers layers.
    """
    num_layers = validation.non_negative_int("num_layers", num_layers)
    decay = validation.fraction("decay", decay)
    depths = [0] + [i + 1 for i in range(num_layers)] + [num_layers + 2]
    return [decay ** (num_layers + 2 - d) for d in depths]


# ------------------------------------------------------------------ per-layer rates

class _LayerLearningRates:
    """Mixin: multiplies the learning rate of each variable by its group's factor.

    Keras hands `update_step(gradient, variable, learning_rate)` the rate that
    scales the step for every optimizer (Adam: lr * m_hat / (sqrt(v_hat) + eps)),
    so multiplying it here scales that variable's update exactly. Decoupled
    weight decay (AdamW) is scaled the same way (it is lr * wd * w).
    """

    def set_learning_rate_multipliers(self, groups, multipliers):
        if len(groups) != len(multipliers):
            raise ValueError(f"{len(groups)} layer groups but {len(multipliers)} "
                             "learning-rate multipliers: give one per group.")
        table = {}
        for group, factor in zip(groups, multipliers):
            factor = validation.positive_number("learning-rate multiplier", factor)
            for variable in group:
                key = compat.variable_key(self, variable)
                if key in table and table[key] != factor:
                    raise ValueError(f"Variable {variable.path!r} is in two layer groups.")
                table[key] = float(factor)
        self._multipliers = table

    def learning_rate_multiplier(self, variable):
        # A reloaded optimizer has no table (it names variables): factor 1.
        return getattr(self, "_multipliers", {}).get(compat.variable_key(self, variable), 1.0)

    def update_step(self, gradient, variable, learning_rate):
        factor = self.learning_rate_multiplier(variable)
        if factor != 1.0:
            learning_rate = learning_rate * factor
        return super().update_step(gradient, variable, learning_rate)

    def _apply_weight_decay(self, variables):
        # Keras' private hook (named with its pinned version in keras_ctx.common.compat,
        # which fails loudly if an upgrade drops it), scaled per variable.
        compat.resolve("apply_weight_decay")
        if self.weight_decay is None:
            return
        backend.decay_weights(self, variables, self.learning_rate_multiplier)


_CLASSES = {}


def _layer_rate_class(base):
    """`LayerRate<Base>`, registered so that a saved model's optimizer loads again."""
    if base not in _CLASSES:
        cls = type(f"LayerRate{base.__name__}", (_LayerLearningRates, base),
                   {"__module__": __name__})
        _CLASSES[base] = keras.saving.register_keras_serializable(package="keras_ctx")(cls)
    return _CLASSES[base]


# The common ones exist from import on, for loading saved models.
for _base in (keras.optimizers.Adam, keras.optimizers.AdamW, keras.optimizers.SGD):
    _layer_rate_class(_base)


def _keras_class(cls):
    """The optimizer class `cls` stands for, below our mixin and below a backend's fused
    stand-in: Keras' torch backend makes `keras.optimizers.Adam(...)` a `torch_adam.Adam`
    whose update skips `update_step`, where the factor applies (every group would train
    at the base rate, without a word)."""
    return next(c for c in cls.__mro__ if not issubclass(c, _LayerLearningRates)
                and not c.__module__.startswith("keras.src.backend."))


def with_layer_learning_rates(optimizer, groups, multipliers):
    """A copy of `optimizer` whose learning rate is multiplied per layer group.

    Args:
        optimizer: a Keras optimizer (its config is copied; any schedule, e.g.
            `SlantedTriangular`, applies to every group before the factor).
        groups: list of variable lists (`layer_groups(model)`).
        multipliers: one factor per group (`discriminative_multipliers(len(groups))`).

    Returns:
        An optimizer of a subclass of `type(optimizer)`; variables in no group
        train at the base rate. Compile the model with it. The factors name
        variables, so a saved model's optimizer loads without them (factor 1):
        call `set_learning_rate_multipliers(groups, multipliers)` again.

    Example:
    >>> groups = layer_groups(classifier)
    >>> adam = keras.optimizers.Adam(SlantedTriangular(0.01, steps), beta_1=0.7, beta_2=0.99)
    >>> classifier.compile(with_layer_learning_rates(
    ...     adam, groups, discriminative_multipliers(len(groups))), loss)
    """
    base = _keras_class(type(optimizer))
    config = optimizer.get_config()
    config.pop("name", None)
    copy = _layer_rate_class(base).from_config(config)
    copy.set_learning_rate_multipliers(groups, multipliers)
    return copy


# ------------------------------------------------------------------ unfreezing

class GradualUnfreezing(keras.callbacks.Callback):
    """ULMFiT's gradual unfreezing (Howard & Ruder 2018, Sec. 3.3).

    "We first unfreeze the last layer and fine-tune all unfrozen layers for one
    epoch. We then unfreeze the next lower frozen layer and repeat, until we
    fine-tune all layers": in epoch e (from 0) the last min(e + 1 + offset, G)
    of the G groups train. `epochs_per_group` stretches each stage.

    Freezing sets `variable.trainable` (frozen weights get no gradients at
    all) and rebuilds the train function. The optimizer is built for every
    group's variables first, so its state survives the stages. After `fit`
    the groups stay as the last epoch left them (all trainable once
    epochs >= groups * epochs_per_group).

    Args:
        groups: list of variable lists, lowest first (`layer_groups(model)`).
        epochs_per_group: epochs before the next group is unfrozen (1).

    Example:
    >>> model.fit(data, epochs=len(groups), callbacks=[GradualUnfreezing(groups)])
    """

    def __init__(self, groups, epochs_per_group=1):
        super().__init__()
        if not groups:
            raise ValueError("GradualUnfreezing needs at least one layer group.")
        epochs_per_group = validation.positive_int("epochs_per_group", epochs_per_group)
        self.groups = [list(g) for g in groups]
        self.epochs_per_group = epochs_per_group
        self.history = []  # number of trainable groups in each epoch

    def trainable_groups(self, epoch):
        return min(epoch // self.epochs_per_group + 1, len(self.groups))

    def on_train_begin(self, logs=None):
        backend.check_unfreezing(self.model)
        # Under mixed_float16 Keras wraps the optimizer in a LossScaleOptimizer.
        optimizer = getattr(self.model.optimizer, "inner_optimizer", self.model.optimizer)
        every = [v for g in self.groups for v in g]
        if not optimizer.built:
            optimizer.build(every)
        else:
            known = {compat.variable_key(optimizer, v)
                     for v in compat.attribute(optimizer, "optimizer_variables")}
            missing = [v.path for v in every if compat.variable_key(optimizer, v) not in known]
            if missing:
                raise ValueError(
                    f"The optimizer was built before {missing[0]!r} (and {len(missing) - 1} "
                    "more) were trainable: make the whole model trainable before fit and "
                    "let GradualUnfreezing freeze it.")

    def on_epoch_begin(self, epoch, logs=None):
        count = self.trainable_groups(epoch)
        if self.history and self.history[-1] == count:
            self.history.append(count)
            return
        boundary = len(self.groups) - count
        for i, group in enumerate(self.groups):
            for variable in group:
                variable.trainable = i >= boundary
        self.history.append(count)
        self.model.make_train_function(force=True)


# ------------------------------------------------------------------ the classifier

# Howard & Ruder 2018, Sec. 4: classifier hidden layer of size 50; fastai's
# text classifier head drops 0.4 (the LM's output dropout) then 0.1.
ULMFIT_HEAD_SIZE = 50
ULMFIT_HEAD_DROPOUTS = (0.4, 0.1)


@keras.saving.register_keras_serializable(package="keras_ctx")
class ConcatPoolClassifier(Task):
    """ULMFiT's classifier: concat pooling, then two linear blocks (Sec. 3.3).

        h_c = [h_T; maxpool(H); meanpool(H)]
        logits = W_2 Dropout(BN(ReLU(W_1 Dropout(BN(h_c)))))

    "two additional linear blocks ... batch normalization and dropout, with
    ReLU activations for the intermediate layer". Works on any backbone with
    `sequence_output` and `padding_mask`.

    Args:
        backbone: an `AwdLstmBackbone` or any keras_ctx backbone.
        num_classes: number of labels.
        hidden_size: the intermediate layer (50 in the paper).
        dropout: the dropouts of the two blocks (0.4, 0.1).

    Example:
    >>> classifier = ConcatPoolClassifier(AwdLstmBackbone(vocabulary_size=1000), 2)
    """

    def __init__(self, backbone, num_classes, hidden_size=ULMFIT_HEAD_SIZE,
                 dropout=ULMFIT_HEAD_DROPOUTS, **kwargs):
        num_classes = validation.positive_int("num_classes", num_classes)
        hidden_size = validation.positive_int("hidden_size", hidden_size)
        dropout = [validation.rate("dropout", d) for d in dropout]
        if len(dropout) != 2:
            raise ValueError(f"`dropout` holds one rate per linear block (2), got {dropout!r}.")
        inputs, features = self._backbone_features(backbone)
        if "padding_mask" not in inputs:
            raise ValueError("ConcatPoolClassifier needs a backbone with a padding_mask input.")
        x = ConcatPooling(name="concat_pooling")(features["sequence_output"],
                                                  inputs["padding_mask"])
        # PyTorch's (fastai's) batch-norm momentum 0.1 = Keras' 0.9: fine-tuning
        # runs are short, Keras' 0.99 would leave the inference statistics unset.
        x = keras.layers.BatchNormalization(momentum=0.9, name="norm_0")(x)
        x = Dropout(dropout[0], name="dropout_0")(x)
        x = keras.layers.Dense(hidden_size, activation="relu", name="hidden")(x)
        x = keras.layers.BatchNormalization(momentum=0.9, name="norm_1")(x)
        x = Dropout(dropout[1], name="dropout_1")(x)
        logits = keras.layers.Dense(num_classes, name="logits", dtype="float32")(x)
        super().__init__(inputs, logits, **kwargs)
        self.backbone = backbone
        self._config = {"num_classes": num_classes, "hidden_size": hidden_size,
                        "dropout": dropout}

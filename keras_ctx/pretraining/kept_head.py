"""The heads a pretrainer trains beside its backbone, as a run keeps them.

A run directory holds the backbone; the objective's heads (a masked-LM head or XLM's
PredLayer, BERT's NSP / ALBERT's SOP classifier, ELECTRA's discriminator head, SpanBERT's
span-boundary head) are kept beside it as their own arrays, by role
(`keras_ctx.runs.HEAD_FILE`), so that `keras-ctx generate` decodes XLM's CLM with its
trained bias and `pretrain --from RUN` continues every head. A converted checkpoint's heads
(`keras_ctx.convert.heads.pretraining_heads`) are kept the same way.
"""

import keras
from keras import ops

from keras_ctx.common.errors import ConfigError
from keras_ctx.run_files import HEAD_FILE, OUTPUT_HEAD

# (role, the pretrainer attribute that holds that head, the rank of what it reads): the
# roles are `runs.HEAD_ROLES`; the first attribute a pretrainer has wins a role.
HEADS = ((OUTPUT_HEAD, "mlm_head", 3), (OUTPUT_HEAD, "lm_head", 3),
         ("pair", "pair_head", 2),  # the pooled [CLS] vector
         ("replaced_token", "rtd_head", 3), ("span_boundary", "sbo_head", 3))


def _heads(pretrainer):
    found = {}
    for role, attribute, rank in HEADS:
        head = getattr(pretrainer, attribute, None)
        if head is not None and role not in found:
            found[role] = (head, rank)
    return found


def objective_heads(pretrainer):
    """{role: head} of the heads a pretrainer trains beside its backbone ({} for GPT, whose
    output is its backbone's tied table)."""
    return {role: head for role, (head, _) in _heads(pretrainer).items()}


def other_networks(pretrainer, backbone):
    """The networks a pretrainer trains beside `backbone` and its heads (ELECTRA's
    generator), which neither a run nor a published checkpoint of `backbone` holds."""
    heads = {id(head) for head in objective_heads(pretrainer).values()}
    return [layer for layer in pretrainer.layers if isinstance(layer, keras.Model)
            and layer is not backbone and id(layer) not in heads]


def objective_head(pretrainer):
    """The objective's output head (a masked-LM head, XLM's PredLayer), or None (GPT's
    output is its backbone's tied table)."""
    return objective_heads(pretrainer).get(OUTPUT_HEAD)


def own_weights(head):
    """A head's weights without the tied token table it reads (what a run keeps)."""
    return getattr(head, "own_weights", head.weights)


def head_weights(pretrainer):
    """{role: that head's own weights as arrays}, of its built heads: what a run keeps
    (`runs.HEAD_FILE`)."""
    return {role: [ops.convert_to_numpy(v) for v in own_weights(head)]
            for role, head in objective_heads(pretrainer).items() if head.built}


def restore_head(head, weights, width, source, rank=3, role=OUTPUT_HEAD):
    """Builds `head` (for inputs `rank` deep, `width` wide) and assigns it the arrays a run
    (its `HEAD_FILE`) or a checkpoint kept for it; one line where they differ."""
    if not head.built:
        head.build((None,) * (rank - 1) + (width,))
    own = own_weights(head)
    shapes = [tuple(w.shape) for w in weights]
    if shapes != [tuple(v.shape) for v in own]:
        raise ConfigError(f"{source}'s {role.replace('_', ' ')} head ({HEAD_FILE} of a run) "
                          f"has weights of shapes {shapes}, this objective's "
                          f"{[tuple(v.shape) for v in own]}: it is another objective's or "
                          "size's head; pretrain a preset of that objective.")
    for variable, value in zip(own, weights):
        variable.assign(ops.copy(value))  # not a buffer a JAX step may donate


def restore_heads(pretrainer, kept, width, source):
    """Assigns each of the pretrainer's heads the arrays `kept` ({role: arrays}, a run's
    `runs.load_heads` or a checkpoint's `pretraining_heads`) holds for its role.

    Returns:
        (roles continued, roles that start new), each in the pretrainer's order.
    """
    continued, new = [], []
    for role, (head, rank) in _heads(pretrainer).items():
        if role in kept:
            restore_head(head, kept[role], width, source, rank, role)
            continued.append(role)
        else:
            new.append(role)
    return continued, new

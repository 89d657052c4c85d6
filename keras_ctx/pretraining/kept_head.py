"""The heads a pretrainer trains beside its backbone, as a run keeps them.

A run directory holds the backbone; the objective's heads (a masked-LM head or XLM's
PredLayer, BERT's NSP / ALBERT's SOP classifier, ELECTRA's discriminator head and its
generator, SpanBERT's span-boundary head) are kept beside it as their own arrays, by role
(`keras_ctx.runs.HEAD_FILE`), so that `keras-ctx generate` decodes XLM's CLM with its
trained bias and `pretrain --from RUN` continues every head. A converted checkpoint's heads
(`keras_ctx.convert.heads.pretraining_heads`) are kept the same way.
"""

from keras import ops

from keras_ctx.common.errors import ConfigError
from keras_ctx.run_files import HEAD_FILE, OUTPUT_HEAD

# (role, the pretrainer attribute that holds that head, the rank of what it reads): the
# roles are `runs.HEAD_ROLES`; the first attribute a pretrainer has wins a role. ELECTRA's
# generator is kept as a head: the weights it does not share with the discriminator.
HEADS = ((OUTPUT_HEAD, "mlm_head", 3), (OUTPUT_HEAD, "lm_head", 3),
         ("pair", "pair_head", 2),  # the pooled [CLS] vector
         ("replaced_token", "rtd_head", 3), ("span_boundary", "sbo_head", 3),
         ("generator", "generator", 3))


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


def objective_head(pretrainer):
    """The objective's output head (a masked-LM head, XLM's PredLayer), or None (GPT's
    output is its backbone's tied table)."""
    return objective_heads(pretrainer).get(OUTPUT_HEAD)


def role_name(role):
    """How the run's lines name a role's head ("pair head", "generator")."""
    return role if role == "generator" else role.replace("_", " ") + " head"


def own_weights(head):
    """A head's weights without the tied token table it reads."""
    return getattr(head, "own_weights", head.weights)


def _kept_weights(pretrainer):
    """{role: the variables a run keeps of that head}: its own weights, less those of the
    pretrainer's backbone(s) it shares (ELECTRA's generator reads the discriminator's
    embeddings)."""
    heads = objective_heads(pretrainer)
    ids = {id(head) for head in heads.values()}
    shared = {id(v) for layer in pretrainer.layers if id(layer) not in ids
              for v in layer.weights}
    return {role: [v for v in own_weights(head) if id(v) not in shared]
            for role, head in heads.items()}


def head_weights(pretrainer):
    """{role: that head's own weights as arrays}, of its built heads: what a run keeps
    (`runs.HEAD_FILE`)."""
    heads, kept = objective_heads(pretrainer), _kept_weights(pretrainer)
    return {role: [ops.convert_to_numpy(v) for v in kept[role]]
            for role, head in heads.items() if head.built}


def restore_head(head, weights, width, source, rank=3, role=OUTPUT_HEAD, variables=None):
    """Builds `head` (for inputs `rank` deep, `width` wide) and assigns its `variables`
    (default: its own weights) the arrays a run (its `HEAD_FILE`) or a checkpoint kept for
    it; one line where they differ."""
    if not head.built:
        head.build((None,) * (rank - 1) + (width,))
    own = own_weights(head) if variables is None else variables
    shapes = [tuple(w.shape) for w in weights]
    if shapes != [tuple(v.shape) for v in own]:
        raise ConfigError(f"{source}'s {role_name(role)} ({HEAD_FILE} of a run) has weights "
                          f"of shapes {shapes}, this objective's "
                          f"{[tuple(v.shape) for v in own]}: it is another objective's or "
                          "size's; pretrain a preset of that objective and size.")
    for variable, value in zip(own, weights):
        variable.assign(ops.copy(value))  # not a buffer a JAX step may donate


def restore_heads(pretrainer, kept, width, source):
    """Assigns each of the pretrainer's heads the arrays `kept` ({role: arrays}, a run's
    `runs.load_heads` or a checkpoint's `pretraining_heads`) holds for its role.

    Returns:
        (roles continued, roles that start new), each in the pretrainer's order.
    """
    heads = _heads(pretrainer)
    for role, (head, rank) in heads.items():
        if role in kept and not head.built:
            head.build((None,) * (rank - 1) + (width,))
    variables = _kept_weights(pretrainer)  # of the built heads
    for role in heads:
        if role in kept:
            restore_head(heads[role][0], kept[role], width, source, role=role,
                         variables=variables[role])
    return [r for r in heads if r in kept], [r for r in heads if r not in kept]

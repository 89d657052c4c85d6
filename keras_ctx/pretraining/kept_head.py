"""The output head a pretrainer trains beside its backbone, as a run keeps it.

A run directory holds the backbone; the objective's head (a masked-LM head, XLM's
PredLayer) is kept beside it as its own arrays (`keras_ctx.runs.HEAD_FILE`), so that
`keras-ctx generate` decodes XLM's CLM with its trained bias and `pretrain --from RUN`
continues the head too.
"""

from keras import ops

from keras_ctx.common.errors import ConfigError
from keras_ctx.run_files import HEAD_FILE


def objective_head(pretrainer):
    """The output head a pretrainer trains beside its backbone (a masked-LM head, XLM's
    PredLayer), or None (GPT's output is its backbone's tied table)."""
    return getattr(pretrainer, "mlm_head", None) or getattr(pretrainer, "lm_head", None)


def head_weights(pretrainer):
    """The objective head's own weights as arrays, what a run keeps (`runs.HEAD_FILE`)."""
    head = objective_head(pretrainer)
    return None if head is None or not head.built else [
        ops.convert_to_numpy(v) for v in head.own_weights]


def restore_head(head, weights, width, source):
    """Builds `head` and assigns it the arrays a run kept; one line where they differ."""
    if not head.built:
        head.build((None, None, width))
    own = head.own_weights
    shapes = [tuple(w.shape) for w in weights]
    if shapes != [tuple(v.shape) for v in own]:
        raise ConfigError(f"{source}'s {HEAD_FILE} holds weights of shapes {shapes}, "
                          "this objective's head others: it is another objective's head; "
                          "pretrain a preset of that objective.")
    for variable, value in zip(own, weights):
        variable.assign(value)

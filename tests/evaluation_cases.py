"""A tiny language model and its scores computed by hand, for the evaluation tests on every
backend."""

import numpy as np

from keras_ctx.convert.huggingface import EXPORTERS
from keras_ctx.models.gpt.backbone import GPTBackbone
from tests.convert import numpy_refs

SIZES = dict(vocabulary_size=30, num_layers=2, num_heads=2, hidden_size=16,
             intermediate_size=32, max_sequence_length=16, dropout=0.0)


SHAPES = {  # GPT-2 (dense, scaled) and GPT-Neo (alternating band, unscaled, no q/k/v bias)
    "gpt2": dict(SIZES),
    "gpt_neo": dict(SIZES, attention_pattern="alternating", window_size=3,
                    attention_scale=1.0, use_qkv_bias=False),
}


def numpy_model(kind):
    backbone = GPTBackbone(**SHAPES[kind])
    config, tensors = EXPORTERS[kind](backbone)
    forward = numpy_refs.numpy_gpt2 if kind == "gpt2" else numpy_refs.numpy_gpt_neo

    def next_token_log_probs(prefix):
        """log p(. | prefix) from the numpy forward pass over the prefix alone."""
        ids = np.array([prefix])
        hidden = forward(tensors, config, ids, np.ones_like(ids), prefix="")[0, -1]
        logits = hidden @ np.asarray(tensors["wte.weight"], "float64").T
        return logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()

    return backbone, next_token_log_probs


def by_hand(next_token_log_probs, context, continuation):
    total, greedy = 0.0, True
    for k, token in enumerate(continuation):
        log_probs = next_token_log_probs(list(context) + list(continuation[:k]))
        total += log_probs[token]
        greedy &= bool(log_probs[token] >= log_probs.max())
    return total, greedy

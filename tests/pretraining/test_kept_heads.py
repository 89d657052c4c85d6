"""A run keeps every head of its objective by role (keras_ctx/pretraining/kept_head.py,
runs.HEAD_FILE) and `pretrain --from RUN` restores them all: the NSP / SOP classifier and
SpanBERT's span-boundary head beside the masked-LM head. Ground truth: the objective's own
losses on a batch before the heads were kept, from the same backbone weights."""

import numpy as np
import pytest
from keras import ops

from keras_ctx.pretraining.kept_head import (head_weights, objective_heads, own_weights,
                                             restore_heads)
from tests.pretraining.matrix_cases import CASES


@pytest.mark.runs_on("tensorflow", "torch", reason="eager losses: each op compiles on its "
                     "own on JAX (25 s); the kept arrays are the same on every backend")
@pytest.mark.parametrize("case, roles", [("bert", ["output", "pair"]),
                                         ("albert", ["output", "pair"]),
                                         ("span_bert", ["output", "span_boundary"])])
def test_the_kept_heads_give_back_the_objectives_losses(case, roles):
    build, batch_of = CASES[case]
    trained, batch = build(), batch_of()
    trained.compute_losses(batch, training=False)  # builds its heads
    rng = np.random.default_rng(4)
    for head in objective_heads(trained).values():  # "trained": far from a new head's
        for variable in own_weights(head):
            variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    want = {k: float(v) for k, v in trained.compute_losses(batch, training=False).items()}
    kept = head_weights(trained)
    assert sorted(kept) == sorted(roles)

    again = type(trained).from_config(trained.get_config())
    again.backbone.set_weights(trained.backbone.get_weights())
    new = {k: float(v) for k, v in again.compute_losses(batch, training=False).items()}
    assert all(abs(new[k] - want[k]) > 1e-3 for k in want), (new, want)
    width = ops.shape(trained.backbone.output["sequence_output"])[-1]
    assert restore_heads(again, kept, width, "a run") == (roles, [])
    got = {k: float(v) for k, v in again.compute_losses(batch, training=False).items()}
    assert got == pytest.approx(want, rel=1e-5)

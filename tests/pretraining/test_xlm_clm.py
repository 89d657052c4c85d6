"""XLM's CLM objective (Lample & Conneau 2019, Sec. 3.2): CausalLMPretrainer over an XLM
backbone with `causal=True`, language ids as an input and XLM's PredLayer (tied output +
bias) as the output layer; its logits and next-token loss against a numpy forward and
against transformers' XLMWithLMHeadModel on the same weights."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_ctx import testing
from keras_ctx.convert.heads import masked_lm_from_huggingface
from keras_ctx.models import XLMBackbone
from keras_ctx.pretraining import CausalLMPretrainer
from tests import references
from tests.convert.hf_checkpoints import write_checkpoint
from tests.convert.xlm_checkpoints import XLM, transformers_clm, xlm_tensors

CAUSAL = dict(XLM, causal=True, n_langs=2, dropout=0.0, attention_dropout=0.0)


def _clm_stream_batch(seed=0, batch=2, time=9, vocabulary=40):
    """XLM's CLM input: stream windows, positions 0.., one language per row."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocabulary, (batch, time)).astype("int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids),
            "position_ids": np.tile(np.arange(time, dtype="int32"), (batch, 1)),
            "language_ids": np.array([[0], [1]] * (batch // 2), "int32") * np.ones_like(ids)}


def _numpy_causal_xlm_logits(tensors, config, batch):
    """HF XLMWithLMHeadModel's forward with causal attention, in float64 from the tensors."""
    t = {k.removeprefix("transformer."): np.asarray(v, "float64") for k, v in tensors.items()}
    eps, heads = config["layer_norm_eps"], config["n_heads"]

    def linear(y, name):
        return y @ t[name + ".weight"].T + t[name + ".bias"]

    def norm(y, name):
        return references.layer_norm(y, t[name + ".weight"], t[name + ".bias"], eps)

    x = (t["embeddings.weight"][batch["token_ids"]]
         + t["position_embeddings.weight"][batch["position_ids"]]
         + t["lang_embeddings.weight"][batch["language_ids"]])
    x = norm(x, "layer_norm_emb")
    rows, time, hidden = x.shape
    size = hidden // heads
    allowed = np.tril(np.ones((time, time), bool))  # i attends to j <= i (XLM's get_masks)
    for i in range(config["n_layers"]):
        q, k, v = (linear(x, f"attentions.{i}.{n}_lin").reshape(rows, time, heads, size)
                   .transpose(0, 2, 1, 3) for n in "qkv")
        scores = np.where(allowed, q @ k.transpose(0, 1, 3, 2) / math.sqrt(size), -1e30)
        context = (references.softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(x + linear(context, f"attentions.{i}.out_lin"), f"layer_norm1.{i}")
        inner = references.gelu(linear(x, f"ffns.{i}.lin1"))
        x = norm(x + linear(inner, f"ffns.{i}.lin2"), f"layer_norm2.{i}")
    return x @ t["embeddings.weight"].T + t["pred_layer.proj.bias"]  # PredLayer, tied


def _next_token_loss(logits, ids):
    """Mean cross-entropy of token t+1 from position t (XLM's clm_step: pred_mask over
    positions 0..T-2 of a full stream window)."""
    logits = logits[:, :-1] - logits[:, :-1].max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(log_p, ids[:, 1:, None], -1).mean()


def _clm_pretrainer_of(directory):
    backbone, head = masked_lm_from_huggingface(directory)
    return CausalLMPretrainer(backbone, output_bias=True, lm_head=head)


def test_clm_logits_and_loss_match_a_numpy_causal_xlm(tmp_path):
    tensors = xlm_tensors(CAUSAL)
    tensors["pred_layer.proj.weight"] = tensors["transformer.embeddings.weight"].copy()
    model = _clm_pretrainer_of(write_checkpoint(tmp_path / "clm", CAUSAL, tensors))
    assert model.backbone.causal and model.lm_head.transform is False
    batch = _clm_stream_batch()
    want = _numpy_causal_xlm_logits(tensors, CAUSAL, batch)
    got = ops.convert_to_numpy(model(batch))
    np.testing.assert_allclose(got, want, atol=2e-4)
    loss = float(model.compute_losses(batch, training=False)["likelihood"])
    assert loss == pytest.approx(_next_token_loss(want, batch["token_ids"]), rel=1e-5)
    # The bias is the checkpoint's: a fresh head (zero bias) gives other logits.
    fresh = CausalLMPretrainer(model.backbone, output_bias=True)
    assert not np.allclose(ops.convert_to_numpy(fresh(batch)), got, atol=1e-3)


def test_an_earlier_logit_never_reads_a_later_token():
    keras.utils.set_random_seed(0)
    backbone = XLMBackbone(40, 2, 2, 16, 64, num_languages=2, causal=True, dropout=0.0,
                           attention_dropout=0.0)
    model = CausalLMPretrainer(backbone, output_bias=True)
    batch = _clm_stream_batch()
    changed = dict(batch, token_ids=batch["token_ids"].copy())
    changed["token_ids"][:, 5:] = (changed["token_ids"][:, 5:] + 7) % 40
    before, after = (ops.convert_to_numpy(model(b)) for b in (batch, changed))
    np.testing.assert_allclose(before[:, :5], after[:, :5], atol=1e-6)
    assert np.abs(before[:, 5:] - after[:, 5:]).max() > 1e-3
    # The language embedding is read: the same tokens under the other language differ.
    other = dict(batch, language_ids=1 - batch["language_ids"])
    assert not np.allclose(ops.convert_to_numpy(model(other)), before, atol=1e-4)


def test_output_bias_is_serialised_and_lm_head_needs_it(tmp_path):
    backbone = XLMBackbone(40, 1, 2, 16, 64, num_languages=2, causal=True)
    model = CausalLMPretrainer(backbone, output_bias=True)
    assert model.get_config()["output_bias"] is True
    again = CausalLMPretrainer.from_config(model.get_config())
    assert again.output_bias and again.lm_head is not None
    head = CausalLMPretrainer(backbone, output_bias=True).lm_head
    with pytest.raises(ValueError, match="output_bias=True"):
        CausalLMPretrainer(backbone, lm_head=head)


def _matrix_case():
    """The Pretrainer matrix's XLM CLM case (tests/pretraining/matrix_cases.py's sizes)."""
    return CausalLMPretrainer(XLMBackbone(40, 2, 2, 32, 64, num_languages=2, causal=True,
                                          dropout=0.0, attention_dropout=0.0,
                                          max_sequence_length=16), output_bias=True)


def _matrix_batch():
    batch = _clm_stream_batch(5, batch=4, time=12)
    batch["padding_mask"][0, -4:] = 0  # a padded tail: its targets weigh nothing
    batch["token_ids"] *= batch["padding_mask"]
    return batch


@pytest.mark.slow  # ~30 s: four one-step runs (the matrix case runs its two-replica step)
def test_one_step_is_the_same_under_xla_and_mixed_float16():
    testing.run_pretrainer_test(_matrix_case, _matrix_batch, checks=("mixed_float16", "xla",
                                                                     "nan"))


@pytest.mark.slow  # transformers and torch imported: ~14 s on 2 busy cores
def test_clm_logits_and_loss_equal_transformers_xlm_with_lm_head(tmp_path):
    torch = pytest.importorskip("torch")
    reference = transformers_clm(tmp_path / "hf")
    model = _clm_pretrainer_of(str(tmp_path / "hf"))
    batch = _clm_stream_batch(batch=4)
    ids = torch.tensor(batch["token_ids"], dtype=torch.long)
    labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], 1)  # next token
    with torch.no_grad():
        out = reference(input_ids=ids, langs=torch.tensor(batch["language_ids"]).long(),
                        labels=labels)
    np.testing.assert_allclose(ops.convert_to_numpy(model(batch)), out.logits.numpy(),
                               atol=1e-5)
    loss = float(model.compute_losses(batch, training=False)["likelihood"])
    assert loss == pytest.approx(float(out.loss), rel=1e-5)

"""HF GPT-2, BART and T5 checkpoints, written here in the real layout and names."""

import json
import os
import warnings

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from tests.convert import numpy_refs
from tests.execution import DECODE
from tests.convert.hf_checkpoints import random_tensors, write_checkpoint
from tests.convert.hf_generative_checkpoints import BART, MT5, T5, _t5_inputs, bart_tensors, t5_tensors


def _real_rows(ids, mask):
    return ids * mask, mask


# --- GPT-2 ---------------------------------------------------------------------------

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 40,
        "n_embd": 16, "n_layer": 2, "n_head": 4, "n_positions": 12, "n_inner": None,
        "activation_function": "gelu", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1}


def gpt2_tensors(seed=0, config=GPT2):
    v, d, p = config["vocab_size"], config["n_embd"], config["n_positions"]
    shapes = {"transformer.wte.weight": (v, d), "transformer.wpe.weight": (p, d),
              "transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,),
              "lm_head.weight": (v, d)}
    for i in range(config["n_layer"]):
        q = f"transformer.h.{i}."
        shapes.update({
            q + "ln_1.weight": (d,), q + "ln_1.bias": (d,), q + "ln_2.weight": (d,),
            q + "ln_2.bias": (d,), q + "attn.c_attn.weight": (d, 3 * d),
            q + "attn.c_attn.bias": (3 * d,), q + "attn.c_proj.weight": (d, d),
            q + "attn.c_proj.bias": (d,), q + "mlp.c_fc.weight": (d, 4 * d),
            q + "mlp.c_fc.bias": (4 * d,), q + "mlp.c_proj.weight": (4 * d, d),
            q + "mlp.c_proj.bias": (d,),
        })
    tensors = random_tensors(shapes, seed)
    for name in list(tensors):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or "ln_f.w" in name:
            tensors[name] = 1 + 0.1 * tensors[name]
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"]  # tied, as GPT2LMHeadModel
    # The causal-mask buffer of older GPT-2 checkpoints.
    tensors["transformer.h.0.attn.bias"] = np.tril(np.ones((p, p), "float32"))[None, None]
    return tensors


def test_gpt2_matches_numpy_and_round_trips(tmp_path):
    tensors = gpt2_tensors()
    directory = write_checkpoint(tmp_path / "gpt2", GPT2, tensors)
    backbone = from_huggingface(directory)
    ids, mask = _real_rows(np.array([[5, 9, 17, 4, 3, 30, 2], [7, 22, 13, 1, 1, 1, 1]], "int32"),
                           np.array([[1] * 7, [1] * 3 + [0] * 4], "int32"))
    got = ops.convert_to_numpy(
        backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    want = numpy_refs.numpy_gpt2(tensors, GPT2, ids, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)

    exported = to_huggingface(backbone, tmp_path / "out")
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k[len("transformer."):] for k in tensors
                            if k.startswith("transformer.") and k != "transformer.h.0.attn.bias"}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors["transformer." + name])
    again = from_huggingface(exported)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again({"token_ids": ids, "padding_mask": mask})["sequence_output"]),
        got)


def _greedy_continuation(logits_fn, ids, steps):
    """Greedy decoding from a numpy next-token logits function of the ids so far."""
    ids = list(ids)
    for _ in range(steps):
        ids.append(int(np.argmax(logits_fn(np.array([ids], "int32")))))
    return ids


def test_converted_gpt2_lm_head_generates_as_numpy(tmp_path):
    from keras_ctx.generation import generate

    tensors = gpt2_tensors(seed=6)
    backbone = from_huggingface(write_checkpoint(tmp_path / "gpt2", GPT2, tensors))
    ids = np.array([[5, 9, 17, 4, 3]], "int32")
    hidden = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"]
    # GPT2LMHeadModel: logits = ln_f(h) wte^T (lm_head tied, no bias).
    wte = tensors["transformer.wte.weight"].astype("float64")
    want = numpy_refs.numpy_gpt2(tensors, GPT2, ids, np.ones_like(ids)) @ wte.T
    np.testing.assert_allclose(ops.convert_to_numpy(backbone.logits(hidden)), want, atol=1e-4)

    def numpy_next(prefix):
        return numpy_refs.numpy_gpt2(tensors, GPT2, prefix, np.ones_like(prefix))[0, -1] @ wte.T

    out = generate(backbone, ids, np.ones_like(ids), max_length=9, jit_compile=DECODE)
    np.testing.assert_array_equal(out["token_ids"][0], _greedy_continuation(numpy_next, ids[0], 4))

    untied = dict(tensors, **{"lm_head.weight": tensors["transformer.wte.weight"] + 1})
    with pytest.raises(CheckpointError, match="lm_head.weight differs from transformer.wte"):
        from_huggingface(write_checkpoint(tmp_path / "untied", GPT2, untied))


def test_gpt2_tanh_gelu_and_bad_fused_projection(tmp_path):
    config = dict(GPT2, activation_function="gelu_new")
    backbone = from_huggingface(write_checkpoint(tmp_path / "a", config, gpt2_tensors()))
    assert backbone.get_config()["activation"] == "gelu_approximate"
    tensors = gpt2_tensors()
    tensors["transformer.h.1.attn.c_attn.weight"] = np.zeros((16, 47), "float32")
    with pytest.raises(CheckpointError, match="h.1.attn.c_attn.weight.*divisible by 3"):
        from_huggingface(write_checkpoint(tmp_path / "b", GPT2, tensors))


# --- BART ----------------------------------------------------------------------------


def _seq2seq_inputs():
    enc_ids, enc_mask = _real_rows(np.array([[0, 5, 9, 17, 4, 2], [0, 22, 13, 2, 1, 1]], "int32"),
                                   np.array([[1] * 6, [1] * 4 + [0] * 2], "int32"))
    dec_ids, dec_mask = _real_rows(np.array([[2, 0, 7, 8, 9], [2, 0, 11, 1, 1]], "int32"),
                                   np.array([[1] * 5, [1] * 3 + [0] * 2], "int32"))
    return {"encoder_token_ids": enc_ids, "encoder_padding_mask": enc_mask,
            "decoder_token_ids": dec_ids, "decoder_padding_mask": dec_mask}


def _check_seq2seq(backbone, want, inputs):
    out = backbone(inputs)
    for key, reference, mask in (("encoder_sequence_output", want[0], "encoder_padding_mask"),
                                 ("decoder_sequence_output", want[1], "decoder_padding_mask")):
        real = inputs[mask].astype(bool)
        np.testing.assert_allclose(ops.convert_to_numpy(out[key])[real], reference[real], atol=1e-4)
    return ops.convert_to_numpy(out["decoder_sequence_output"])


def test_bart_matches_numpy_and_round_trips(tmp_path):
    tensors = bart_tensors()
    directory = write_checkpoint(tmp_path / "bart", BART, tensors)
    backbone = from_huggingface(directory)
    assert backbone.max_sequence_length == BART["max_position_embeddings"]
    inputs = _seq2seq_inputs()
    want = numpy_refs.numpy_bart(tensors, BART, *inputs.values())
    got = _check_seq2seq(backbone, want, inputs)
    # The LM head: shared^T plus final_logits_bias (HF BartForConditionalGeneration).
    real = inputs["decoder_padding_mask"].astype(bool)
    np.testing.assert_allclose(ops.convert_to_numpy(backbone.logits(got))[real],
                               numpy_refs.bart_lm_logits(tensors, want[1])[real], atol=1e-4)
    assert not backbone.final_logits_bias.trainable

    exported = to_huggingface(backbone, tmp_path / "out")
    written = load_file(os.path.join(exported, "model.safetensors"))
    # BartForConditionalGeneration's layout, less the tied copies HF drops.
    assert set(written) == {k for k in tensors if "embed_tokens" not in k and "lm_head" not in k}
    for name, value in written.items():
        original = tensors[name]
        if "embed_positions" in name:
            value, original = value[2:], original[2:]
        np.testing.assert_array_equal(value, original)
    again = from_huggingface(exported)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again(inputs)["decoder_sequence_output"]), got)
    np.testing.assert_array_equal(ops.convert_to_numpy(again.final_logits_bias),
                                  tensors["final_logits_bias"][0])

    # A BartModel checkpoint has no LM bias: zeros, as HF initialises it.
    bare = {k: v for k, v in tensors.items() if k not in ("final_logits_bias", "lm_head.weight")}
    assert not ops.convert_to_numpy(from_huggingface(write_checkpoint(tmp_path / "bare", BART, bare)
                                ).final_logits_bias).any()
    untied = dict(tensors, **{"lm_head.weight": tensors["model.shared.weight"] * 2})
    with pytest.raises(CheckpointError, match="lm_head.weight differs"):
        from_huggingface(write_checkpoint(tmp_path / "untied", BART, untied))

    with pytest.raises(CheckpointError, match="scale_embedding"):
        from_huggingface(write_checkpoint(tmp_path / "scaled", dict(BART, scale_embedding=True),
                                          tensors))


def _seq2seq_generation_matches_numpy(backbone, numpy_logits, start, steps=3):
    """Greedy generate_seq2seq equals greedy decoding with the numpy LM logits."""
    from keras_ctx.generation import generate_seq2seq

    encoder_ids = np.array([[0, 5, 9, 17, 4, 2]], "int32")

    def numpy_next(prefix):
        return numpy_logits(encoder_ids, prefix)[0, -1]

    out = generate_seq2seq(backbone, encoder_ids, max_length=steps + 1,
                           decoder_start_token_id=start, jit_compile=DECODE)
    np.testing.assert_array_equal(out["token_ids"][0],
                                  _greedy_continuation(numpy_next, [start], steps))


def test_converted_bart_lm_head_generates_as_numpy(tmp_path):
    tensors = bart_tensors(seed=4)
    backbone = from_huggingface(write_checkpoint(tmp_path / "bart", BART, tensors))

    def numpy_logits(enc, dec):
        _, y = numpy_refs.numpy_bart(tensors, BART, enc, np.ones_like(enc), dec,
                                     np.ones_like(dec))
        return numpy_refs.bart_lm_logits(tensors, y)

    _seq2seq_generation_matches_numpy(backbone, numpy_logits, start=2)


# --- T5 ------------------------------------------------------------------------------


def test_t5_matches_numpy_and_round_trips(tmp_path):
    tensors = t5_tensors()
    directory = write_checkpoint(tmp_path / "t5", T5, tensors)
    backbone = from_huggingface(directory)
    inputs = _t5_inputs()
    want = numpy_refs.numpy_t5(tensors, T5, *inputs.values())
    got = _check_seq2seq(backbone, want, inputs)

    exported = to_huggingface(backbone, tmp_path / "out")
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k for k in tensors if "embed_tokens" not in k and "lm_head" not in k}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors[name])
    again = from_huggingface(exported)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again(inputs)["decoder_sequence_output"]), got)

    # A file that kept the tied copy instead of shared.weight.
    renamed = {("encoder.embed_tokens.weight" if k == "shared.weight" else k): v
               for k, v in tensors.items() if k != "encoder.embed_tokens.weight"}
    copy = from_huggingface(write_checkpoint(tmp_path / "tied", T5, renamed))
    np.testing.assert_array_equal(
        ops.convert_to_numpy(copy(inputs)["decoder_sequence_output"]), got)

    with pytest.raises(CheckpointError, match="feed_forward_proj 'gated-swish'"):
        from_huggingface(write_checkpoint(tmp_path / "swish",
                                          dict(T5, feed_forward_proj="gated-swish"), tensors))
    # A stored lm_head.weight that differs from the shared table is a head of its own, as
    # transformers 5 reads it (tests/convert/test_t5_transformers5.py has the cases).
    untied = dict(tensors, **{"lm_head.weight": tensors["shared.weight"] + 1})
    assert from_huggingface(write_checkpoint(tmp_path / "own_head", T5, untied)).lm_head


@pytest.mark.parametrize("config", ["t5", "mt5"])
def test_converted_t5_lm_head_generates_as_numpy(tmp_path, config):
    config = {"t5": T5, "mt5": MT5}[config]  # tied + rescaled / untied lm_head
    tensors = t5_tensors(seed=7, c=config)
    backbone = from_huggingface(write_checkpoint(tmp_path / "t5", config, tensors))

    def numpy_logits(enc, dec):
        _, y = numpy_refs.numpy_t5(tensors, config, enc, np.ones_like(enc), dec,
                                   np.ones_like(dec))
        return numpy_refs.t5_lm_logits(tensors, config, y)

    _seq2seq_generation_matches_numpy(backbone, numpy_logits, start=0)


def test_gated_untied_t5_matches_numpy_and_round_trips(tmp_path):
    tensors = t5_tensors(seed=3, c=MT5)
    assert "lm_head.weight" in tensors and "encoder.block.1.layer.1.DenseReluDense.wi_1.weight" \
        in tensors
    backbone = from_huggingface(write_checkpoint(tmp_path / "mt5", MT5, tensors))
    c = backbone.get_config()
    assert (c["gated_feedforward"], c["tie_embeddings"], c["head_size"], c["activation"]) == (
        True, False, 3, "gelu_approximate")
    inputs = _t5_inputs()
    want = numpy_refs.numpy_t5(tensors, MT5, *inputs.values())
    got = _check_seq2seq(backbone, want, inputs)
    # Next-token logits: lm_head(y), no d_model^-0.5 rescale when untied.
    real = inputs["decoder_padding_mask"].astype(bool)
    np.testing.assert_allclose(ops.convert_to_numpy(backbone.logits(got))[real],
                               numpy_refs.t5_lm_logits(tensors, MT5, want[1])[real], atol=1e-4)

    # The family's default export is model_type "t5" (the same HF modeling code).
    exported = to_huggingface(backbone, tmp_path / "out", model_type="mt5")
    with open(os.path.join(exported, "config.json")) as handle:
        config = json.load(handle)
    assert {k: config[k] for k in ("model_type", "d_kv", "feed_forward_proj",
                                   "tie_word_embeddings")} == {
        "model_type": "mt5", "d_kv": 3, "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False}
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k for k in tensors if "embed_tokens" not in k}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors[name])
    again = from_huggingface(exported)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again(inputs)["decoder_sequence_output"]), got)


OPENAI_GPT = {"model_type": "openai-gpt", "architectures": ["OpenAIGPTLMHeadModel"],
              "vocab_size": 40, "n_embd": 16, "n_layer": 2, "n_head": 4, "n_positions": 12,
              "afn": "gelu", "layer_norm_epsilon": 1e-5}


def test_original_gpt_matches_numpy(tmp_path):
    renamed = {}
    for name, value in gpt2_tensors(seed=4).items():
        if "ln_f" in name:
            continue  # the original GPT has no final norm
        renamed[name.replace("wte.", "tokens_embed.").replace("wpe.", "positions_embed.")] = value
    directory = write_checkpoint(tmp_path / "gpt", OPENAI_GPT, renamed)
    ids = np.array([[5, 9, 17, 4, 3, 30, 2]], "int32")
    mask = np.ones_like(ids)
    config = dict(OPENAI_GPT, activation_function="gelu")
    backbone = from_huggingface(directory)  # HF's OpenAIGPT "gelu" is the tanh GELU
    got = ops.convert_to_numpy(
        backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"])
    hf = numpy_refs.numpy_gpt2(renamed, config, ids, mask, original_gpt=True,
                               activation="gelu_new")
    np.testing.assert_allclose(got, hf, atol=1e-4)


def test_original_gpt_round_trip(tmp_path):
    from keras_ctx.models.gpt.backbone import GPTBackbone

    backbone = GPTBackbone(vocabulary_size=40, num_layers=2, num_heads=2, hidden_size=8,
                           intermediate_size=32, max_sequence_length=10, normalize_first=False)
    rng = np.random.default_rng(9)
    for weight in backbone.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    directory = to_huggingface(backbone, tmp_path / "gpt")
    written = load_file(os.path.join(directory, "model.safetensors"))
    assert "tokens_embed.weight" in written and written["h.1.attn.c_attn.weight"].shape == (8, 24)
    with warnings.catch_warnings():  # the GELU-approximation warning, if any
        warnings.simplefilter("ignore")
        again = from_huggingface(directory)
    for ours, theirs in zip(backbone.weights, again.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs))

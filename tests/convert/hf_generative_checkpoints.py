"""Hugging Face checkpoints of the generative families (T5, mT5, BART) written by hand for the
converter tests.
"""

import numpy as np

from tests.convert.hf_checkpoints import random_tensors


BART = {"model_type": "bart", "architectures": ["BartForConditionalGeneration"],
        "vocab_size": 40, "d_model": 16, "encoder_layers": 2, "decoder_layers": 1,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 24,
        "decoder_ffn_dim": 24, "max_position_embeddings": 10, "activation_function": "gelu",
        "scale_embedding": False, "normalize_before": False, "dropout": 0.1,
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}


def bart_tensors(seed=1):
    c = BART
    v, d, f = c["vocab_size"], c["d_model"], c["encoder_ffn_dim"]
    shapes = {"model.shared.weight": (v, d), "final_logits_bias": (1, v),
              "lm_head.weight": (v, d)}

    def attention(p):
        for k in ("q", "k", "v", "out"):
            shapes[f"{p}.{k}_proj.weight"] = (d, d)
            shapes[f"{p}.{k}_proj.bias"] = (d,)
        shapes[f"{p}_layer_norm.weight"] = (d,)
        shapes[f"{p}_layer_norm.bias"] = (d,)

    for stack, layers in (("encoder", c["encoder_layers"]), ("decoder", c["decoder_layers"])):
        s = f"model.{stack}."
        shapes.update({s + "embed_tokens.weight": (v, d),
                       s + "embed_positions.weight": (c["max_position_embeddings"] + 2, d),
                       s + "layernorm_embedding.weight": (d,),
                       s + "layernorm_embedding.bias": (d,)})
        for i in range(layers):
            p = f"{s}layers.{i}"
            attention(p + ".self_attn")
            if stack == "decoder":
                attention(p + ".encoder_attn")
            shapes.update({p + ".fc1.weight": (f, d), p + ".fc1.bias": (f,),
                           p + ".fc2.weight": (d, f), p + ".fc2.bias": (d,),
                           p + ".final_layer_norm.weight": (d,),
                           p + ".final_layer_norm.bias": (d,)})
    tensors = random_tensors(shapes, seed)
    for name in list(tensors):
        if "norm" in name and name.endswith("weight"):
            tensors[name] = 1 + 0.1 * tensors[name]
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                 "lm_head.weight"):  # tied copies, as HF saves them
        tensors[name] = tensors["model.shared.weight"]
    return tensors


T5 = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "vocab_size": 40,
      "d_model": 16, "d_kv": 4, "d_ff": 24, "num_layers": 2, "num_decoder_layers": 2,
      "num_heads": 4, "relative_attention_num_buckets": 8,
      "relative_attention_max_distance": 12, "dropout_rate": 0.1,
      "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu", "tie_word_embeddings": True}


def t5_tensors(seed=2, c=T5):
    v, d, f, h, nb = c["vocab_size"], c["d_model"], c["d_ff"], c["num_heads"], \
        c["relative_attention_num_buckets"]
    inner = c["d_kv"] * h
    shapes = {"shared.weight": (v, d), "encoder.embed_tokens.weight": (v, d),
              "decoder.embed_tokens.weight": (v, d), "lm_head.weight": (v, d),
              "encoder.final_layer_norm.weight": (d,), "decoder.final_layer_norm.weight": (d,)}

    def attention(p):
        for k in "qkv":
            shapes[f"{p}.{k}.weight"] = (inner, d)
        shapes[f"{p}.o.weight"] = (d, inner)

    for stack in ("encoder", "decoder"):
        shapes[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (nb, h)
        for i in range(c["num_layers"]):
            p = f"{stack}.block.{i}.layer"
            attention(p + ".0.SelfAttention")
            shapes[p + ".0.layer_norm.weight"] = (d,)
            ffn = 1
            if stack == "decoder":
                attention(p + ".1.EncDecAttention")
                shapes[p + ".1.layer_norm.weight"] = (d,)
                ffn = 2
            wi = ("wi_0", "wi_1") if c["feed_forward_proj"].startswith("gated") else ("wi",)
            shapes.update({f"{p}.{ffn}.DenseReluDense.{w}.weight": (f, d) for w in wi})
            shapes.update({f"{p}.{ffn}.DenseReluDense.wo.weight": (d, f),
                           f"{p}.{ffn}.layer_norm.weight": (d,)})
    tensors = random_tensors(shapes, seed)
    for name in list(tensors):
        if "norm" in name:
            tensors[name] = 1 + 0.1 * tensors[name]
    tied = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    if c["tie_word_embeddings"]:
        tied += ("lm_head.weight",)
    for name in tied:
        tensors[name] = tensors["shared.weight"]
    return tensors


def _t5_inputs():
    # Long enough (11 > max_exact) for the logarithmic buckets.
    rng = np.random.default_rng(5)
    enc_ids = rng.integers(2, 40, (2, 11)).astype("int32")
    enc_mask = np.array([[1] * 11, [1] * 8 + [0] * 3], "int32")
    dec_ids = rng.integers(2, 40, (2, 9)).astype("int32")
    dec_mask = np.array([[1] * 9, [1] * 6 + [0] * 3], "int32")
    return {"encoder_token_ids": enc_ids * enc_mask, "encoder_padding_mask": enc_mask,
            "decoder_token_ids": dec_ids * dec_mask, "decoder_padding_mask": dec_mask}


# T5 v1.1 / mT5 (Xue et al. 2021): gated GELU, untied lm_head, and here
# num_heads * d_kv = 12 != d_model = 16 as in T5-3B/11B.
MT5 = dict(T5, model_type="mt5", architectures=["MT5ForConditionalGeneration"], d_kv=3,
           feed_forward_proj="gated-gelu", tie_word_embeddings=False, dropout_rate=0.0)

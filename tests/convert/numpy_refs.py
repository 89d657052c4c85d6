"""Checkpoint forward passes in numpy, read straight from HF-named tensors.

Written from the papers and Hugging Face's modeling code, independently of
keras_ctx (no Keras, no keras_ctx import).
"""

import math

import numpy as np

from tests import references


def gelu_new(x):
    # GELU's tanh approximation (Hendrycks & Gimpel 2016), HF "gelu_new".
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {"gelu": references.gelu, "gelu_new": gelu_new, "relu": lambda x: np.maximum(x, 0)}


def _f64(tensors):
    return {k: np.asarray(v, "float64") for k, v in tensors.items()}


def post_ln_layer(x, mask, t, names, heads, eps, act):
    """One BERT-style layer; `names` gives the tensor prefixes (torch Linear layout)."""
    def linear(y, p):
        return y @ t[p + ".weight"].T + t[p + ".bias"]

    def ln(y, p):
        return references.layer_norm(y, t[p + ".weight"], t[p + ".bias"], eps)

    batch, length, hidden = x.shape
    size = hidden // heads

    def split(y):
        return y.reshape(batch, length, heads, size).transpose(0, 2, 1, 3)

    q, k, v = (split(linear(x, names[n])) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size)
    scores = np.where(mask[:, None, None, :].astype(bool), scores, -1e30)
    context = (references.softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = ln(x + linear(context, names["attention_output"]), names["attention_norm"])
    hidden_ = act(linear(x, names["intermediate"]))
    return ln(x + linear(hidden_, names["output"]), names["output_norm"])


def bert_layer_names(i, prefix=""):
    p = f"{prefix}encoder.layer.{i}"
    return {"query": f"{p}.attention.self.query", "key": f"{p}.attention.self.key",
            "value": f"{p}.attention.self.value",
            "attention_output": f"{p}.attention.output.dense",
            "attention_norm": f"{p}.attention.output.LayerNorm",
            "intermediate": f"{p}.intermediate.dense", "output": f"{p}.output.dense",
            "output_norm": f"{p}.output.LayerNorm"}


def numpy_bert(tensors, config, ids, mask, segments, prefix="", roberta=False):
    """BERT (Devlin et al. 2019) / RoBERTa (Liu et al. 2019): last hidden state."""
    t = _f64(tensors)
    if roberta:
        # HF create_position_ids_from_input_ids: padding_idx + cumsum over real tokens.
        pad = config["pad_token_id"]
        real = (ids != pad).astype("int64")
        positions = np.cumsum(real, axis=1) * real + pad
    else:
        positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    e = prefix + "embeddings."
    x = (t[e + "word_embeddings.weight"][ids] + t[e + "position_embeddings.weight"][positions]
         + t[e + "token_type_embeddings.weight"][segments])
    eps = config["layer_norm_eps"]
    x = references.layer_norm(x, t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"], eps)
    for i in range(config["num_hidden_layers"]):
        x = post_ln_layer(x, mask, t, bert_layer_names(i, prefix), config["num_attention_heads"],
                          eps, ACTIVATIONS[config["hidden_act"]])
    return x


def numpy_albert(tensors, config, ids, mask, segments, prefix="albert."):
    """ALBERT (Lan et al. 2020): factorized embeddings, one layer applied L times."""
    t = _f64(tensors)
    e = prefix + "embeddings."
    length = ids.shape[1]
    x = (t[e + "word_embeddings.weight"][ids] + t[e + "position_embeddings.weight"][:length]
         + t[e + "token_type_embeddings.weight"][segments])
    eps = config["layer_norm_eps"]
    x = references.layer_norm(x, t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"], eps)
    m = prefix + "encoder.embedding_hidden_mapping_in"
    x = x @ t[m + ".weight"].T + t[m + ".bias"]
    p = prefix + "encoder.albert_layer_groups.0.albert_layers.0"
    names = {"query": f"{p}.attention.query", "key": f"{p}.attention.key",
             "value": f"{p}.attention.value", "attention_output": f"{p}.attention.dense",
             "attention_norm": f"{p}.attention.LayerNorm", "intermediate": f"{p}.ffn",
             "output": f"{p}.ffn_output", "output_norm": f"{p}.full_layer_layer_norm"}
    for _ in range(config["num_hidden_layers"]):
        x = post_ln_layer(x, mask, t, names, config["num_attention_heads"], eps,
                          ACTIVATIONS[config["hidden_act"]])
    return x


def numpy_xlnet(tensors, config, ids, mask, segments, prefix="transformer."):
    """XLNet (Yang et al. 2019) content stream, no memory, as HF XLNetModel."""
    t = _f64(tensors)
    d, heads = config["d_model"], config["n_head"]
    size = d // heads
    batch, length = ids.shape
    h = t[prefix + "word_embedding.weight"][ids]
    # Transformer-XL sinusoids over distances klen, ..., -qlen + 1.
    distances = np.arange(length, -length, -1.0)
    inv_freq = 1 / 10000 ** (np.arange(0, d, 2.0) / d)
    angles = distances[:, None] * inv_freq[None]
    pos_emb = np.concatenate([np.sin(angles), np.cos(angles)], -1)  # (2T, d)
    # Key j visible to query i if real, and i always sees itself.
    visible = mask[:, None, :].astype(bool) | np.eye(length, dtype=bool)[None]
    different = segments[:, :, None] != segments[:, None, :]
    i_idx, j_idx = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    for layer in range(config["n_layer"]):
        p = f"{prefix}layer.{layer}."
        a = p + "rel_attn."
        q = np.einsum("bid,dnh->binh", h, t[a + "q"])
        k = np.einsum("bid,dnh->binh", h, t[a + "k"])
        v = np.einsum("bid,dnh->binh", h, t[a + "v"])
        k_r = np.einsum("pd,dnh->pnh", pos_emb, t[a + "r"])
        ac = np.einsum("binh,bjnh->bnij", q + t[a + "r_w_bias"], k)
        bd_all = np.einsum("binh,pnh->bnip", q + t[a + "r_r_bias"], k_r)
        # Distance i - j sits in row klen - (i - j) of pos_emb.
        bd = bd_all[:, :, i_idx, length - i_idx + j_idx]
        ef_all = np.einsum("binh,snh->bnis", q + t[a + "r_s_bias"], t[a + "seg_embed"])
        ef = np.where(different[:, None], ef_all[..., 1:2], ef_all[..., 0:1])
        scores = (ac + bd + ef) / math.sqrt(size)
        scores = np.where(visible[:, None], scores, -1e30)
        attn = np.einsum("bnij,bjnh->binh", references.softmax(scores), v)
        out = np.einsum("binh,dnh->bid", attn, t[a + "o"])
        eps = config["layer_norm_eps"]
        h = references.layer_norm(out + h, t[a + "layer_norm.weight"], t[a + "layer_norm.bias"],
                                  eps)
        f = p + "ff."
        inner = ACTIVATIONS[config["ff_activation"]](
            h @ t[f + "layer_1.weight"].T + t[f + "layer_1.bias"])
        out = inner @ t[f + "layer_2.weight"].T + t[f + "layer_2.bias"]
        h = references.layer_norm(out + h, t[f + "layer_norm.weight"], t[f + "layer_norm.bias"],
                                  eps)
    return h


def mha(xq, xkv, w, heads, scale, allowed, bias=None):
    """Multi-head attention from torch-layout weights w = {q, k, v, o: (weight, bias or None)}."""
    def lin(x, name):
        weight, b = w[name]
        return x @ weight.T + (0 if b is None else b)

    batch, tq, d = xq.shape
    tk = xkv.shape[1]
    q = lin(xq, "q").reshape(batch, tq, heads, -1).transpose(0, 2, 1, 3)
    k = lin(xkv, "k").reshape(batch, tk, heads, -1).transpose(0, 2, 1, 3)
    v = lin(xkv, "v").reshape(batch, tk, heads, -1).transpose(0, 2, 1, 3)
    scores = q @ k.transpose(0, 1, 3, 2) * scale
    if bias is not None:
        scores = scores + bias
    scores = np.where(allowed[:, None], scores, -1e30)
    context = (references.softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, tq, -1)
    return lin(context, "o")


def _masks(query_mask, key_mask, causal):
    allowed = key_mask[:, None, :].astype(bool) & np.ones((1, query_mask.shape[1], 1), bool)
    if causal:
        t = query_mask.shape[1]
        allowed = allowed & np.tril(np.ones((t, key_mask.shape[1]), bool))[None]
    return allowed


def numpy_gpt2(tensors, config, ids, mask, prefix="transformer.", original_gpt=False,
               activation=None):
    """GPT-2 (Radford et al. 2019): pre-LN causal decoder with OpenAI's Conv1D (in, out).

    `original_gpt`: GPT (Radford et al. 2018): post-LN, tokens_embed/positions_embed,
    no final norm.
    """
    t = _f64(tensors)
    eps, heads = config["layer_norm_epsilon"], config["n_head"]
    act = ACTIVATIONS[activation or config["activation_function"]]

    def ln(x, p):
        return references.layer_norm(x, t[p + ".weight"], t[p + ".bias"], eps)

    length = ids.shape[1]
    token, position = ("tokens_embed", "positions_embed") if original_gpt else ("wte", "wpe")
    x = t[prefix + token + ".weight"][ids] + t[prefix + position + ".weight"][:length]
    allowed = _masks(mask, mask, causal=True)
    d = x.shape[-1]
    for i in range(config["n_layer"]):
        p = f"{prefix}h.{i}."
        a = x if original_gpt else ln(x, p + "ln_1")
        w, b = t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"]
        # Conv1D weights are (in, out): y = x W + b. As torch Linear: weight = W.T.
        weights = {"q": (w[:, :d].T, b[:d]), "k": (w[:, d:2 * d].T, b[d:2 * d]),
                   "v": (w[:, 2 * d:].T, b[2 * d:]),
                   "o": (t[p + "attn.c_proj.weight"].T, t[p + "attn.c_proj.bias"])}
        x = x + mha(a, a, weights, heads, 1 / math.sqrt(d // heads), allowed)
        if original_gpt:  # post-LN: n = ln_1(x + a); h = ln_2(n + mlp(n))
            x = ln(x, p + "ln_1")
        m = x if original_gpt else ln(x, p + "ln_2")
        hidden = act(m @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"])
        x = x + hidden @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
        if original_gpt:
            x = ln(x, p + "ln_2")
    return x if original_gpt else ln(x, prefix + "ln_f")


def numpy_bart(tensors, config, enc_ids, enc_mask, dec_ids, dec_mask, prefix="model."):
    """BART (Lewis et al. 2020) as HF BartModel: (encoder output, decoder output)."""
    t = _f64(tensors)
    heads = config["encoder_attention_heads"]
    d = config["d_model"]
    scale = (d // heads) ** -0.5

    def ln(x, p):
        return references.layer_norm(x, t[p + ".weight"], t[p + ".bias"], 1e-5)

    def attn_weights(p):
        return {k: (t[f"{p}.{k}_proj.weight"], t[f"{p}.{k}_proj.bias"]) for k in "qkv"} | {
            "o": (t[f"{p}.out_proj.weight"], t[f"{p}.out_proj.bias"])}

    def ffn(x, p):
        hidden = references.gelu(x @ t[p + ".fc1.weight"].T + t[p + ".fc1.bias"])
        return hidden @ t[p + ".fc2.weight"].T + t[p + ".fc2.bias"]

    def embed(ids, stack):
        # BartLearnedPositionalEmbedding: row = position + 2.
        positions = np.arange(ids.shape[1]) + 2
        table = t[f"{prefix}{stack}.embed_positions.weight"]
        x = t[prefix + "shared.weight"][ids] + table[positions]
        return ln(x, f"{prefix}{stack}.layernorm_embedding")

    x = embed(enc_ids, "encoder")
    allowed = _masks(enc_mask, enc_mask, causal=False)
    for i in range(config["encoder_layers"]):
        p = f"{prefix}encoder.layers.{i}"
        x = ln(x + mha(x, x, attn_weights(p + ".self_attn"), heads, scale, allowed),
               p + ".self_attn_layer_norm")
        x = ln(x + ffn(x, p), p + ".final_layer_norm")
    y = embed(dec_ids, "decoder")
    self_allowed = _masks(dec_mask, dec_mask, causal=True)
    cross_allowed = _masks(dec_mask, enc_mask, causal=False)
    for i in range(config["decoder_layers"]):
        p = f"{prefix}decoder.layers.{i}"
        y = ln(y + mha(y, y, attn_weights(p + ".self_attn"), heads, scale, self_allowed),
               p + ".self_attn_layer_norm")
        y = ln(y + mha(y, x, attn_weights(p + ".encoder_attn"), heads, scale, cross_allowed),
               p + ".encoder_attn_layer_norm")
        y = ln(y + ffn(y, p), p + ".final_layer_norm")
    return x, y


def bart_lm_logits(tensors, decoder_output, prefix="model."):
    """HF BartForConditionalGeneration: lm_head(y) + final_logits_bias, lm_head = shared."""
    t = _f64(tensors)
    return decoder_output @ t[prefix + "shared.weight"].T + t["final_logits_bias"][0]


def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """HF T5Attention._relative_position_bucket, in numpy (Raffel et al. 2020)."""
    buckets = np.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0) * num_buckets
        relative_position = np.abs(relative_position)
    else:
        relative_position = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    with np.errstate(divide="ignore"):
        large = max_exact + (np.log(relative_position / max_exact)
                             / math.log(max_distance / max_exact)
                             * (num_buckets - max_exact))
    large = np.minimum(np.where(is_small, 0, large).astype("int64"), num_buckets - 1)
    return buckets + np.where(is_small, relative_position, large)


def numpy_t5(tensors, config, enc_ids, enc_mask, dec_ids, dec_mask):
    """T5 as HF T5Model: (encoder output, decoder output).

    feed_forward_proj "gated-gelu" (v1.1, mT5): HF's T5DenseGatedActDense,
    wo(gelu_new(wi_0 x) * wi_1 x); else T5DenseActDense, wo(act(wi x)).
    """
    t = _f64(tensors)
    heads, eps = config["num_heads"], config["layer_norm_epsilon"]
    nb, md = config["relative_attention_num_buckets"], config["relative_attention_max_distance"]

    def rms(x, name):
        return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * t[name]

    def weights(p):
        return {k: (t[f"{p}.{k}.weight"], None) for k in "qkvo"}

    def position_bias(table, tq, tk, bidirectional):
        relative = np.arange(tk)[None, :] - np.arange(tq)[:, None]  # key - query
        values = table[t5_bucket(relative, bidirectional, nb, md)]  # (q, k, heads)
        return values.transpose(2, 0, 1)[None]

    projection = config.get("feed_forward_proj", "relu")

    def ffn(x, p):
        f = p + ".DenseReluDense."
        if projection == "gated-gelu":
            hidden = gelu_new(x @ t[f + "wi_0.weight"].T) * (x @ t[f + "wi_1.weight"].T)
        else:
            hidden = ACTIVATIONS[projection](x @ t[f + "wi.weight"].T)
        return hidden @ t[f + "wo.weight"].T

    x = t["shared.weight"][enc_ids]
    n = enc_ids.shape[1]
    bias = position_bias(t["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                         n, n, True)
    allowed = _masks(enc_mask, enc_mask, causal=False)
    for i in range(config["num_layers"]):
        p = f"encoder.block.{i}.layer"
        h = rms(x, p + ".0.layer_norm.weight")
        x = x + mha(h, h, weights(p + ".0.SelfAttention"), heads, 1.0, allowed, bias)
        x = x + ffn(rms(x, p + ".1.layer_norm.weight"), p + ".1")
    x = rms(x, "encoder.final_layer_norm.weight")
    y = t["shared.weight"][dec_ids]
    m = dec_ids.shape[1]
    bias = position_bias(t["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                         m, m, False)
    self_allowed = _masks(dec_mask, dec_mask, causal=True)
    cross_allowed = _masks(dec_mask, enc_mask, causal=False)
    for i in range(config.get("num_decoder_layers") or config["num_layers"]):
        p = f"decoder.block.{i}.layer"
        h = rms(y, p + ".0.layer_norm.weight")
        y = y + mha(h, h, weights(p + ".0.SelfAttention"), heads, 1.0, self_allowed, bias)
        h = rms(y, p + ".1.layer_norm.weight")
        y = y + mha(h, x, weights(p + ".1.EncDecAttention"), heads, 1.0, cross_allowed)
        y = y + ffn(rms(y, p + ".2.layer_norm.weight"), p + ".2")
    return x, rms(y, "decoder.final_layer_norm.weight")


def numpy_electra(tensors, ids, mask, segments, heads, num_layers, prefix="electra.",
                  eps=1e-12):
    """ELECTRA (Clark et al. 2020): BERT's encoder after an E -> H projection."""
    t = _f64(tensors)
    e = prefix + "embeddings."
    x = (t[e + "word_embeddings.weight"][ids]
         + t[e + "position_embeddings.weight"][:ids.shape[1]]
         + t[e + "token_type_embeddings.weight"][segments])
    x = references.layer_norm(x, t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"], eps)
    if prefix + "embeddings_project.weight" in t:
        x = x @ t[prefix + "embeddings_project.weight"].T + t[prefix + "embeddings_project.bias"]
    for i in range(num_layers):
        x = post_ln_layer(x, mask, t, bert_layer_names(i, prefix), heads, eps, references.gelu)
    return x


def numpy_gpt_neo(tensors, config, ids, mask, prefix="transformer."):
    """GPT-Neo (HF modeling_gpt_neo): GPT-2's pre-LN decoder with per-layer "global"
    (causal) or "local" attention, the local buffer being
    tril(ones) XOR tril(ones, -window_size); scores are NOT scaled by 1/sqrt(d);
    q/k/v projections bias-free torch Linear; MLP torch Linear (out, in)."""
    t = _f64(tensors)
    eps, heads = config["layer_norm_epsilon"], config["num_heads"]
    act = ACTIVATIONS[config["activation_function"]]
    layers = [kind for kinds, repeat in config["attention_types"] for kind in kinds * repeat]

    def ln(x, p):
        return references.layer_norm(x, t[p + ".weight"], t[p + ".bias"], eps)

    length = ids.shape[1]
    x = t[prefix + "wte.weight"][ids] + t[prefix + "wpe.weight"][:length]
    causal = np.tril(np.ones((length, length), bool))
    local = np.logical_xor(causal, np.tril(causal, -config["window_size"]))
    for i, kind in enumerate(layers):
        p = f"{prefix}h.{i}."
        a = ln(x, p + "ln_1")
        allowed = mask[:, None, :].astype(bool) & (causal if kind == "global" else local)[None]
        s = p + "attn.attention."
        weights = {"q": (t[s + "q_proj.weight"], None), "k": (t[s + "k_proj.weight"], None),
                   "v": (t[s + "v_proj.weight"], None),
                   "o": (t[s + "out_proj.weight"], t[s + "out_proj.bias"])}
        x = x + mha(a, a, weights, heads, 1.0, allowed)
        m = ln(x, p + "ln_2")
        hidden = act(m @ t[p + "mlp.c_fc.weight"].T + t[p + "mlp.c_fc.bias"])
        x = x + hidden @ t[p + "mlp.c_proj.weight"].T + t[p + "mlp.c_proj.bias"]
    return ln(x, prefix + "ln_f")


def t5_lm_logits(tensors, config, decoder_output):
    """HF T5ForConditionalGeneration's lm_logits from the decoder output.

    Tied: lm_head(y * d_model^-0.5) with lm_head = shared; untied: lm_head(y).
    """
    t = _f64(tensors)
    if config.get("tie_word_embeddings", True):
        return decoder_output * config["d_model"] ** -0.5 @ t["shared.weight"].T
    return decoder_output @ t["lm_head.weight"].T

"""A tiny Hugging Face XLM checkpoint (XLMWithLMHeadModel layout) and its numpy forward,
for the converter's tests and the CLM objective's."""

import numpy as np

from tests import references
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import random_tensors

XLM = {"model_type": "xlm", "architectures": ["XLMWithLMHeadModel"], "vocab_size": 40,
       "emb_dim": 16, "n_layers": 2, "n_heads": 2, "n_langs": 3, "use_lang_emb": True,
       "causal": False, "dropout": 0.1, "attention_dropout": 0.1,
       "max_position_embeddings": 20, "layer_norm_eps": 1e-12, "gelu_activation": True,
       "sinusoidal_embeddings": False, "asm": False}


def xlm_tensors(config=XLM, seed=0):
    h, v, p = config["emb_dim"], config["vocab_size"], config["max_position_embeddings"]
    t = "transformer."
    shapes = {t + "position_ids": (1, p), t + "position_embeddings.weight": (p, h),
              t + "embeddings.weight": (v, h), t + "layer_norm_emb.weight": (h,),
              t + "layer_norm_emb.bias": (h,),
              "pred_layer.proj.weight": (v, h), "pred_layer.proj.bias": (v,)}
    if config["use_lang_emb"]:
        shapes[t + "lang_embeddings.weight"] = (config["n_langs"], h)
    for i in range(config["n_layers"]):
        for lin in ("q_lin", "k_lin", "v_lin", "out_lin"):
            shapes[f"{t}attentions.{i}.{lin}.weight"] = (h, h)
            shapes[f"{t}attentions.{i}.{lin}.bias"] = (h,)
        shapes[f"{t}ffns.{i}.lin1.weight"] = (4 * h, h)
        shapes[f"{t}ffns.{i}.lin1.bias"] = (4 * h,)
        shapes[f"{t}ffns.{i}.lin2.weight"] = (h, 4 * h)
        shapes[f"{t}ffns.{i}.lin2.bias"] = (h,)
        for norm in ("layer_norm1", "layer_norm2"):
            shapes[f"{t}{norm}.{i}.weight"] = (h,)
            shapes[f"{t}{norm}.{i}.bias"] = (h,)
    tensors = random_tensors(shapes, seed)
    for name in tensors:  # norms near one
        if "norm" in name and name.endswith(".weight"):
            tensors[name] = (1 + 0.1 * np.random.default_rng(1).normal(size=tensors[name].shape)
                             ).astype("float32")
    return tensors


def numpy_xlm(tensors, config, ids, mask, positions, languages, prefix="transformer."):
    """HF XLMModel's forward (no dropout), read from the tensors."""
    t = {k[len(prefix):]: np.asarray(v, "float64") for k, v in tensors.items()
         if k.startswith(prefix)}
    eps = config["layer_norm_eps"]
    x = t["embeddings.weight"][ids] + t["position_embeddings.weight"][positions]
    if config["use_lang_emb"] and config["n_langs"] > 1:
        x = x + t["lang_embeddings.weight"][languages]
    x = references.layer_norm(x, t["layer_norm_emb.weight"], t["layer_norm_emb.bias"], eps)
    x = x * mask[..., None]
    for i in range(config["n_layers"]):
        names = {"query": f"attentions.{i}.q_lin", "key": f"attentions.{i}.k_lin",
                 "value": f"attentions.{i}.v_lin", "attention_output": f"attentions.{i}.out_lin",
                 "attention_norm": f"layer_norm1.{i}", "intermediate": f"ffns.{i}.lin1",
                 "output": f"ffns.{i}.lin2", "output_norm": f"layer_norm2.{i}"}
        x = numpy_refs.post_ln_layer(x, mask, t, names, config["n_heads"], eps,
                                     references.gelu)
    return x


def transformers_clm(directory, **config):
    """A tiny causal XLMWithLMHeadModel of transformers (torch), its weights moved far from
    their initial values (the bias not zero), saved to `directory`; returns the model."""
    import pytest

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.XLMConfig(
        vocab_size=40, emb_dim=16, n_layers=2, n_heads=2, n_langs=2, causal=True,
        dropout=0.0, attention_dropout=0.0, max_position_embeddings=20, use_lang_emb=True,
        **config)
    torch.manual_seed(0)
    reference = transformers.XLMWithLMHeadModel(config).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    reference.save_pretrained(directory)
    return reference

"""Checkpoints with their pretraining heads (BERT's MLM, ELECTRA's generator), and the heads'
NumPy reference.
"""

import numpy as np

from tests import references
from tests.convert.hf_checkpoints import (
    bert_layer_shapes,
    random_tensors,
)


BERT = {"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 30,
        "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 24, "hidden_act": "gelu", "max_position_embeddings": 10,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12}


def bert_mlm_tensors(seed=7):
    h, v = 16, 30
    shapes = {"bert.embeddings.word_embeddings.weight": (v, h),
              "bert.embeddings.position_embeddings.weight": (10, h),
              "bert.embeddings.token_type_embeddings.weight": (2, h),
              "bert.embeddings.LayerNorm.weight": (h,), "bert.embeddings.LayerNorm.bias": (h,),
              "cls.predictions.transform.dense.weight": (h, h),
              "cls.predictions.transform.dense.bias": (h,),
              "cls.predictions.transform.LayerNorm.weight": (h,),
              "cls.predictions.transform.LayerNorm.bias": (h,),
              "cls.predictions.bias": (v,)}
    shapes.update(bert_layer_shapes("bert.", 1, h, 24))
    tensors = random_tensors(shapes, seed)
    # BertForMaskedLM has no pooler; its decoder is the tied word embedding.
    tensors["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
    return tensors


def _mlm_reference(t, x, dense, norm, bias, table, act, eps):
    t = {k: v.astype("float64") for k, v in t.items()}
    y = act(x @ t[dense + ".weight"].T + t[dense + ".bias"])
    y = references.layer_norm(y, t[norm + ".weight"], t[norm + ".bias"], eps)
    return y @ t[table].T + t[bias]


def electra_generator_checkpoint(seed=12):
    """(config, tensors) of a tiny ElectraForMaskedLM (a generator with its MLM head)."""
    from tests.convert.hf_checkpoints import ELECTRA, electra_tensors

    config = dict(ELECTRA, architectures=["ElectraForMaskedLM"])
    tensors = {k: v for k, v in electra_tensors().items()
               if not k.startswith("discriminator_predictions")}
    rng = np.random.default_rng(seed)
    tensors.update({
        "generator_predictions.dense.weight": rng.normal(0, .3, (8, 16)).astype("float32"),
        "generator_predictions.dense.bias": rng.normal(0, .3, 8).astype("float32"),
        "generator_predictions.LayerNorm.weight": (1 + rng.normal(0, .1, 8)).astype("float32"),
        "generator_predictions.LayerNorm.bias": rng.normal(0, .1, 8).astype("float32"),
        "generator_lm_head.bias": rng.normal(0, .3, 30).astype("float32"),
        "generator_lm_head.weight": tensors["electra.embeddings.word_embeddings.weight"]})
    return config, tensors

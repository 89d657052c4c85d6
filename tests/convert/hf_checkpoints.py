"""Hugging Face checkpoints written by hand for the converter tests: configs, random tensors in
each family's names, the files beside them.
"""

import json
import os
import numpy as np
from safetensors.numpy import save_file


def random_tensors(shapes, seed):
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("position_ids"):
            tensors[name] = np.arange(shape[1], dtype="int64")[None]
        elif "LayerNorm.weight" in name or "layer_norm.weight" in name:
            tensors[name] = (1 + rng.normal(0, 0.1, shape)).astype("float32")
        else:
            tensors[name] = rng.normal(0, 0.3, shape).astype("float32")
    return tensors


def write_checkpoint(directory, config, tensors):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump(config, handle)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    return str(directory)


def bert_layer_shapes(prefix, layers, h, f):
    shapes = {}
    for i in range(layers):
        p = f"{prefix}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            shapes[f"{p}attention.self.{n}.weight"] = (h, h)
            shapes[f"{p}attention.self.{n}.bias"] = (h,)
        shapes.update({
            f"{p}attention.output.dense.weight": (h, h), f"{p}attention.output.dense.bias": (h,),
            f"{p}attention.output.LayerNorm.weight": (h,),
            f"{p}attention.output.LayerNorm.bias": (h,),
            f"{p}intermediate.dense.weight": (f, h), f"{p}intermediate.dense.bias": (f,),
            f"{p}output.dense.weight": (h, f), f"{p}output.dense.bias": (h,),
            f"{p}output.LayerNorm.weight": (h,), f"{p}output.LayerNorm.bias": (h,),
        })
    return shapes


ROBERTA = {"model_type": "roberta", "architectures": ["RobertaForMaskedLM"], "vocab_size": 30,
           "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 24, "hidden_act": "gelu", "max_position_embeddings": 14,
           "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1,
           "bos_token_id": 0, "eos_token_id": 2, "hidden_dropout_prob": 0.1}


def roberta_tensors(seed=0):
    c = ROBERTA
    v, h, p = c["vocab_size"], c["hidden_size"], c["max_position_embeddings"]
    shapes = {"roberta.embeddings.word_embeddings.weight": (v, h),
              "roberta.embeddings.position_embeddings.weight": (p, h),
              "roberta.embeddings.token_type_embeddings.weight": (1, h),
              "roberta.embeddings.LayerNorm.weight": (h,),
              "roberta.embeddings.LayerNorm.bias": (h,),
              # RobertaForMaskedLM: an LM head and no pooler.
              "lm_head.dense.weight": (h, h), "lm_head.dense.bias": (h,),
              "lm_head.layer_norm.weight": (h,), "lm_head.layer_norm.bias": (h,),
              "lm_head.bias": (v,)}
    shapes.update(bert_layer_shapes("roberta.", c["num_hidden_layers"], h,
                                    c["intermediate_size"]))
    return random_tensors(shapes, seed)


ALBERT = {"model_type": "albert", "architectures": ["AlbertForMaskedLM"], "vocab_size": 40,
          "embedding_size": 8, "hidden_size": 16, "num_hidden_layers": 3,
          "num_hidden_groups": 1, "inner_group_num": 1, "num_attention_heads": 2,
          "intermediate_size": 32, "hidden_act": "gelu_new", "max_position_embeddings": 12,
          "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.0}


def albert_tensors(seed=1):
    c = ALBERT
    v, e, h, f = c["vocab_size"], c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    a, g = "albert.", "albert.encoder.albert_layer_groups.0.albert_layers.0."
    shapes = {
        a + "embeddings.word_embeddings.weight": (v, e),
        a + "embeddings.position_embeddings.weight": (c["max_position_embeddings"], e),
        a + "embeddings.token_type_embeddings.weight": (2, e),
        a + "embeddings.LayerNorm.weight": (e,), a + "embeddings.LayerNorm.bias": (e,),
        a + "embeddings.position_ids": (1, c["max_position_embeddings"]),
        a + "encoder.embedding_hidden_mapping_in.weight": (h, e),
        a + "encoder.embedding_hidden_mapping_in.bias": (h,),
        g + "attention.query.weight": (h, h), g + "attention.query.bias": (h,),
        g + "attention.key.weight": (h, h), g + "attention.key.bias": (h,),
        g + "attention.value.weight": (h, h), g + "attention.value.bias": (h,),
        g + "attention.dense.weight": (h, h), g + "attention.dense.bias": (h,),
        g + "attention.LayerNorm.weight": (h,), g + "attention.LayerNorm.bias": (h,),
        g + "ffn.weight": (f, h), g + "ffn.bias": (f,),
        g + "ffn_output.weight": (h, f), g + "ffn_output.bias": (h,),
        g + "full_layer_layer_norm.weight": (h,), g + "full_layer_layer_norm.bias": (h,),
        a + "pooler.weight": (h, h), a + "pooler.bias": (h,),
        # AlbertForMaskedLM's head.
        "predictions.bias": (v,), "predictions.dense.weight": (e, h),
        "predictions.dense.bias": (e,), "predictions.LayerNorm.weight": (e,),
        "predictions.LayerNorm.bias": (e,), "predictions.decoder.weight": (v, e),
        "predictions.decoder.bias": (v,),
    }
    return random_tensors(shapes, seed)


XLNET = {"model_type": "xlnet", "architectures": ["XLNetLMHeadModel"], "vocab_size": 32,
         "d_model": 16, "n_layer": 2, "n_head": 2, "d_head": 8, "d_inner": 24,
         "ff_activation": "gelu", "untie_r": True, "attn_type": "bi", "bi_data": False,
         "clamp_len": -1, "mem_len": None, "layer_norm_eps": 1e-12, "dropout": 0.1}


def xlnet_tensors(seed=2):
    c = XLNET
    d, n, s, f = c["d_model"], c["n_head"], c["d_head"], c["d_inner"]
    shapes = {"transformer.word_embedding.weight": (c["vocab_size"], d),
              "transformer.mask_emb": (1, 1, d), "lm_loss.bias": (c["vocab_size"],)}
    for i in range(c["n_layer"]):
        p = f"transformer.layer.{i}."
        for name in "qkvor":
            shapes[f"{p}rel_attn.{name}"] = (d, n, s)
        for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
            shapes[f"{p}rel_attn.{name}"] = (n, s)
        shapes.update({
            f"{p}rel_attn.seg_embed": (2, n, s),
            f"{p}rel_attn.layer_norm.weight": (d,), f"{p}rel_attn.layer_norm.bias": (d,),
            f"{p}ff.layer_norm.weight": (d,), f"{p}ff.layer_norm.bias": (d,),
            f"{p}ff.layer_1.weight": (f, d), f"{p}ff.layer_1.bias": (f,),
            f"{p}ff.layer_2.weight": (d, f), f"{p}ff.layer_2.bias": (d,),
        })
    return random_tensors(shapes, seed)


ELECTRA = {"model_type": "electra", "architectures": ["ElectraForPreTraining"],
           "vocab_size": 30, "embedding_size": 8, "hidden_size": 16, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 24, "hidden_act": "gelu",
           "max_position_embeddings": 12, "type_vocab_size": 2, "layer_norm_eps": 1e-12}


def electra_tensors(seed=3, config=ELECTRA):
    v, e, h = config["vocab_size"], config["embedding_size"], config["hidden_size"]
    shapes = {"electra.embeddings.word_embeddings.weight": (v, e),
              "electra.embeddings.position_embeddings.weight": (12, e),
              "electra.embeddings.token_type_embeddings.weight": (2, e),
              "electra.embeddings.LayerNorm.weight": (e,),
              "electra.embeddings.LayerNorm.bias": (e,),
              "electra.embeddings_project.weight": (h, e),
              "electra.embeddings_project.bias": (h,),
              # ElectraForPreTraining's head.
              "discriminator_predictions.dense.weight": (h, h),
              "discriminator_predictions.dense.bias": (h,),
              "discriminator_predictions.dense_prediction.weight": (1, h),
              "discriminator_predictions.dense_prediction.bias": (1,)}
    shapes.update(bert_layer_shapes("electra.", config["num_hidden_layers"], h,
                                    config["intermediate_size"]))
    return random_tensors(shapes, seed)

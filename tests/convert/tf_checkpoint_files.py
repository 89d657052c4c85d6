"""google-research TF1 checkpoints written by hand for the converter tests."""

import json
import os

import numpy as np
import tensorflow as tf

BERT_CONFIG = {"vocab_size": 30, "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 4, "intermediate_size": 24, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
               "max_position_embeddings": 12, "type_vocab_size": 2, "initializer_range": 0.02}


def bert_layer_variables(root, layers, h, f, shapes):
    """Adds the shapes of google-research/bert's encoder layers under `root` to `shapes`."""
    for i in range(layers):
        p = f"{root}encoder/layer_{i}/"
        for n in ("query", "key", "value"):
            shapes[f"{p}attention/self/{n}/kernel"] = (h, h)
            shapes[f"{p}attention/self/{n}/bias"] = (h,)
        shapes.update({
            f"{p}attention/output/dense/kernel": (h, h), f"{p}attention/output/dense/bias": (h,),
            f"{p}attention/output/LayerNorm/gamma": (h,),
            f"{p}attention/output/LayerNorm/beta": (h,),
            f"{p}intermediate/dense/kernel": (h, f), f"{p}intermediate/dense/bias": (f,),
            f"{p}output/dense/kernel": (f, h), f"{p}output/dense/bias": (h,),
            f"{p}output/LayerNorm/gamma": (h,), f"{p}output/LayerNorm/beta": (h,)})


def bert_tf_variables(seed=0):
    """The variables of google-research/bert's modeling.py + run_pretraining.py."""
    c = BERT_CONFIG
    v, h, f = c["vocab_size"], c["hidden_size"], c["intermediate_size"]
    shapes = {"bert/embeddings/word_embeddings": (v, h),
              "bert/embeddings/token_type_embeddings": (2, h),
              "bert/embeddings/position_embeddings": (c["max_position_embeddings"], h),
              "bert/embeddings/LayerNorm/gamma": (h,), "bert/embeddings/LayerNorm/beta": (h,),
              "bert/pooler/dense/kernel": (h, h), "bert/pooler/dense/bias": (h,),
              # Pretraining heads and optimizer state, which the backbone skips.
              "cls/predictions/transform/dense/kernel": (h, h),
              "cls/predictions/output_bias": (v,),
              "cls/seq_relationship/output_weights": (2, h),
              "bert/embeddings/word_embeddings/adam_m": (v, h)}
    bert_layer_variables("bert/", c["num_hidden_layers"], h, f, shapes)
    rng = np.random.default_rng(seed)
    values = {name: rng.normal(0, 0.3, shape).astype("float32") for name, shape in shapes.items()}
    values["global_step"] = np.array(1000, "int64")
    return values


def save_tf1_checkpoint(directory, variables, config, config_name, prefix):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, config_name), "w") as handle:
        json.dump(config, handle)
    graph = tf.Graph()
    with graph.as_default():
        made = [tf.compat.v1.Variable(value, name=name) for name, value in variables.items()]
        saver = tf.compat.v1.train.Saver(made)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(directory, prefix), write_meta_graph=False)
    return str(directory)


def electra_tf_variables(seed=4):
    """google-research/electra: discriminator, generator and shared embeddings in one file."""
    v, e, h, g = 30, 32, 128, 64
    shapes = {"electra/embeddings/word_embeddings": (v, e),
              "electra/embeddings/position_embeddings": (12, e),
              "electra/embeddings/token_type_embeddings": (2, e),
              "electra/embeddings/LayerNorm/gamma": (e,), "electra/embeddings/LayerNorm/beta": (e,),
              "electra/embeddings_project/kernel": (e, h), "electra/embeddings_project/bias": (h,),
              "generator/embeddings_project/kernel": (e, g),
              "generator/embeddings_project/bias": (g,),
              "generator_predictions/dense/kernel": (g, e),
              "generator_predictions/output_bias": (v,),
              "discriminator_predictions/dense/kernel": (h, h),
              "discriminator_predictions/dense_1/kernel": (h, 1)}
    bert_layer_variables("electra/", 2, h, 64, shapes)
    bert_layer_variables("generator/", 2, g, 32, shapes)
    rng = np.random.default_rng(seed)
    values = {n: rng.normal(0, 0.3, s).astype("float32") for n, s in shapes.items()}
    values["global_step"] = np.array(5, "int64")
    return values

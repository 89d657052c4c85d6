"""HF GPT-Neo checkpoints (alternating global / local attention) both ways."""

import json
import os

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from keras_ctx.models.gpt.backbone import GPTBackbone
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import random_tensors, write_checkpoint

GPT_NEO = {"model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"], "vocab_size": 40,
           "hidden_size": 16, "num_layers": 4, "num_heads": 4,
           "attention_types": [[["global", "local"], 2]], "window_size": 3,
           "max_position_embeddings": 12, "intermediate_size": None,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "resid_dropout": 0.0, "embed_dropout": 0.0, "attention_dropout": 0.0}


def gpt_neo_tensors(seed=0, config=GPT_NEO):
    v, d, p = config["vocab_size"], config["hidden_size"], config["max_position_embeddings"]
    shapes = {"transformer.wte.weight": (v, d), "transformer.wpe.weight": (p, d),
              "transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,),
              "lm_head.weight": (v, d)}
    for i in range(config["num_layers"]):
        q = f"transformer.h.{i}."
        shapes.update({q + "ln_1.weight": (d,), q + "ln_1.bias": (d,), q + "ln_2.weight": (d,),
                       q + "ln_2.bias": (d,), q + "attn.attention.out_proj.weight": (d, d),
                       q + "attn.attention.out_proj.bias": (d,),
                       q + "mlp.c_fc.weight": (4 * d, d), q + "mlp.c_fc.bias": (4 * d,),
                       q + "mlp.c_proj.weight": (d, 4 * d), q + "mlp.c_proj.bias": (d,)})
        for part in "qkv":
            shapes[q + f"attn.attention.{part}_proj.weight"] = (d, d)
    tensors = random_tensors(shapes, seed)
    for name in list(tensors):
        if ".ln_" in name and name.endswith(".weight"):
            tensors[name] = 1 + 0.1 * tensors[name]
    # The causal buffers older checkpoints persisted (skipped on load).
    tensors["transformer.h.1.attn.attention.bias"] = np.tril(np.ones((p, p), bool))[None, None]
    tensors["transformer.h.1.attn.attention.masked_bias"] = np.array(-1e9, "float32")
    return tensors


def rows():
    ids = np.array([[5, 9, 17, 4, 3, 30, 2, 8, 11, 19, 23, 1],
                    [7, 22, 13, 1, 6, 6, 31, 35, 0, 0, 0, 0]], "int32")
    mask = np.array([[1] * 12, [1] * 8 + [0] * 4], "int32")
    return ids, mask


def forward(backbone, ids, mask):
    out = backbone({"token_ids": ids, "padding_mask": mask})
    return ops.convert_to_numpy(out["sequence_output"])


def test_hf_gpt_neo_checkpoint_matches_numpy_alternating_forward(tmp_path):
    tensors = gpt_neo_tensors()
    backbone = from_huggingface(write_checkpoint(tmp_path / "neo", GPT_NEO, tensors))
    assert backbone.attention_types == ["dense", "local", "dense", "local"]
    ids, mask = rows()
    got = forward(backbone, ids, mask)
    want = numpy_refs.numpy_gpt_neo(tensors, GPT_NEO, ids, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)
    # The local layers and the unscaled scores both matter at these sizes.
    all_global = dict(GPT_NEO, attention_types=[[["global"], 4]])
    dense = numpy_refs.numpy_gpt_neo(tensors, all_global, ids, mask)
    assert np.abs(dense[real] - want[real]).max() > 1e-2


def test_random_backbone_round_trips_through_hf_layout_exactly(tmp_path):
    backbone = GPTBackbone(vocabulary_size=40, num_layers=4, num_heads=4, hidden_size=16,
                           intermediate_size=64, max_sequence_length=12, dropout=0.0,
                           attention_pattern="alternating", window_size=3,
                           attention_scale=1.0, use_qkv_bias=False)
    directory = to_huggingface(backbone, tmp_path / "out")  # default type: gpt_neo
    with open(os.path.join(directory, "config.json")) as handle:
        config = json.load(handle)
    assert config["model_type"] == "gpt_neo"
    assert config["attention_types"] == [[["global", "local"], 2]]
    assert config["attention_layers"] == ["global", "local", "global", "local"]
    tensors = load_file(os.path.join(directory, "model.safetensors"))
    expected = set(gpt_neo_tensors()) - {"lm_head.weight", "transformer.h.1.attn.attention.bias",
                                         "transformer.h.1.attn.attention.masked_bias"}
    assert {"transformer." + name for name in tensors} == expected
    assert tensors["h.0.attn.attention.q_proj.weight"].shape == (16, 16)
    assert tensors["h.0.mlp.c_fc.weight"].shape == (64, 16)  # torch Linear (out, in)

    ids, mask = rows()
    ours = forward(backbone, ids, mask)
    real = mask.astype(bool)
    want = numpy_refs.numpy_gpt_neo(tensors, config, ids, mask, prefix="")
    np.testing.assert_allclose(ours[real], want[real], atol=1e-4)

    revived = from_huggingface(directory)
    assert revived.get_config() == dict(backbone.get_config(), name=revived.name,
                                        attention_pattern=["dense", "local"] * 2,
                                        scale_residual_init=False)
    for a, b in zip(backbone.weights, revived.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(a), ops.convert_to_numpy(b))
    np.testing.assert_array_equal(forward(revived, ids, mask), ours)
    # And back out again: the same tensors, bit for bit.
    again = load_file(os.path.join(to_huggingface(revived, tmp_path / "again"),
                                   "model.safetensors"))
    assert set(again) == set(tensors)
    for name in tensors:
        np.testing.assert_array_equal(again[name], tensors[name])


def test_hf_checkpoint_round_trips_exactly(tmp_path):
    tensors = gpt_neo_tensors(1)
    backbone = from_huggingface(write_checkpoint(tmp_path / "neo", GPT_NEO, tensors))
    exported = load_file(os.path.join(to_huggingface(backbone, tmp_path / "out"),
                                      "model.safetensors"))
    for name, value in exported.items():
        np.testing.assert_array_equal(value, tensors["transformer." + name])


def test_wrong_shapes_and_configs_fail_clearly(tmp_path):
    bad = dict(GPT_NEO, attention_types=[[["global", "local"], 3]])
    with pytest.raises(CheckpointError, match="6 layers but num_layers is 4"):
        from_huggingface(write_checkpoint(tmp_path / "a", bad, gpt_neo_tensors()))
    bad = dict(GPT_NEO, attention_types=[[["global", "sparse"], 2]])
    with pytest.raises(CheckpointError, match="'sparse'"):
        from_huggingface(write_checkpoint(tmp_path / "b", bad, gpt_neo_tensors()))
    gpt2_shaped = GPTBackbone(vocabulary_size=40, num_layers=2, num_heads=4, hidden_size=16,
                              intermediate_size=64, max_sequence_length=12)
    with pytest.raises(CheckpointError, match="attention_scale.*biases"):
        to_huggingface(gpt2_shaped, tmp_path / "c", model_type="gpt_neo")
    gpt3_shaped = GPTBackbone(vocabulary_size=40, num_layers=2, num_heads=4, hidden_size=16,
                              intermediate_size=64, max_sequence_length=12,
                              attention_pattern="alternating", window_size=3)
    with pytest.raises(CheckpointError, match="model_type='gpt_neo'"):
        to_huggingface(gpt3_shaped, tmp_path / "d", model_type="gpt2")

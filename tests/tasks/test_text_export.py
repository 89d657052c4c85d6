"""A language model served from a SavedModel generates what Python `generate` does."""

import json

import numpy as np
import keras
import pytest
import tensorflow as tf

from keras_ctx.export import ExportError, Generation, export_saved_model
from keras_ctx.tasks import text
from tests.tasks.text_fixtures import backbone, tokenizer
from tests.isolated import run_isolated

PROMPTS = ["the bank approved", "a fine film , i"]


def _task(family):
    cls = text.Seq2SeqLM if family in ("t5", "bart") else text.CausalLM
    return cls(backbone(family), tokenizer(family), sequence_length=16)


def _saved_model_ops(path):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(f"{path}/saved_model.pb", "rb") as handle:
        proto.ParseFromString(handle.read())
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    return ops


def _served(tmp_path, lm, family, path, sampler_path=None):
    """serve_generate (ids), serve_generate_text and the seeded export, in a TF-only process."""
    ids, mask = (lm._prompts(PROMPTS) if family == "gpt2" else lm._encoder(PROMPTS))
    names = ("token_ids", "padding_mask") if family == "gpt2" else (
        "encoder_token_ids", "encoder_padding_mask")
    np.savez(tmp_path / "prompt.npz", ids=ids, mask=mask.astype("int32"))
    out = run_isolated(f"""
        import json, numpy as np, tensorflow as tf
        import tensorflow_text  # the tokenizer's ops (serve_generate_text only)
        prompt = np.load({str(tmp_path / 'prompt.npz')!r})
        inputs = {{{names[0]!r}: tf.constant(prompt["ids"]),
                   {names[1]!r}: tf.constant(prompt["mask"])}}
        model = tf.saved_model.load({path!r})
        ids = model.signatures["serve_generate"](**inputs)
        texts = model.signatures["serve_generate_text"](text=tf.constant({PROMPTS!r}))
        out = {{"ids": ids["token_ids"].numpy().tolist(),
               "mask": ids["padding_mask"].numpy().tolist(),
               "text": [t.decode("utf-8", "replace") for t in texts["text"].numpy()],
               "text_ids": texts["token_ids"].numpy().tolist()}}
        if {sampler_path!r}:
            out["seeded"] = tf.saved_model.load({sampler_path!r}).signatures[
                "serve_generate"](**inputs, seed=tf.constant(7))["token_ids"].numpy().tolist()
        print(json.dumps(out))
    """)
    return json.loads(out.strip().splitlines()[-1])


def _check_served_equals_python(tmp_path, family, seeded=False):
    lm = _task(family)
    want_ids, want_mask = lm.generate_ids(PROMPTS, max_length=10, jit_compile=False)
    path = lm.export(str(tmp_path / "greedy"), max_length=10)
    # Stock TF Serving has no Xla* kernels (keras' slice_update lowers to one).
    assert not [op for op in _saved_model_ops(path) if op.startswith("Xla")]
    sampler_path = lm.export(str(tmp_path / "top_k"), max_length=10,
                             sampler="top_k") if seeded else None
    served = _served(tmp_path, lm, family, path, sampler_path)
    np.testing.assert_array_equal(served["ids"], want_ids)
    np.testing.assert_array_equal(served["mask"], want_mask.astype(int))
    np.testing.assert_array_equal(served["text_ids"], want_ids)
    assert served["text"] == lm.generate(PROMPTS, max_length=10)
    if seeded:  # the same seed draws the same tokens (stateless, seeded by position)
        sampled = lm.generate_ids(PROMPTS, max_length=10, sampler="top_k", seed=7,
                                  jit_compile=False)[0]
        np.testing.assert_array_equal(served["seeded"], sampled)


@pytest.mark.slow  # ~45 s; test_export_families serves every family from a TensorFlow-only process by default
@pytest.mark.tensorflow_only("serve_generate is exported from TensorFlow only")
def test_served_gpt2_generates_what_python_generates_in_a_tensorflow_only_process(tmp_path):
    _check_served_equals_python(tmp_path, "gpt2")


@pytest.mark.slow
@pytest.mark.tensorflow_only("serve_generate is exported from TensorFlow only")
@pytest.mark.parametrize("family", ["gpt2", "t5", "bart"])
def test_served_generation_and_seeded_sampling_equal_python(family, tmp_path):
    _check_served_equals_python(tmp_path, family, seeded=True)


@pytest.mark.tensorflow_only("serve_generate is exported from TensorFlow only; JAX and "
                             "torch refuse it in one line (the test below)")
def test_generation_signature_checks_its_inputs_and_arguments(tmp_path):
    lm = _task("gpt2")
    path = export_saved_model(lm.backbone, tmp_path / "m", generation=Generation(8))
    serve = tf.saved_model.load(path).signatures["serve_generate"]
    ids = tf.constant([[3, 4, 5]], tf.int32)
    ok = serve(token_ids=ids, padding_mask=tf.ones_like(ids))
    assert ok["token_ids"].shape == (1, 8)
    size = lm.backbone.vocabulary_size
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"must be in \\[0, {size}\\)"):
        serve(token_ids=tf.constant([[3, size]]), padding_mask=tf.ones((1, 2), tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than max_length=8"):
        serve(token_ids=tf.ones((1, 9), tf.int32), padding_mask=tf.ones((1, 9), tf.int32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="position 0"):
        serve(token_ids=ids, padding_mask=tf.constant([[0, 1, 1]]))
    with pytest.raises(ExportError, match="positions"):
        export_saved_model(lm.backbone, tmp_path / "long", generation=Generation(65))
    with pytest.raises(ExportError, match="decoder_start_token_id"):
        export_saved_model(_task("t5").backbone, tmp_path / "t5", generation=Generation(8))
    from tests.tiny import tiny_encoder
    with pytest.raises(ExportError, match="not a language model"):
        export_saved_model(tiny_encoder(), tmp_path / "bert", generation=Generation(8))


@pytest.mark.skipif(keras.backend.backend() == "tensorflow",
                    reason="the refusal of the other backends; TensorFlow exports it (above)")
def test_generation_export_is_refused_in_one_line_off_tensorflow(tmp_path):
    lm = _task("gpt2")
    with pytest.raises(ExportError, match="KERAS_BACKEND=tensorflow") as refused:
        export_saved_model(lm.backbone, tmp_path / "m", generation=Generation(8))
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "m").exists()

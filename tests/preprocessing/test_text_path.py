"""One text-to-inputs path: embed, fine-tune and serving see the ids pretraining sees.

Each test here failed before the family registry / TextPreprocessor rework.
"""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import runs
from keras_ctx.cli import main
from keras_ctx.data import tokenizers
from keras_ctx.models import from_preset
from keras_ctx.preprocessing import TextPreprocessor
from keras_ctx.tasks import SequenceClassifier

TINY = dict(num_layers=1, num_heads=2, hidden_size=16, intermediate_size=32, dropout=0.0)
LINES = ["I went to the bank.", "The bank approved the loan.",
         "We sat on the bank of the river.", "money at the bank"] * 30


def _text_run(tmp_path, preset, family, tokenizer):
    keras.utils.set_random_seed(0)
    backbone = from_preset(preset, vocabulary_size=tokenizer.vocabulary_size(), **TINY)
    out = str(tmp_path / family)
    runs.save_run(out, {"model": preset, "family": family, "sequence_length": 16},
                  backbone, tokenizer)
    return out, backbone


def _vector_at(backbone, inputs, positions):
    inputs = {k: v for k, v in inputs.items() if k in backbone.input}
    sequence = keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    return sequence[0, positions].mean(0)


def test_byte_level_bpe_word_vectors_use_the_whole_text_ids(tmp_path):
    # RoBERTa's byte-level BPE marks a word's leading space ("Ġbank"): tokenizing
    # word by word gave "bank" ids that pretraining and serve_text never see.
    tokenizer = tokenizers.train_byte_level_bpe(LINES, 300)
    out, backbone = _text_run(tmp_path, "roberta-base", "roberta", tokenizer)
    text = "The bank approved the loan."
    inputs = TextPreprocessor(tokenizer, 16, "roberta")(tf.constant([text]))
    ids = np.asarray(inputs["token_ids"])[0].tolist()
    position = ids.index(tokenizer.token_to_id("\u0120bank"))
    want = _vector_at(backbone, inputs, [position])
    from keras_ctx.commands.embed import word_vectors

    np.testing.assert_allclose(word_vectors(out, [text], "bank")[0], want, atol=1e-5)


def test_a_word_before_a_period_does_not_average_the_period(tmp_path):
    tokenizer = tokenizers.train_wordpiece(LINES, 200)
    out, backbone = _text_run(tmp_path, "bert-tiny", "bert", tokenizer)
    text = "I went to the bank."
    inputs = TextPreprocessor(tokenizer, 16, "bert")(tf.constant([text]))
    ids = np.asarray(inputs["token_ids"])[0].tolist()
    want = _vector_at(backbone, inputs, [ids.index(tokenizer.token_to_id("bank"))])
    from keras_ctx.commands.embed import word_vectors

    np.testing.assert_allclose(word_vectors(out, [text], "bank")[0], want, atol=1e-5)


def test_embed_prints_values_at_a_readable_precision(tmp_path, capsys):
    tokenizer = tokenizers.train_wordpiece(LINES, 200)
    out, _ = _text_run(tmp_path, "bert-tiny", "bert", tokenizer)
    assert main(["embed", out, "I went to the bank.", "money at the bank", "--word",
                 "bank"]) == 0
    printed = capsys.readouterr().out
    assert "first values" in printed and "cosine(0, 1)" in printed
    assert not re.search(r"\d\.\d{6,}", printed), printed


def test_import_keras_ctx_exposes_its_submodules():
    code = ("import keras_ctx\n"
            "for name in ('layers', 'models', 'data', 'pretraining', 'tasks', 'convert',\n"
            "             'export', 'generation'):\n"
            "    getattr(keras_ctx, name)\n"
            "keras_ctx.convert.from_huggingface, keras_ctx.convert.to_huggingface\n"
            "keras_ctx.export.export_saved_model\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_converted_roberta_takes_no_segment_ids_and_records_its_family(tmp_path):
    from keras_ctx.convert import from_huggingface
    from keras_ctx.convert.formats import convert
    from tests.convert.hf_checkpoints import ROBERTA, roberta_tensors, write_checkpoint

    source = write_checkpoint(tmp_path / "hf", ROBERTA, roberta_tensors())
    backbone = from_huggingface(source)
    ids = np.array([[0, 5, 9, 2, 1]], "int32")
    mask = (ids != 1).astype("int32")
    plain = backbone({"token_ids": ids, "padding_mask": mask})["sequence_output"]
    with_segments = backbone({"token_ids": ids, "padding_mask": mask,
                              "segment_ids": np.zeros_like(ids)})["sequence_output"]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(plain), keras.ops.convert_to_numpy(with_segments))
    info = convert(source, str(tmp_path / "run"))
    assert info["family"] == "roberta"


def _classifier_inputs(backbone, ids, mask):
    names = list(backbone.input)
    if "encoder_token_ids" in names:
        return {"encoder_token_ids": ids, "encoder_padding_mask": mask,
                "decoder_token_ids": ids, "decoder_padding_mask": mask}
    inputs = {"token_ids": ids, "padding_mask": mask}
    if "segment_ids" in names:
        inputs["segment_ids"] = np.zeros_like(ids)
    return inputs


@pytest.mark.parametrize("preset", ["gpt2", "xlnet-base"])
def test_causal_and_xlnet_classifiers_read_the_last_real_token(preset):
    keras.utils.set_random_seed(1)
    backbone = from_preset(preset, vocabulary_size=40, **TINY)
    classifier = SequenceClassifier(backbone, num_classes=3)
    mask = np.array([[1, 1, 1, 1, 0, 0]], "int32")
    ids = np.array([[5, 6, 7, 8, 0, 0]], "int32")
    changed = ids.copy()
    changed[0, 3] = 9  # only the last real token differs
    a = keras.ops.convert_to_numpy(classifier(_classifier_inputs(backbone, ids, mask)))
    b = keras.ops.convert_to_numpy(classifier(_classifier_inputs(backbone, changed, mask)))
    assert classifier.get_config()["pooling"] == "last"
    assert not np.allclose(a, b)


def test_t5_classifies_from_its_encoder_and_bart_from_the_final_decoder_state():
    keras.utils.set_random_seed(2)
    ids = np.array([[5, 6, 7, 2, 1, 1]], "int32")
    mask = np.array([[1, 1, 1, 1, 0, 0]], "int32")
    for preset, output, pick in (
            ("t5-small", "encoder_sequence_output", lambda s: s[0, :4].mean(0)),
            ("bart-base", "decoder_sequence_output", lambda s: s[0, 3])):
        backbone = from_preset(preset, vocabulary_size=40, **TINY)
        classifier = SequenceClassifier(backbone, num_classes=2)
        inputs = _classifier_inputs(backbone, ids, mask)
        sequence = keras.ops.convert_to_numpy(backbone(inputs)[output])
        vector = pick(sequence)
        if classifier.get_config()["transform_activation"]:  # BART's head: dense + tanh
            transform = classifier.get_layer("transform")
            vector = np.tanh(vector @ transform.kernel.numpy() + transform.bias.numpy())
        dense = classifier.get_layer("logits")
        want = vector @ dense.kernel.numpy() + dense.bias.numpy()
        np.testing.assert_allclose(keras.ops.convert_to_numpy(classifier(inputs))[0], want, atol=1e-5)


def test_openai_gpt_tokenizer_is_end_of_word_bpe_not_bytes(tmp_path):
    from keras_ctx.convert import tokenizer_from_huggingface

    # openai-gpt's vocab.json / merges.txt: lowercased words, "</w>" word ends.
    vocabulary = {"<unk>": 0, "t": 1, "h": 2, "e</w>": 3, "b": 4, "a": 5, "n": 6, "k</w>": 7,
                  ".</w>": 8, "th": 9, "the</w>": 10, "ba": 11, "ban": 12, "bank</w>": 13}
    merges = ["t h", "th e</w>", "b a", "ba n", "ban k</w>"]
    with open(tmp_path / "vocab.json", "w", encoding="utf-8") as handle:
        json.dump(vocabulary, handle)
    with open(tmp_path / "merges.txt", "w", encoding="utf-8") as handle:
        handle.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    tokenizer = tokenizer_from_huggingface(str(tmp_path))
    ids = np.asarray(tokenizer("The bank.")).tolist()
    assert ids == [10, 13, 8]  # the</w> bank</w> .</w>


def test_pairs_are_framed_and_truncated_longest_first():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c", "d", "e", "f"]
    import keras_hub

    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocab)
    layer = TextPreprocessor(tokenizer, 9, "bert", truncation="longest_first")
    out = layer(tf.constant(["a b c d e f", "b"]), tf.constant(["c d", "d e f"]))
    # Room 6 of 9: (6, 2) -> (4, 2); (1, 3) fits.
    np.testing.assert_array_equal(out["token_ids"], [[2, 4, 5, 6, 7, 3, 6, 7, 3],
                                                     [2, 5, 3, 7, 8, 9, 3, 0, 0]])
    np.testing.assert_array_equal(out["segment_ids"], [[0, 0, 0, 0, 0, 0, 1, 1, 1],
                                                       [0, 0, 0, 1, 1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(out["padding_mask"][1], [1] * 7 + [0] * 2)
    # Equal lengths: the second text loses the odd token (as Hugging Face's).
    short = TextPreprocessor(tokenizer, 8, "bert", truncation="longest_first")
    out = short(tf.constant(["a b c d"]), tf.constant(["c d e f"]))
    np.testing.assert_array_equal(out["token_ids"], [[2, 4, 5, 6, 3, 6, 7, 3]])
    with pytest.raises(ValueError, match="longest_first"):
        TextPreprocessor(tokenizer, 8, "bert")(tf.constant(["a b c d"]), tf.constant(["c d e"]))


def test_elmo_character_ids_read_strings_eagerly_as_in_tf_data():
    """Called eagerly on JAX and torch, Keras turned the strings into the backend's tensors
    ("string arrays can only be made from NumPy arrays"); the ids are tf.data's."""
    from keras_ctx.data.characters import ElmoCharacterIds

    layer = ElmoCharacterIds(sequence_length=8)
    texts = tf.constant(["The bank was closed .", "By the river"])
    in_graph = next(iter(tf.data.Dataset.from_tensors(texts).map(layer)))
    np.testing.assert_array_equal(np.asarray(layer(texts)), in_graph.numpy())
    assert in_graph.shape == (2, 8, 50) and len(np.unique(in_graph.numpy())) > 10

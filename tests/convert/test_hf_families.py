"""HF checkpoints of RoBERTa, ALBERT and XLNet, written here in the real layout and names.

Each test writes config.json + model.safetensors with Hugging Face's exact
tensor names and shapes (including head tensors the backbone must ignore),
converts it, compares with a numpy forward pass read straight from the
tensors (tests/convert/numpy_refs.py), and round-trips ours -> HF -> ours.
"""

import json
import os

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file, save_file

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from tests.convert import numpy_refs
from tests.convert.hf_checkpoints import ALBERT, ELECTRA, ROBERTA, XLNET, albert_tensors, electra_tensors, roberta_tensors, write_checkpoint, xlnet_tensors



# --- RoBERTa -------------------------------------------------------------------------


def roberta_inputs():
    # <s> ... </s> then padding (id 1), right-padded as HF tokenizers do.
    ids = np.array([[0, 5, 9, 17, 4, 2, 1, 1], [0, 22, 13, 2, 1, 1, 1, 1]], "int32")
    mask = (ids != 1).astype("int32")
    return {"token_ids": ids, "padding_mask": mask, "segment_ids": np.zeros_like(ids)}


def write_bpe_files(directory):
    # A byte-level BPE of GPT-2's format: "Ġ" marks a leading space.
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "l": 4, "o": 5, "w": 6, "e": 7,
             "r": 8, "Ġ": 9, "lo": 10, "low": 11, "er": 12, "Ġlow": 13, "Ġlower": 14}
    with open(os.path.join(directory, "vocab.json"), "w") as handle:
        json.dump(vocab, handle)
    with open(os.path.join(directory, "merges.txt"), "w") as handle:
        handle.write("#version: 0.2\nl o\nlo w\ne r\nĠ low\nĠlow er\n")
    return vocab


def test_roberta_matches_numpy_and_round_trips(tmp_path):
    tensors = roberta_tensors()
    directory = write_checkpoint(tmp_path / "roberta", ROBERTA, tensors)
    vocab = write_bpe_files(directory)
    with pytest.warns(UserWarning, match="pooler"):
        backbone = from_huggingface(directory)
    # The two offset rows are dropped: positions start at our row 0.
    assert backbone.max_sequence_length == ROBERTA["max_position_embeddings"] - 2
    inputs = roberta_inputs()
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_refs.numpy_bert(tensors, ROBERTA, inputs["token_ids"], inputs["padding_mask"],
                                 inputs["segment_ids"], prefix="roberta.", roberta=True)
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)

    # Byte-level BPE from vocab.json + merges.txt.
    ids = backbone.tokenizer("low lower").tolist()
    assert ids == [vocab["low"], vocab["Ġlower"]]

    # ours -> HF -> ours is exact; the exported encoder tensors equal the originals.
    exported = to_huggingface(backbone, tmp_path / "out", model_type="roberta")
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k[len("roberta."):] for k in tensors if k.startswith("roberta.")} | {
        "pooler.dense.weight", "pooler.dense.bias"}
    for name, value in written.items():
        if name.startswith("pooler"):
            continue
        original = tensors["roberta." + name]
        if name == "embeddings.position_embeddings.weight":
            np.testing.assert_array_equal(value[2:], original[2:])
        else:
            np.testing.assert_array_equal(value, original)
    again = from_huggingface(exported)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)
    assert again.tokenizer("low lower").tolist() == ids


# --- ALBERT --------------------------------------------------------------------------


def write_sentencepiece(directory):
    import io

    import sentencepiece

    text = ["the quick brown fox jumps over the lazy dog", "a lazy dog sleeps all day",
            "quick thinking wins the day", "foxes and dogs are animals"] * 20
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_writer=model, vocab_size=36,
        hard_vocab_limit=False, model_type="unigram",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2,
    )
    with open(os.path.join(directory, "spiece.model"), "wb") as handle:
        handle.write(model.getvalue())
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


def test_albert_matches_numpy_and_round_trips(tmp_path):
    tensors = albert_tensors()
    directory = write_checkpoint(tmp_path / "albert", ALBERT, tensors)
    processor = write_sentencepiece(directory)
    backbone = from_huggingface(directory)
    assert backbone.num_layers == 3 and backbone.sharing == "all"
    ids = np.array([[2, 7, 11, 30, 3, 0], [2, 9, 3, 0, 0, 0]], "int32")
    inputs = {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"),
              "segment_ids": np.array([[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]], "int32")}
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_refs.numpy_albert(tensors, ALBERT, ids, inputs["padding_mask"],
                                   inputs["segment_ids"])
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4)

    text = "the lazy fox"
    assert backbone.tokenizer(text).tolist() == processor.encode(text)

    exported = to_huggingface(backbone, tmp_path / "out")
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k[len("albert."):] for k in tensors
                            if k.startswith("albert.") and "position_ids" not in k}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors["albert." + name])
    again = from_huggingface(exported)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)
    assert again.tokenizer(text).tolist() == processor.encode(text)


def test_albert_with_several_layer_groups_is_refused(tmp_path):
    config = dict(ALBERT, num_hidden_groups=2)
    directory = write_checkpoint(tmp_path, config, albert_tensors())
    with pytest.raises(CheckpointError, match="num_hidden_groups"):
        from_huggingface(directory)


# --- XLNet ---------------------------------------------------------------------------


def test_xlnet_matches_numpy_and_round_trips(tmp_path):
    tensors = xlnet_tensors()
    directory = write_checkpoint(tmp_path / "xlnet", XLNET, tensors)
    backbone = from_huggingface(directory)
    ids = np.array([[5, 9, 17, 4, 3, 30, 2], [7, 22, 13, 1, 0, 0, 0]], "int32")
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3], "int32")
    segments = np.array([[0, 0, 0, 1, 1, 1, 2], [0, 0, 1, 1, 1, 1, 1]], "int32")
    inputs = {"token_ids": ids, "padding_mask": mask, "segment_ids": segments}
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_refs.numpy_xlnet(tensors, XLNET, ids, mask, segments)
    np.testing.assert_allclose(got[mask.astype(bool)], want[mask.astype(bool)], atol=1e-4)

    exported = to_huggingface(backbone, tmp_path / "out")
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k[len("transformer."):] for k in tensors if "lm_loss" not in k}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors["transformer." + name])
    again = from_huggingface(exported)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)


# --- Bad checkpoints -----------------------------------------------------------------

def test_bad_checkpoints_name_the_tensor_or_field(tmp_path):
    tensors = xlnet_tensors()
    missing = dict(tensors)
    del missing["transformer.layer.1.rel_attn.seg_embed"]
    with pytest.raises(CheckpointError, match="layer.1.rel_attn.seg_embed"):
        from_huggingface(write_checkpoint(tmp_path / "missing", XLNET, missing))

    wrong = dict(tensors)
    wrong["transformer.layer.0.ff.layer_1.weight"] = np.zeros((5, 16), "float32")
    with pytest.raises(CheckpointError, match=r"layer.0.ff.layer_1.weight.*\(5, 16\)"):
        from_huggingface(write_checkpoint(tmp_path / "wrong", XLNET, wrong))

    extra = dict(tensors)
    extra["transformer.layer.2.rel_attn.q"] = np.zeros((16, 2, 8), "float32")
    with pytest.raises(CheckpointError, match="layer.2.rel_attn.q"):
        from_huggingface(write_checkpoint(tmp_path / "extra", XLNET, extra))

    directory = write_checkpoint(tmp_path / "truncated", XLNET, tensors)
    path = os.path.join(directory, "model.safetensors")
    data = open(path, "rb").read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        from_huggingface(directory)

    no_field = {k: v for k, v in XLNET.items() if k != "d_inner"}
    with pytest.raises(CheckpointError, match="d_inner"):
        from_huggingface(write_checkpoint(tmp_path / "field", no_field, tensors))

    with pytest.raises(CheckpointError, match="swish.*hidden_act"):
        from_huggingface(write_checkpoint(tmp_path / "act", dict(ALBERT, hidden_act="swish"),
                                          albert_tensors()))


# --- ELECTRA -------------------------------------------------------------------------


def test_electra_matches_numpy_and_round_trips(tmp_path):
    tensors = electra_tensors()
    directory = write_checkpoint(tmp_path / "electra", ELECTRA, tensors)
    backbone = from_huggingface(directory)
    ids = np.array([[2, 7, 11, 29, 3, 0], [2, 9, 3, 0, 0, 0]], "int32")
    inputs = {"token_ids": ids, "padding_mask": (ids != 0).astype("int32"),
              "segment_ids": np.array([[0, 0, 0, 1, 1, 0], [0] * 6], "int32")}
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    # ELECTRA = BERT's encoder after an E -> H projection of the embeddings.
    t = {k: v.astype("float64") for k, v in tensors.items()}
    e = "electra.embeddings."
    x = (t[e + "word_embeddings.weight"][ids] + t[e + "position_embeddings.weight"][:6]
         + t[e + "token_type_embeddings.weight"][inputs["segment_ids"]])
    from tests import references

    x = references.layer_norm(x, t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"], 1e-12)
    x = x @ t["electra.embeddings_project.weight"].T + t["electra.embeddings_project.bias"]
    for i in range(2):
        x = numpy_refs.post_ln_layer(x, inputs["padding_mask"], t,
                                     numpy_refs.bert_layer_names(i, "electra."), 4, 1e-12,
                                     references.gelu)
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], x[real], atol=1e-4)

    exported = to_huggingface(backbone, tmp_path / "out")
    written = load_file(os.path.join(exported, "model.safetensors"))
    assert set(written) == {k[len("electra."):] for k in tensors if k.startswith("electra.")}
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors["electra." + name])
    again = from_huggingface(exported)
    np.testing.assert_array_equal(ops.convert_to_numpy(again(inputs)["sequence_output"]), got)


# --- Storage variants ----------------------------------------------------------------

def _write_safetensors_by_hand(path, tensors, dtype):
    """The safetensors format written independently of the library (for bfloat16)."""
    import struct

    header, chunks, offset = {}, [], 0
    for name, value in tensors.items():
        if dtype == "BF16":  # round-to-nearest-even on float32's top 16 bits
            bits = value.astype("float32").view("uint32")
            raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            raw = value.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))


def test_sharded_and_bfloat16_checkpoints(tmp_path):
    tensors = xlnet_tensors()
    reference = from_huggingface(write_checkpoint(tmp_path / "single", XLNET, tensors))
    inputs = {"token_ids": np.array([[5, 9, 17, 4]], "int32"),
              "padding_mask": np.ones((1, 4), "int32"), "segment_ids": np.zeros((1, 4), "int32")}
    want = ops.convert_to_numpy(reference(inputs)["sequence_output"])

    # Two shards + model.safetensors.index.json, as large checkpoints come.
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text(json.dumps(XLNET))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(sharded / shard))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: s for s, keys in shards.items() for k in keys}}))
    got = ops.convert_to_numpy(from_huggingface(str(sharded))(inputs)["sequence_output"])
    np.testing.assert_array_equal(got, want)
    os.remove(sharded / "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors.*missing"):
        from_huggingface(str(sharded))

    # bfloat16 (numpy has no bf16): same model up to bf16 rounding of the weights.
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    (bf16 / "config.json").write_text(json.dumps(XLNET))
    _write_safetensors_by_hand(bf16 / "model.safetensors", tensors, "BF16")
    backbone = from_huggingface(str(bf16))
    loaded = ops.convert_to_numpy(backbone.token_embedding.embeddings)
    original = tensors["transformer.word_embedding.weight"]
    np.testing.assert_allclose(loaded, original, rtol=2 ** -8)
    assert not np.array_equal(loaded, original)  # really rounded to 8 mantissa bits
    assert np.all(loaded.view("uint32") & 0xFFFF == 0)


@pytest.mark.filterwarnings("ignore:The checkpoint has no")
def test_corrupt_vocabulary_files_fail_clearly(tmp_path):
    directory = write_checkpoint(tmp_path / "albert", ALBERT, albert_tensors())
    with open(os.path.join(directory, "spiece.model"), "wb") as handle:
        handle.write(b"not a sentencepiece model")
    with pytest.raises(CheckpointError, match="spiece.model is not a readable SentencePiece"):
        from_huggingface(directory)
    directory = write_checkpoint(tmp_path / "roberta", ROBERTA, roberta_tensors())
    write_bpe_files(directory)
    with open(os.path.join(directory, "merges.txt"), "a") as handle:
        handle.write("three part merge\n")
    with pytest.raises(CheckpointError, match="three part merge"):
        from_huggingface(directory)


def _transformers_preprocess_text(text, do_lower_case, keep_accents=False):
    """transformers' AlbertTokenizer / XLNetTokenizer `preprocess_text` (remove_space on),
    transcribed: the text their SentencePiece model reads."""
    import unicodedata

    outputs = " ".join(text.strip().split())
    outputs = outputs.replace("``", '"').replace("''", '"')
    if not keep_accents:
        outputs = unicodedata.normalize("NFKD", outputs)
        outputs = "".join(c for c in outputs if not unicodedata.combining(c))
    return outputs.lower() if do_lower_case else outputs


SENTENCEPIECE_TEXT = "  The ``Lazy''   Fóx  "


def _write_character_sentencepiece(directory):
    """A character-level model that holds both cases, the accent and both quote forms,
    so every difference in the text reaching it changes the ids."""
    import io

    import sentencepiece

    text = ['The ``Lazy\'\' Fóx', 'the "lazy" fox', 'The "Lazy" Fox'] * 20
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_writer=model, vocab_size=30,
        hard_vocab_limit=False, model_type="char", pad_id=0, unk_id=1, bos_id=2, eos_id=3,
        minloglevel=2)
    with open(os.path.join(directory, "spiece.model"), "wb") as handle:
        handle.write(model.getvalue())
    return sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())


@pytest.mark.parametrize("case", [
    ("albert", ALBERT, albert_tensors, {}, True, False),  # AlbertTokenizer: uncased
    ("xlnet", XLNET, xlnet_tensors, {}, False, False),  # XLNetTokenizer: cased
    ("albert-cased", ALBERT, albert_tensors, {"do_lower_case": False, "keep_accents": True},
     False, True),
], ids=lambda case: case[0])
def test_converted_sentencepiece_reads_text_as_transformers_tokenizer(tmp_path, case):
    # A converted ALBERT read "The Lazy Fóx" as it comes, where transformers' tokenizer
    # lower-cases it and strips the accent first: other ids, silently.
    _, config, tensors, settings, lowercase, keep_accents = case
    directory = write_checkpoint(tmp_path / "in", config, tensors())
    processor = _write_character_sentencepiece(directory)
    if settings:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as handle:
            json.dump(settings, handle)
    backbone = from_huggingface(directory)
    want = processor.encode(
        _transformers_preprocess_text(SENTENCEPIECE_TEXT, lowercase, keep_accents))
    assert backbone.tokenizer(SENTENCEPIECE_TEXT).tolist() == want
    assert processor.encode(SENTENCEPIECE_TEXT) != want  # the case is not trivial
    again = from_huggingface(to_huggingface(backbone, tmp_path / "out"))
    assert again.tokenizer(SENTENCEPIECE_TEXT).tolist() == want

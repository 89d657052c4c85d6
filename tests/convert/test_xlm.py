"""HF XLM checkpoints (XLMWithLMHeadModel layout) -> XLMBackbone -> HF, against numpy."""

import numpy as np
import pytest
from keras import ops
from safetensors.numpy import load_file

from keras_ctx.convert import CheckpointError, from_huggingface, to_huggingface
from tests.convert.hf_checkpoints import write_checkpoint
from tests.convert.xlm_checkpoints import XLM, numpy_xlm, xlm_tensors

def _tlm_pair_inputs():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 40, (2, 7)).astype("int32")
    mask = np.ones((2, 7), "int32")
    mask[1, 5:] = 0
    # A TLM pair: positions restart at 4, languages 0 then 2.
    positions = np.array([[0, 1, 2, 3, 0, 1, 2]] * 2, "int32")
    languages = np.array([[0, 0, 0, 0, 2, 2, 2]] * 2, "int32")
    return {"token_ids": ids, "padding_mask": mask, "position_ids": positions,
            "language_ids": languages}


@pytest.mark.parametrize("use_lang_emb", [True, False])
def test_xlm_matches_numpy_and_round_trips(tmp_path, use_lang_emb):
    config = dict(XLM, use_lang_emb=use_lang_emb)
    tensors = xlm_tensors(config)
    backbone = from_huggingface(write_checkpoint(tmp_path / "xlm", config, tensors))
    assert type(backbone).__name__ == "XLMBackbone"
    inputs = _tlm_pair_inputs()
    got = ops.convert_to_numpy(backbone(inputs)["sequence_output"])
    want = numpy_xlm(tensors, config, inputs["token_ids"], inputs["padding_mask"],
                     inputs["position_ids"], inputs["language_ids"])
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=2e-4)
    # Language embeddings matter exactly when the checkpoint has them.
    other = dict(inputs, language_ids=np.ones_like(inputs["language_ids"]))
    changed = not np.allclose(ops.convert_to_numpy(backbone(other)["sequence_output"]), got)
    assert changed == use_lang_emb

    out = to_huggingface(backbone, tmp_path / "out")
    written = load_file(f"{out}/model.safetensors")
    expected = {k[len("transformer."):] for k in tensors
                if k.startswith("transformer.") and not k.endswith("position_ids")}
    assert set(written) == expected
    for name, value in written.items():
        np.testing.assert_array_equal(value, tensors["transformer." + name])
    again = from_huggingface(out)
    np.testing.assert_allclose(ops.convert_to_numpy(again(inputs)["sequence_output"]), got,
                               atol=1e-6)


def test_xlm_checkpoint_errors(tmp_path):
    tensors = xlm_tensors()
    bad = dict(XLM, sinusoidal_embeddings=True)
    with pytest.raises(CheckpointError, match="sinusoidal"):
        from_huggingface(write_checkpoint(tmp_path / "a", bad, tensors))
    extra = dict(tensors, **{"transformer.mystery.weight": np.zeros(3, "float32")})
    with pytest.raises(CheckpointError, match="mystery"):
        from_huggingface(write_checkpoint(tmp_path / "b", XLM, extra))
    missing = {k: v for k, v in tensors.items() if "lang_embeddings" not in k}
    with pytest.raises(CheckpointError, match="lang_embeddings"):
        from_huggingface(write_checkpoint(tmp_path / "c", XLM, missing))


def test_xlm_masked_lm_head_matches_numpy_pred_layer(tmp_path):
    """XLMWithLMHeadModel's pred_layer: proj (tied to the embeddings) + bias, no transform."""
    from keras_ctx.convert.heads import masked_lm_from_huggingface

    tensors = xlm_tensors()
    tensors["pred_layer.proj.weight"] = tensors["transformer.embeddings.weight"].copy()
    backbone, head = masked_lm_from_huggingface(write_checkpoint(tmp_path / "x", XLM, tensors))
    assert head.transform is False
    assert head.token_embedding.embeddings is backbone.token_embedding.embeddings
    inputs = _tlm_pair_inputs()
    got = ops.convert_to_numpy(head(backbone(inputs)["sequence_output"]))
    hidden = numpy_xlm(tensors, XLM, inputs["token_ids"], inputs["padding_mask"],
                       inputs["position_ids"], inputs["language_ids"])
    want = hidden @ tensors["pred_layer.proj.weight"].T + tensors["pred_layer.proj.bias"]
    real = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=5e-4)
    untied = dict(tensors, **{"pred_layer.proj.weight": tensors["pred_layer.proj.weight"] + 1})
    with pytest.raises(CheckpointError, match="not tied"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "u", XLM, untied))
    with pytest.raises(CheckpointError, match="adaptive softmax"):
        masked_lm_from_huggingface(write_checkpoint(tmp_path / "a", dict(XLM, asm=True),
                                                    tensors))


@pytest.mark.parametrize("lowercase", [True, False])
def test_an_xlm_checkpoint_loads_with_xlms_tokenizer(tmp_path, lowercase):
    """config.json + vocab.json + merges.txt (fastBPE's "a b count" lines, as XLM's
    checkpoints): the tokenizer is XLM's, with transformers' XLMTokenizer's ids."""
    import json

    from transformers import XLMTokenizer

    from keras_ctx.data import tokenizers
    from tests.data.unicode_texts import TEXTS
    from tests.data.xlm_vocabulary import LINES, write_xlm_vocabulary

    trained = tokenizers.train_xlm_bpe(LINES, 200, lowercase_and_remove_accent=lowercase)
    config = dict(XLM, vocab_size=trained.vocabulary_size())
    directory = write_checkpoint(tmp_path / "xlm", config, xlm_tensors(config))
    files = write_xlm_vocabulary(trained, directory)
    if not lowercase:  # the cased XLM-17 / XLM-100 say so in tokenizer_config.json
        with open(tmp_path / "xlm" / "tokenizer_config.json", "w") as handle:
            json.dump({"do_lowercase_and_remove_accent": False}, handle)
    tokenizer = from_huggingface(directory).tokenizer
    assert type(tokenizer).__name__ == "XLMBPETokenizer"
    assert tokenizer.lowercase_and_remove_accent is lowercase
    reference = XLMTokenizer(*files, do_lowercase_and_remove_accent=lowercase)
    texts = LINES[:7] + TEXTS
    for text, row in zip(texts, tokenizer.tokenize(texts).to_list()):
        assert row == reference(text, add_special_tokens=False)["input_ids"], text
    # Written back beside the checkpoint (no "#version" line: XLMTokenizer would read it).
    out = to_huggingface(from_huggingface(directory), tmp_path / "out")
    with open(f"{out}/merges.txt", encoding="utf-8") as handle:
        assert handle.readline() == " ".join(trained.merges[0]) + "\n"
    again = from_huggingface(out).tokenizer
    assert again.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    assert again.lowercase_and_remove_accent is lowercase
    with open(files[1], "a", encoding="utf-8") as handle:
        handle.write("a b c\n")
    with pytest.raises(CheckpointError, match=r"'a b c' is not a merge of two pieces with its"):
        from_huggingface(directory)

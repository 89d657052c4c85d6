"""One rule, one message (issue 55): every public function that takes a count, a size or a
clip checks it with keras_ctx.common.validation, so 0, -1, 1.5, True and "3" are refused
in the same words wherever they are given, before any work."""

import math

import pytest

from keras_ctx.common import validation
from keras_ctx.common.errors import ConfigError
from keras_ctx.data import (characters, corpora, glove, knowledge_masking, lm_stream,
                            multilingual, ngram_masking, permutation, segments, vocabulary)
from keras_ctx.export import ExportError, Generation, check_export_target, export_saved_model
from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder, Highway
from keras_ctx.layers.dropout import EmbeddingDropout, LockedDropout
from keras_ctx.layers.lstm import LSTMP, WeightDropLSTM
from keras_ctx.layers.position import SinusoidalPositionEncoding
from keras_ctx.models.awd_lstm import AwdLstmBackbone
from keras_ctx.models.xlnet import XLNetBackbone

BAD_COUNTS = [0, -1, 1.5, True, "3"]


def _missing(tmp):
    return str(tmp / "no-such.txt")  # the check comes before the file is opened


# (call(tmp_path, value), the argument's name, the error type): every public entry point
# whose count argument issue 55 moved onto validation.positive_int.
COUNTS = {
    "tlm_pairs": (lambda tmp, v: multilingual.tlm_pairs(None, 16, 1, 0, 0, 1, max_length=v),
                  "max_length", ConfigError),
    "split_and_pad": (lambda tmp, v: characters.split_and_pad(["a b"], v),
                      "sequence_length", ConfigError),
    "read_glove dim": (lambda tmp, v: glove.read_glove(_missing(tmp), dim=v), "dim",
                       ConfigError),
    "read_glove max_words": (lambda tmp, v: glove.read_glove(_missing(tmp), max_words=v),
                             "max_words", ConfigError),
    "sample_sentences": (lambda tmp, v: corpora.sample_sentences(_missing(tmp), size=v),
                         "size", ConfigError),
    "KnowledgeMaskingSchedule": (
        lambda tmp, v: knowledge_masking.KnowledgeMaskingSchedule((("basic", v),)),
        "steps of stage 'basic'", ConfigError),
    "AwdLstmBackbone": (lambda tmp, v: AwdLstmBackbone(10, embedding_size=4, hidden_size=4,
                                                       num_layers=v), "num_layers", ConfigError),
    "export_saved_model version": (
        lambda tmp, v: export_saved_model(None, tmp / "export", version=v), "version",
        ExportError),
    "export_saved_model sequence_length": (
        lambda tmp, v: export_saved_model(None, tmp / "export", sequence_length=v),
        "sequence_length", ExportError),
    "check_export_target": (lambda tmp, v: check_export_target(tmp / "export", v), "version",
                            ExportError),
    "ngram_pmf": (lambda tmp, v: ngram_masking.ngram_pmf(v), "max_ngram", ConfigError),
    "pair_examples": (lambda tmp, v: segments.pair_examples("nsp", [], 8, 1, 2, duplicate=v),
                      "duplicate", ConfigError),
}


@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
@pytest.mark.parametrize("entry", sorted(COUNTS))
def test_every_count_argument_refuses_in_one_message(tmp_path, entry, value):
    call, name, error = COUNTS[entry]
    with pytest.raises(error) as caught:
        call(tmp_path, value)
    assert str(caught.value) == f"`{name}` must be a positive integer, got {value!r}."
    assert not (tmp_path / "export").exists()  # refused before anything is written


@pytest.mark.parametrize("value", [1, 0, -1, 2.0, True, "3"], ids=repr)
@pytest.mark.parametrize("call, name", [
    (lambda v: Generation(max_length=v), "max_length"),
    (lambda v: multilingual.text_stream(["a"], v, eos_id=1, language_id=0), "sequence_length"),
], ids=["Generation", "text_stream"])
def test_lengths_that_hold_two_tokens_refuse_in_one_message(call, name, value):
    # Generation: the first token plus one decoded; text_stream: </s> plus one token.
    with pytest.raises(ValueError) as caught:
        call(value)
    assert str(caught.value) == f"`{name}` must be an integer >= 2, got {value!r}."


@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
@pytest.mark.parametrize("call, rule", [
    (lambda v: characters.tokens_to_character_ids(["a"], v),
     "`max_characters_per_token` must be an integer >= 3 (begin-of-word, one byte, "
     "end-of-word)"),
    (lambda v: vocabulary.sentence_rows(["a"], v),
     "`sequence_length` must be an integer >= 3 (<S>, a word, </S>)"),
    (lambda v: permutation.sample_permutation([[5, 6, 7, 8]], k=v),
     "`k` must be an integer >= 2 (predict the last 1/k of each order, so that every target "
     "has context; XLNet uses 6)"),
    (lambda v: segments.pair_examples("nsp", [], v, 1, 2),
     "`sequence_length` must be an integer >= 5 (room for the special tokens)"),
], ids=["tokens_to_character_ids", "sentence_rows", "sample_permutation", "pair_examples"])
def test_a_bound_with_a_reason_says_it_in_the_one_message(call, rule, value):
    with pytest.raises(ConfigError) as caught:
        call(value)
    assert str(caught.value) == f"{rule}, got {value!r}."


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"], ids=repr)
@pytest.mark.parametrize("call, rule", [
    (lambda v: XLNetBackbone(10, 1, 2, 2, 4, mem_len=v),
     "`mem_len` must be an integer >= 0 (0 = no memory)"),
    (lambda v: lm_stream.BpttStream([1, 2, 3], 1, seed=v), "`seed` must be an integer >= 0"),
    (lambda v: CharCNNHighwayEmbedder(num_highway_layers=v),
     "`num_highway_layers` must be an integer >= 0"),
], ids=["XLNetBackbone", "BpttStream", "CharCNNHighwayEmbedder"])
def test_counts_that_may_be_zero_refuse_in_one_message(call, rule, value):
    with pytest.raises(ConfigError) as caught:
        call(value)
    assert str(caught.value) == f"{rule}, got {value!r}."


@pytest.mark.parametrize("value", [0, -1, True, "3", math.nan, math.inf], ids=repr)
@pytest.mark.parametrize("call, name", [
    (lambda v: LSTMP(4, projection_dim=2, cell_clip=v), "cell_clip"),
    (lambda v: LSTMP(4, projection_dim=2, projection_clip=v), "projection_clip"),
    (lambda v: SinusoidalPositionEncoding(max_wavelength=v), "max_wavelength"),
], ids=["cell_clip", "projection_clip", "max_wavelength"])
def test_positive_numbers_refuse_in_one_message(call, name, value):
    with pytest.raises(ConfigError) as caught:
        call(value)
    assert str(caught.value) == f"`{name}` must be a positive finite number, got {value!r}."


@pytest.mark.parametrize("value", [-0.1, 1, True, "0.5", math.nan], ids=repr)
@pytest.mark.parametrize("call, name", [
    (lambda v: WeightDropLSTM(4, weight_dropout=v), "weight_dropout"),
    (lambda v: LockedDropout(v), "rate"),
    (lambda v: EmbeddingDropout(10, v), "rate"),
], ids=["WeightDropLSTM", "LockedDropout", "EmbeddingDropout"])
def test_dropout_rates_refuse_in_one_message(call, name, value):
    with pytest.raises(ConfigError) as caught:
        call(value)
    assert str(caught.value) == f"`{name}` must be a number in [0, 1), got {value!r}."


@pytest.mark.parametrize("value", [True, "3", math.nan, math.inf, None], ids=repr)
def test_a_finite_number_refuses_in_one_message(value):
    with pytest.raises(ConfigError) as caught:
        Highway(1, transform_gate_bias=value)
    assert str(caught.value) == f"`transform_gate_bias` must be a finite number, got {value!r}."


@pytest.mark.parametrize("value", BAD_COUNTS + [None], ids=repr)
def test_a_carried_state_needs_the_batch_size_in_one_message(value):
    from keras_ctx.pretraining import AwdLstmLMPretrainer

    backbone = AwdLstmBackbone(10, embedding_size=4, hidden_size=4, num_layers=1)
    with pytest.raises(ConfigError) as caught:
        AwdLstmLMPretrainer(backbone, batch_size=value, carry_state=True)
    assert str(caught.value) == ("`batch_size` must be a positive integer (carry_state=True "
                                 f"needs the stream's fixed batch size), got {value!r}.")


def test_a_value_in_range_is_returned_as_its_type():
    assert validation.positive_int("n", 3) == 3
    assert validation.optional_positive_int("n", None) is None
    assert validation.optional_positive_number("clip", 3) == 3.0
    assert LSTMP(4, projection_dim=2, cell_clip=3).cell_clip == 3.0
    assert knowledge_masking.KnowledgeMaskingSchedule(
        (("basic", 2), ("entity", None))).boundaries == (2,)


def test_a_flag_and_an_argument_share_the_rule_and_its_words():
    # The CLI's --version and export_saved_model's `version` break one rule, said one way.
    with pytest.raises(ConfigError) as flag:
        validation.check_arg("version", 0)
    with pytest.raises(ExportError) as argument:
        check_export_target("unused", 0)
    assert str(flag.value) == "--version must be a positive integer, got 0."
    assert str(argument.value) == "`version` must be a positive integer, got 0."

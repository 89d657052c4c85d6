"""One rule, one message (issue 55): every public function that takes a count, a size or a
clip checks it with keras_ctx.common.validation, so 0, -1, 1.5, True and "3" are refused
in the same words wherever they are given, before any work."""

import math

import pytest

from keras_ctx.common import validation
from keras_ctx.common.errors import ConfigError
from keras_ctx.data import (characters, corpora, glove, knowledge_masking, lm_stream,
                            multilingual, ngram_masking, noise, permutation, segments,
                            span_masking, vocabulary, xlnet_stream)
from keras_ctx.evaluation import few_shot_contexts
from keras_ctx.data import masking
from keras_ctx.export import ExportError, Generation, check_export_target, export_saved_model
from keras_ctx.layers.adapters import BottleneckAdapter
from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder, Highway
from keras_ctx.layers.dropout import EmbeddingDropout, LockedDropout
from keras_ctx.layers.embeddings import TokenEmbedding
from keras_ctx.layers.lstm import LSTMP, WeightDropLSTM
from keras_ctx.layers.position import SinusoidalPositionEncoding
from keras_ctx.layers.relative_attention import relative_positional_encoding
from keras_ctx.models.awd_lstm import AwdLstmBackbone
from keras_ctx.models.electra import backbone as electra_backbone
from keras_ctx.models.xlnet import XLNetBackbone
from keras_ctx.optimizers import bert_adamw
from keras_ctx.preprocessing import TextPreprocessor
from keras_ctx.tasks import SequenceClassifier

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


# ------------------------------------------------ the checks issue 55 routed here last

NAN, INF = math.nan, math.inf
_DISCRIMINATOR = {"hidden_size": 256, "num_heads": 4, "intermediate_size": 1024,
                  "num_layers": 4}


def _masker(**kwargs):
    from keras_ctx.data.masking import MLMMasker

    return MLMMasker(**{"vocabulary_size": 10, "mask_token_id": 4, **kwargs})


def _schedules():
    from keras_ctx import schedules

    return schedules


def _infilling(**kwargs):
    return noise.text_infilling([5, 6, 7, 8], 4, **{"vocab_size": 10, **kwargs})


def _span_masker(**kwargs):
    return span_masking.SpanMasker(10, 4, [False] * 10, **kwargs)


def _char_cnn(filters):
    return CharCNNHighwayEmbedder(filters=filters, max_characters_per_token=5,
                                  num_highway_layers=0)


def _adapter(**overrides):
    from keras_ctx.layers.adapters import adapter_config

    return adapter_config("pfeiffer", **overrides)


# {entry: (call(value), argument as the message names it, what is allowed, values refused,
# edge values accepted)}: each refused value fails with "{argument} must be {allowed}, got
# {value!r}." and each edge value passes (0 where 0 is allowed, 1.0 for a probability).
ROUTED = {
    "SlantedTriangular cut_fraction": (
        lambda v: _schedules().SlantedTriangular(0.01, 100, cut_fraction=v), "`cut_fraction`",
        "a number in (0, 1)", [0, 1, 1.5, -0.1, True, "0.1", NAN], [0.01, 0.5, 0.99]),
    "SlantedTriangular ratio": (
        lambda v: _schedules().SlantedTriangular(0.01, 100, ratio=v), "`ratio`",
        "a finite number >= 1", [0.5, 0, -1, True, "32", NAN, INF], [1, 32.0]),
    "SlantedTriangular max_learning_rate": (
        lambda v: _schedules().SlantedTriangular(v, 100), "`max_learning_rate`",
        "a positive finite number", [0, -0.01, True, "0.01", NAN, INF], [1e-9, 1]),
    "SlantedTriangular total_steps": (
        lambda v: _schedules().SlantedTriangular(0.01, v), "`total_steps`",
        "a positive integer", [0, -1, 15.5, True, "100"], [10, 10.0]),
    "WarmupThenDecay learning_rate": (
        lambda v: _schedules().WarmupThenDecay(v, 1, 1), "`learning_rate`",
        "a positive finite number", [0, -1, True, "1e-4", NAN, INF], [1e-9]),
    "WarmupThenDecay end_learning_rate": (
        lambda v: _schedules().WarmupThenDecay(1e-3, 1, 1, end_learning_rate=v),
        "`end_learning_rate`", "a finite number >= 0", [-1e-5, True, "0", NAN, INF], [0, 0.0]),
    "CvtLearningRate warm_up_steps": (
        lambda v: _schedules().CvtLearningRate(warm_up_steps=v), "`warm_up_steps`",
        "a positive integer", [0, -1, 0.5, True, "5000"], [1, 5000]),
    "CvtLearningRate decay": (
        lambda v: _schedules().CvtLearningRate(decay=v), "`decay`", "a finite number >= 0",
        [-0.005, True, "0.005", NAN, INF], [0, 0.005]),
    "generator_config hidden_fraction": (
        lambda v: electra_backbone.generator_config(_DISCRIMINATOR, hidden_fraction=v),
        "`hidden_fraction`", "a number in (0, 1]", [0, -0.25, 1.5, True, "0.25", NAN],
        [0.25, 1.0]),
    "generator_config layer_fraction": (
        lambda v: electra_backbone.generator_config(_DISCRIMINATOR, layer_fraction=v),
        "`layer_fraction`", "a number in (0, 1]", [0, 2, True, "1", NAN], [0.5, 1]),
    "Masker mask_rate": (
        lambda v: _masker(mask_rate=v), "`mask_rate`", "a number in (0, 1)",
        [0, 1, 1.5, -0.15, True, "0.15", NAN], [0.01, 0.15, 0.99]),
    "Masker mask_token_rate": (
        lambda v: _masker(mask_token_rate=v, random_token_rate=0), "`mask_token_rate`",
        "a number in [0, 1]", [-0.1, 1.5, True, "0.8", NAN], [0, 0.8, 1.0]),
    "Masker random_token_rate": (
        lambda v: _masker(mask_token_rate=0, random_token_rate=v), "`random_token_rate`",
        "a number in [0, 1]", [-0.1, 2, True, "0.1", INF], [0, 1.0]),
    "Masker vocabulary_size": (
        lambda v: _masker(vocabulary_size=v, mask_token_id=0), "`vocabulary_size`",
        "a positive integer", [0, -1, 1.5, True, "10"], [1, 10]),
    "Masker mask_token_id": (
        lambda v: _masker(mask_token_id=v), "`mask_token_id`", "an integer >= 0",
        [-1, 1.5, True, "4", None], [0, 9]),
    "Masker max_predictions": (
        lambda v: _masker(max_predictions=v), "`max_predictions`", "a positive integer",
        [0, -1, 1.5, True, "20"], [None, 1, 20]),
    "Masker seed": (
        lambda v: _masker(seed=v), "`seed`", "an integer >= 0", [-1, 1.5, True, "0", None],
        [0, 12345]),
    "Masker random_token_range": (
        lambda v: _masker(random_token_range=v), "`random_token_range`",
        "None or a (low, high) pair of ids", [5, (1, 2, 3), "15"], [None, (0, 10), [5, 6]]),
    "Masker random_token_range[1]": (
        lambda v: _masker(random_token_range=(5, v)), "`random_token_range[1]`",
        "an integer in 6..10", [5, 11, 7.5, True, "8"], [6, 10]),
    "Masker random_token_range[0]": (
        lambda v: _masker(random_token_range=(v, 10)), "`random_token_range[0]`",
        "an integer in 0..9", [-1, 10, 1.5, "0"], [0, 9]),
    "inverse_frequency_weights power": (
        lambda v: masking.inverse_frequency_weights([3, 0, 1], power=v), "`power`",
        "a finite number >= 0", [-0.5, True, "0.5", NAN, INF], [0, 0.5]),
    "CharCNNHighwayEmbedder filters": (
        _char_cnn, "`filters`", "a non-empty list of (width, count) pairs",
        [[], 5, [[1, 4, 3]], [[1]], "12", None], [[[1, 1]], ((5, 2),)]),
    "CharCNNHighwayEmbedder filters[i]": (
        lambda v: _char_cnn([[1, 4], v]), "`filters[1]`",
        "a non-empty list of positive integers", [[0, 4], [2, -8], [1.5, 4], [True, 4],
                                                 ["3", 4]], [[5, 1], (2, 8)]),
    "adapter_config places": (
        lambda v: _adapter(places=v), "`places`",
        "a non-empty list of 'attention', 'cross_attention', 'feedforward'",
        ["feedforward", [], None, 3], [["feedforward"], ("attention", "feedforward")]),
    "adapter_config invertible": (
        lambda v: _adapter(invertible=v), "`invertible`", "True or False", [1, "yes", None],
        [True, False]),
    "XLNetBackbone clamp_length": (
        lambda v: XLNetBackbone(10, 1, 2, 2, 4, clamp_length=v), "`clamp_length`",
        "an integer >= -1 (-1 = no clipping)", [-2, 1.5, True, "3", None], [-1, 0, 5]),
    "XLNetBackbone hidden_size": (
        lambda v: XLNetBackbone(10, 1, 1, v, 4), "`hidden_size`",
        "a positive even integer (half sine, half cosine features)", [3, 15],
        [2, 4]),
    "two_segment_stream reuse_len": (
        lambda v: xlnet_stream.two_segment_stream(None, 24, 4, 5, 6, reuse_len=v),
        "`reuse_len`", "an integer in 1..20 (the rest holds A, <sep>, B, <sep>, <cls>; XLNet "
        "uses sequence_length / 2)", [0, 21, 12.0, True, "12"], []),  # edges: below
    "few_shot_contexts num_shots": (
        lambda v: few_shot_contexts([], num_shots=v), "`num_shots`", "an integer >= 0",
        [-1, 1.5, True, "3", None], [0, 3]),
    "text_stream eos_id": (
        lambda v: multilingual.text_stream(["a"], 8, eos_id=v, language_id=0), "`eos_id`",
        "an integer >= 0", [-1, 1.5, "1"], []),  # edges: the next test
    "smoothed_probabilities alpha": (
        lambda v: multilingual.smoothed_probabilities([1, 3], v), "`alpha`",
        "a number in [0, 1]", [-0.1, 1.5, True, "0.5", NAN], [0, 0.7, 1.0]),
    "XLMMasker sample_alpha": (
        lambda v: multilingual.XLMMasker(10, 4, 1, 0, [5] * 10, sample_alpha=v),
        "`sample_alpha`", "a finite number >= 0", [-0.5, True, "0.5", NAN, INF], [0, 0.5]),
    "bert_adamw weight_decay": (
        lambda v: bert_adamw(1e-4, weight_decay=v), "`weight_decay`", "a finite number >= 0",
        [-0.01, True, "0.01", NAN], [0, 0.01]),
    "bert_adamw beta_2": (
        lambda v: bert_adamw(1e-4, beta_2=v), "`beta_2`", "a number in [0, 1)",
        [1, 1.5, -0.1, True, "0.999"], [0, 0.999]),
    "bert_adamw epsilon": (
        lambda v: bert_adamw(1e-4, epsilon=v), "`epsilon`", "a positive finite number",
        [0, -1e-6, True, "1e-6", INF], [1e-6]),
    # The noise of the encoder-decoders (issue 55: h1's rates, routed here).
    "span_corruption_lengths noise_density": (
        lambda v: noise.span_corruption_lengths(100, noise_density=v), "`noise_density`",
        "a number in (0, 1)", [0, 1, 1.5, -0.15, True, "0.15", NAN], [0.01, 0.15, 0.99]),
    "random_spans_noise_mask noise_density": (
        lambda v: noise.random_spans_noise_mask(20, noise_density=v), "`noise_density`",
        "a number in (0, 1)", [0, 1, True, NAN], [0.15]),
    "span_corruption mean_noise_span_length": (
        lambda v: noise.span_corruption([5, 6, 7, 8, 9, 10], mean_noise_span_length=v),
        "`mean_noise_span_length`", "a finite number >= 1",
        [0, 0.5, -3, True, "3", NAN, INF], [1, 3.0]),
    "text_infilling rate": (
        lambda v: _infilling(rate=v), "`rate`", "a number in [0, 1]",
        [-0.3, 1.5, True, "0.3", NAN], [0, 0.3, 1.0]),
    "text_infilling mask_random": (
        lambda v: _infilling(mask_random=v), "`mask_random`", "a number in [0, 1]",
        [-0.1, 2, True, "0.1", INF], [0, 0.1, 1.0]),
    "poisson_span_log_probs poisson_lambda": (
        lambda v: noise.poisson_span_log_probs(v), "`poisson_lambda`",
        "a positive finite number", [0, -3.5, True, "3.5", NAN, INF], [0.1, 3.5, 16]),
    "token_masking rate": (
        lambda v: noise.token_masking([5, 6, 7], 4, rate=v), "`rate`", "a number in [0, 1]",
        [-0.15, 1.5, True, "0.15", NAN], [0, 0.15, 1.0]),
    "token_deletion rate": (
        lambda v: noise.token_deletion([5, 6, 7], rate=v), "`rate`",
        "a number in [0, 1)", [1, -0.15, True, "0.15", NAN], [0, 0.15]),
    "SpanMasker p": (
        lambda v: _span_masker(p=v), "`p`", "a number in (0, 1]",
        [0, -0.2, 1.5, True, "0.2", NAN], [0.2, 1.0]),
    "SpanMasker max_span_words": (
        lambda v: _span_masker(max_span_words=v), "`max_span_words`", "a positive integer",
        [0, -1, 2.5, True, "10"], [1, 10]),
    "sample_permutation reuse_len": (
        lambda v: permutation.sample_permutation([list(range(16))], reuse_len=v), "`reuse_len`",
        "an integer in 1..15 (shorter than the sequence: the rest is the part that is not "
        "reused)", [0, -1, 16, 8.0, True, "8"], [1, 15]),
    "sample_permutation perm_size": (
        lambda v: permutation.sample_permutation([list(range(16))], reuse_len=12, perm_size=v,
                                                 num_predict=2), "`perm_size`",
        "one of 1, 2, 4 (a divisor of 12 and 4, the reuse part and the rest; XLNet uses "
        "perm_size = reuse_len = sequence_length / 2)", [0, -4, 3, 8, 12, 4.0, True, "4"],
        [1, 2, 4]),
    "sample_permutation num_predict": (
        lambda v: permutation.sample_permutation([list(range(16))], num_predict=v),
        "`num_predict`", "an integer in 1..16 (at most one target per position)",
        [0, 17, 2.0, True, "2"], [1, 16]),
    "relative_positional_encoding hidden_size": (
        lambda v: relative_positional_encoding(2, 2, v), "`hidden_size`",
        "a positive even integer (half sine, half cosine features)",
        [0, -2, 7, 2.0, True, "8"], [2, 8]),
}


def _cases(column):
    return [(entry, value) for entry, row in sorted(ROUTED.items()) for value in row[column]]


@pytest.mark.parametrize("entry, value", _cases(3), ids=repr)
def test_every_routed_check_refuses_in_one_message(entry, value):
    call, label, allowed, _, _ = ROUTED[entry]
    with pytest.raises(ConfigError) as caught:
        call(value)
    assert str(caught.value) == f"{label} must be {allowed}, got {value!r}."


@pytest.mark.parametrize("entry, value", _cases(4), ids=repr)
def test_every_routed_check_accepts_its_edge_values(entry, value):
    ROUTED[entry][0](value)  # raises nothing


def test_a_mean_span_fairseq_cannot_tabulate_is_refused_in_one_message():
    # exp(-lambda) < 1e-7 above lambda = 16.1: fairseq's table would hold length 0 alone.
    with pytest.raises(ConfigError) as caught:
        noise.poisson_span_log_probs(20.0)
    assert str(caught.value) == (
        "`poisson_lambda` must be a mean span of 16 or less (above, P(0) < 1e-7 leaves "
        "fairseq's span table only length 0), got 20.0.")


def test_an_integer_in_a_range_takes_both_ends():
    # two_segment_stream and text_stream need a dataset past their checks: their rules here.
    assert [validation.integer_in("reuse_len", v, 1, 20) for v in (1, 20)] == [1, 20]
    assert validation.non_negative_int("eos_id", 0) == 0


def test_rates_that_share_one_draw_must_sum_to_at_most_one():
    with pytest.raises(ConfigError) as caught:
        _masker(mask_token_rate=0.9, random_token_rate=0.2)
    assert str(caught.value) == ("`mask_token_rate` + `random_token_rate` must be at most 1, "
                                 "got 0.9 + 0.2 = 1.1.")
    masker = _masker(mask_token_rate=0.9, random_token_rate=0.1)  # 100% replaced: allowed
    assert (masker.mask_token_rate, masker.random_token_rate) == (0.9, 0.1)


@pytest.mark.parametrize("call, message", [
    (lambda: XLNetBackbone(10, 1, 2, 2, 4, attention_type="bii"),
     "`attention_type` must be one of 'bi', 'uni', got 'bii' (did you mean 'bi'?)."),
    (lambda: XLNetBackbone(10, 1, 2, 2, 4, attention_type="causal"),
     "`attention_type` must be one of 'bi', 'uni', got 'causal'."),
    (lambda: TokenEmbedding(10, 4, lookup="gahter"),
     "`lookup` must be one of 'gather', 'one_hot', got 'gahter' (did you mean 'gather'?)."),
    (lambda: Highway(1, activation="rleu"),
     "`activation` must be the name of a Keras activation (e.g. 'relu'), got 'rleu' "
     "(did you mean 'relu'?)."),
    (lambda: BottleneckAdapter(activation="rlue"),  # was refused only at build, by Keras
     "`activation` must be the name of a Keras activation (e.g. 'relu'), got 'rlue' "
     "(did you mean 'relu'?)."),
    (lambda: SequenceClassifier(None, 2, pooling="maen"),
     "`pooling` must be one of 'auto', 'concat', 'first', 'last', 'mean', 'pooled', got "
     "'maen' (did you mean 'mean'?)."),
    (lambda: segments.pack_sentences([], 8, 1, 2, mode="full_sentence"),
     "`mode` must be one of 'doc_sentences', 'full_sentences', 'two_segments', got "
     "'full_sentence' (did you mean 'full_sentences'?)."),
    (lambda: TextPreprocessor(None, 8, "bert", truncation="longest"),
     "`truncation` must be one of 'error', 'longest_first', got 'longest' (did you mean "
     "'longest_first'?)."),
], ids=["close name", "no close name", "lookup", "Highway activation", "adapter activation",
        "pooling", "packing mode", "truncation"])
def test_a_misspelt_choice_names_the_closest(call, message):
    with pytest.raises(ConfigError) as caught:
        call()
    assert str(caught.value) == message

import keras
import numpy as np
import pytest

from keras_ctx import generation
from keras_ctx.models.bart.backbone import BartBackbone
from keras_ctx.models.gpt.backbone import GPTBackbone
from keras_ctx.models.t5.backbone import T5Backbone
from tests.execution import DECODE, few_calls

to_numpy = keras.ops.convert_to_numpy  # a tensor of the running backend, as NumPy

SEQ2SEQ = dict(vocabulary_size=40, num_layers=1, num_heads=2, hidden_size=16,
               intermediate_size=32, dropout=0.0)


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(3)
    return GPTBackbone(vocabulary_size=50, num_layers=2, num_heads=2, hidden_size=16,
                       intermediate_size=32, max_sequence_length=16, dropout=0.0)


PROMPT = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])


# ----------------------------------------------------------------- samplers


def test_greedy_top_k_top_p_draw_from_the_right_sets():
    logits = keras.ops.convert_to_tensor(np.log([[0.5, 0.25, 0.15, 0.1]] * 4000), "float32")
    assert (to_numpy(generation.GreedySampler()(logits, 0, 0)) == 0).all()
    top_k = to_numpy(generation.TopKSampler(k=2)(logits, 1, 0))
    assert set(top_k) == {0, 1}
    # Renormalised over the top 2: p(0) = 0.5 / 0.75.
    assert abs((top_k == 0).mean() - 2 / 3) < 0.03
    top_p = to_numpy(generation.TopPSampler(p=0.8)(logits, 1, 0))
    # Nucleus of mass >= 0.8: {0, 1, 2} (0.5 + 0.25 < 0.8 <= 0.9).
    assert set(top_p) == {0, 1, 2}
    assert abs((top_p == 2).mean() - 0.15 / 0.9) < 0.03
    random = to_numpy(generation.RandomSampler()(logits, 2, 0))
    np.testing.assert_allclose(np.bincount(random, minlength=4) / 4000,
                               [0.5, 0.25, 0.15, 0.1], atol=0.03)
    # Deterministic given (seed, step); different steps differ.
    again = to_numpy(generation.RandomSampler()(logits, 2, 0))
    np.testing.assert_array_equal(random, again)
    assert (to_numpy(generation.RandomSampler()(logits, 3, 0)) != random).any()


def test_bad_arguments_raise_value_errors(gpt):
    with pytest.raises(ValueError, match="Unknown sampler"):
        generation.get_sampler("nucleus")
    with pytest.raises(ValueError, match="`k`"):
        generation.TopKSampler(k=0)
    with pytest.raises(ValueError, match="`p`"):
        generation.TopPSampler(p=1.5)
    # NaN and inf passed `temperature <= 0` and `float()`: every draw became NaN logits.
    for bad in (float("nan"), float("inf"), 0, True):
        with pytest.raises(ValueError, match="`temperature` must be a positive finite number"):
            generation.RandomSampler(temperature=bad)
    for make in (lambda: generation.TopKSampler(k=2.0), lambda: generation.TopKSampler(k=True),
                 lambda: generation.TopPSampler(p=float("nan")),
                 lambda: generation.BeamSampler(length_penalty=float("nan")),
                 lambda: generation.BeamSampler(num_beams=2.5),
                 lambda: generation.BeamSampler(no_repeat_ngram_size=-1)):
        with pytest.raises(ValueError, match="must be"):
            make()
    with pytest.raises(ValueError, match="max_length"):
        generation.generate(gpt, PROMPT, PROMPT > 0, max_length=3)
    with pytest.raises(ValueError, match="position 0"):
        generation.generate(gpt, PROMPT, np.zeros_like(PROMPT), max_length=8)
    with pytest.raises(ValueError, match="jit_compile"):
        generation.generate(gpt, PROMPT, max_length=12, jit_compile="yes")


# ---------------------------------------------------------------- decoders


@pytest.mark.parametrize("sampler", ["greedy", generation.TopKSampler(k=5),
                                     generation.TopPSampler(p=0.9), generation.BeamSampler(3)],
                         ids=["greedy", "top_k", "top_p", "beam"])
def test_cached_generation_gives_the_same_tokens_as_uncached(gpt, sampler):
    kwargs = dict(max_length=12, sampler=sampler, seed=7)
    cached = generation.generate(gpt, PROMPT, PROMPT > 0, use_cache=True, jit_compile=True,
                                 **kwargs)
    # The reference re-runs the whole sequence each step. Deterministic samplers
    # run it in graph mode without XLA (faster to build); random ones under XLA
    # too, since XLA and TF kernels draw different stateless random numbers.
    deterministic = sampler == "greedy" or isinstance(sampler, generation.BeamSampler)
    uncached = generation.generate(gpt, PROMPT, PROMPT > 0, use_cache=False,
                                   jit_compile=not deterministic, **kwargs)
    np.testing.assert_array_equal(to_numpy(cached["token_ids"]), to_numpy(uncached["token_ids"]))
    out = to_numpy(cached["token_ids"])
    assert out.shape == (2, 12)
    np.testing.assert_array_equal(out[0, :3], [5, 6, 7])  # prompts are kept
    np.testing.assert_array_equal(out[1, :2], [8, 9])


def test_greedy_matches_a_numpy_free_step_by_step_reference(gpt):
    """Greedy = argmax of the full model's logits at each step (the whole prefix, no cache)."""
    out = to_numpy(generation.generate(gpt, PROMPT[:1, :3], max_length=8)["token_ids"])

    @few_calls
    def logits(x, mask):
        return gpt.logits(gpt({"token_ids": x, "padding_mask": mask})["sequence_output"])

    ids = list(PROMPT[0, :3])
    while len(ids) < 8:
        x = np.array([ids], "int32")
        ids.append(int(np.argmax(to_numpy(logits(x, np.ones_like(x)))[0, -1])))
    np.testing.assert_array_equal(out[0], ids)


def test_stream_yields_the_tokens_generate_writes(gpt):
    """`stream` (one compiled step per token) continues as the decode loop does, a random
    sampler too (draws seeded by position); a stop token ends it; beams cannot stream."""
    prompt = PROMPT[:1, :3]
    for sampler in ("greedy", generation.TopKSampler(k=5)):
        kwargs = dict(max_length=8, sampler=sampler, seed=7)
        # Without jit: the cheapest here on every backend (on JAX the loop alone compiles:
        # 18 s, against 26 s for DECODE's jit of the whole; tests/execution.py).
        out = to_numpy(generation.generate(gpt, prompt, jit_compile=False, **kwargs)
                       ["token_ids"])[0]
        assert list(generation.stream(gpt, prompt, **kwargs)) == list(out[3:])
    end = int(out[4])
    streamed = list(generation.stream(gpt, prompt, end_token_id=end, **kwargs))
    assert streamed == list(out[3:list(out[3:]).index(end) + 4])
    with pytest.raises(ValueError, match="Beam search cannot stream"):
        next(generation.stream(gpt, prompt, max_length=8, sampler="beam"))


def test_generation_stops_at_end_tokens(gpt):
    free = to_numpy(generation.generate(gpt, PROMPT, PROMPT > 0, max_length=12)["token_ids"])
    end = int(free[0, 4])  # row 0's second generated token
    first_end = np.argmax(free[0, 3:] == end) + 3
    out = generation.generate(gpt, PROMPT, PROMPT > 0, max_length=12, end_token_id=end,
                              pad_token_id=49)
    ids, mask = to_numpy(out["token_ids"]), to_numpy(out["padding_mask"])
    np.testing.assert_array_equal(ids[0, :first_end + 1], free[0, :first_end + 1])
    assert (ids[0, first_end + 1:] == 49).all()
    assert mask[0, :first_end + 1].all() and not mask[0, first_end + 1:].any()
    # A row that never produced the end token runs to max_length unchanged.
    if end not in free[1, 2:]:
        np.testing.assert_array_equal(ids[1], free[1])
        assert mask[1].all()


def test_beam_search_finds_at_least_greedy_log_probability(gpt):
    def logits_fn(ids):
        hidden = gpt({"token_ids": ids, "padding_mask": keras.ops.ones_like(ids)})["sequence_output"]
        return gpt.logits(hidden)

    # max_length 12 and 3 beams: the loops compiled by the tests above are reused.
    prompt, mask = PROMPT, PROMPT > 0
    full_mask = np.pad(mask, ((0, 0), (0, 8)))
    greedy = generation.generate(gpt, prompt, mask, max_length=12, seed=7)
    beam = generation.generate(gpt, prompt, mask, max_length=12, seed=7,
                               sampler=generation.BeamSampler(3))
    one_beam = generation.generate(gpt, prompt, mask, max_length=12,
                                   sampler=generation.BeamSampler(1))
    np.testing.assert_array_equal(to_numpy(one_beam["token_ids"]), to_numpy(greedy["token_ids"]))
    score = {name: to_numpy(generation.sequence_log_probability(
        logits_fn, out["token_ids"], full_mask, to_numpy(out["padding_mask"])))
        for name, out in (("greedy", greedy), ("beam", beam))}
    assert (score["beam"] >= score["greedy"] - 1e-4).all()


@pytest.mark.parametrize("sampler", ["greedy", generation.BeamSampler(3)],
                         ids=["greedy", "beam"])
def test_the_loop_without_xla_gives_the_same_tokens_as_with_it(gpt, sampler):
    # "auto" runs one row of float32 weights on a CPU as a TF graph (faster
    # there, see resolve_jit_compile): the tokens and beam scores are XLA's.
    kwargs = dict(max_length=12, sampler=sampler, end_token_id=int(PROMPT[0, 2]))
    graph = generation.generate(gpt, PROMPT, PROMPT > 0, jit_compile=False, **kwargs)
    xla = generation.generate(gpt, PROMPT, PROMPT > 0, jit_compile=True, **kwargs)
    for name in graph:
        if name.endswith("scores") or name.endswith("probabilities"):
            np.testing.assert_allclose(to_numpy(graph[name]), to_numpy(xla[name]),
                                       rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(to_numpy(graph[name]), to_numpy(xla[name]),
                                          err_msg=name)


@pytest.mark.slow  # ~35 s
@pytest.mark.tensorflow_only("'auto' is TensorFlow's CPU rule: JAX always jits, torch "
                             "decodes eagerly")
def test_auto_jit_compile_is_xla_except_one_float32_row_on_a_cpu(gpt):
    assert generation.resolve_jit_compile("auto", gpt, rows=1) is False
    assert generation.resolve_jit_compile("auto", gpt, rows=2) is True
    assert generation.resolve_jit_compile(True, gpt) is True
    assert generation.resolve_jit_compile("auto", generation.for_decoding(gpt, "int8"))
    assert generation.resolve_jit_compile("auto", generation.for_decoding(gpt, "bfloat16"))


# --------------------------------------------------------- encoder-decoders


@pytest.mark.parametrize("family, sampler", [
    ("t5", "greedy"), ("t5", generation.BeamSampler(2)), ("bart", "greedy")],
    ids=["t5-greedy", "t5-beam", "bart-greedy"])
def test_seq2seq_cached_generation_equals_uncached(family, sampler):
    keras.utils.set_random_seed(5)
    backbone = (T5Backbone(**SEQ2SEQ) if family == "t5"
                else BartBackbone(**SEQ2SEQ, max_sequence_length=16))
    encoder_ids = np.array([[5, 6, 7, 8, 0], [8, 9, 3, 0, 0]])
    kwargs = dict(max_length=10, sampler=sampler, decoder_start_token_id=1)
    cached = generation.generate_seq2seq(backbone, encoder_ids, encoder_ids > 0, **kwargs)
    uncached = generation.generate_seq2seq(backbone, encoder_ids, encoder_ids > 0,
                                           use_cache=False, jit_compile=DECODE, **kwargs)
    np.testing.assert_array_equal(to_numpy(cached["token_ids"]), to_numpy(uncached["token_ids"]))
    assert (to_numpy(cached["token_ids"])[:, 0] == 1).all()


# ------------------------------------------ beam search against enumeration

VOCAB = 5


def _peaked(backbone, seed):
    """Random weights with std 0.5 (not 0.02): distinct, peaked log-probabilities."""
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:
        if len(variable.shape) >= 2:
            variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return backbone


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _repeats_ngram(sequence, n):
    """True if the last n-gram of `sequence` occurs earlier in it."""
    if not n or len(sequence) < n:
        return False
    last = list(sequence[-n:])
    return any(list(sequence[j:j + n]) == last for j in range(len(sequence) - n))


class _Memo:
    """`forward(sequences)` -> each sequence's next-token log-probabilities by the full
    model (no cache), computed once per sequence: the parametrizations that share a
    model share the brute-force tree's forward passes (another end token or n-gram
    block prunes the same tree)."""

    def __init__(self, forward):
        self.forward, self.known = forward, {}

    def __call__(self, sequences):
        missing = list(dict.fromkeys(tuple(s) for s in sequences if tuple(s) not in self.known))
        if missing:
            self.known.update(zip(missing, self.forward(missing)))
        return [self.known[tuple(s)] for s in sequences]


def _enumerate(next_log_probs, prompt, max_length, end_tokens, alpha, ngram):
    """Every continuation (a stop token ends one), scored by brute force:
    [(penalised score, log P, generated ids)], best first."""
    results, frontier = [], [(list(prompt), 0.0)]
    while frontier and len(frontier[0][0]) < max_length:
        log_probs = next_log_probs([ids for ids, _ in frontier])
        extended = []
        for (ids, score), row in zip(frontier, log_probs):
            for token in range(VOCAB):
                new = ids + [token]
                if _repeats_ngram(new, ngram):
                    continue
                (results if token in end_tokens else extended).append(
                    (new, score + float(row[token])))
        frontier = extended
    results += frontier
    scored = [(lp / ((5 + len(ids) - len(prompt)) / 6) ** alpha, lp, ids[len(prompt):])
              for ids, lp in results]
    return sorted(scored, key=lambda s: -s[0])


def _check_against_enumeration(out, references, prompts, beams):
    ids, mask = to_numpy(out["beam_token_ids"]), to_numpy(out["beam_padding_mask"])
    scores = to_numpy(out["beam_scores"])
    log_probs = to_numpy(out["beam_log_probabilities"])
    for row, (reference, prompt) in enumerate(zip(references, prompts)):
        assert len(reference) >= beams
        for beam, (score, log_prob, generated) in enumerate(reference[:beams]):
            got = ids[row, beam][mask[row, beam]]
            np.testing.assert_array_equal(got[:len(prompt)], prompt)
            assert list(got[len(prompt):]) == generated, (row, beam)
            np.testing.assert_allclose([scores[row, beam], log_probs[row, beam]],
                                       [score, log_prob], rtol=1e-4, atol=1e-4)
        assert (np.diff(scores[row]) <= 0).all()  # best first


@pytest.fixture(scope="module")
def peaked_decoders():
    """family -> (peaked GPT backbone, its memoised brute-force next-token log-probs),
    built once per module: the gpt2 cases share one model and one tree of forward passes."""
    made = {}

    def get(family):
        if family not in made:
            keras.utils.set_random_seed(11)
            extra = (dict(num_layers=2, attention_pattern="alternating", window_size=2,
                          attention_scale=1.0, use_qkv_bias=False) if family == "gpt-neo"
                     else dict(num_layers=1))
            gpt = _peaked(GPTBackbone(vocabulary_size=VOCAB, num_heads=2, hidden_size=16,
                                      intermediate_size=32, max_sequence_length=8,
                                      dropout=0.0, **extra), seed=1)

            @few_calls
            def logits(x, mask, gpt=gpt):
                hidden = gpt({"token_ids": x, "padding_mask": mask})["sequence_output"]
                return gpt.logits(hidden)[:, -1]

            def forward(sequences, logits=logits):
                x = np.array(sequences, "int32")
                return _log_softmax(to_numpy(logits(x, np.ones_like(x))))

            made[family] = gpt, _Memo(forward)
        return made[family]

    return get


@pytest.mark.parametrize("family, alpha, end_tokens, ngram", [
    ("gpt2", 0.0, (4,), 0),
    ("gpt2", 1.5, (3, 4), 0),
    ("gpt-neo", -1.0, (4,), 0),
    ("gpt2", 0.0, (4,), 2),
])
def test_wide_beam_search_returns_the_exhaustive_top_k(peaked_decoders, family, alpha,
                                                       end_tokens, ngram):
    """Ragged prompts (3 and 4 generated tokens); a beam as wide as the running
    continuations at the last step prunes nothing that could rank, so its beams
    must be the true top-k of all sequences by brute force."""
    gpt, next_log_probs = peaked_decoders(family)
    prompts = [[1, 2], [3]]
    beams = (VOCAB - len(end_tokens)) ** 3  # running beams before the last step
    sampler = generation.BeamSampler(beams, length_penalty=alpha, no_repeat_ngram_size=ngram)
    out = generation.generate(gpt, np.array([[1, 2], [3, 0]]), np.array([[1, 1], [1, 0]]),
                              max_length=5, sampler=sampler, end_token_id=list(end_tokens))
    references = [_enumerate(next_log_probs, p, 5, end_tokens, alpha, ngram) for p in prompts]
    _check_against_enumeration(out, references, prompts, beams)
    # Stop tokens end beams: nothing after one, pads after it.
    ids, mask = to_numpy(out["beam_token_ids"]), to_numpy(out["beam_padding_mask"])
    for row, prompt in enumerate(prompts):
        for beam in range(beams):
            generated = ids[row, beam][mask[row, beam]][len(prompt):]
            assert not np.isin(generated[:-1], end_tokens).any()
            assert (ids[row, beam][~mask[row, beam]] == 0).all()


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_wide_seq2seq_beam_search_returns_the_exhaustive_top_k(family):
    keras.utils.set_random_seed(5)
    config = dict(SEQ2SEQ, vocabulary_size=VOCAB)
    backbone = _peaked(T5Backbone(**config) if family == "t5"
                       else BartBackbone(**config, max_sequence_length=16), seed=2)
    encoder_ids = np.array([[1, 2, 3, 4], [2, 4, 0, 0]])
    beams = (VOCAB - 1) ** 2
    out = generation.generate_seq2seq(
        backbone, encoder_ids, encoder_ids > 0, max_length=4, decoder_start_token_id=1,
        sampler=generation.BeamSampler(beams, length_penalty=0.6), end_token_id=2)
    references = []

    @few_calls
    def seq2seq_logits(encoder_ids, encoder_mask, x, mask):
        outputs = backbone({"encoder_token_ids": encoder_ids, "encoder_padding_mask": encoder_mask,
                            "decoder_token_ids": x, "decoder_padding_mask": mask})
        return backbone.logits(outputs["decoder_sequence_output"])[:, -1]

    for row in range(2):
        def next_log_probs(sequences, row=row):
            x = np.array(sequences, "int32")
            n = len(x)
            return _log_softmax(to_numpy(seq2seq_logits(
                np.repeat(encoder_ids[row:row + 1], n, 0),
                np.repeat(encoder_ids[row:row + 1] > 0, n, 0), x, np.ones_like(x))))

        references.append(_enumerate(next_log_probs, [1], 4, (2,), 0.6, 0))
    _check_against_enumeration(out, references, [[1], [1]], beams)


def test_repeated_ngram_tokens_matches_brute_force():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4, size=(6, 9)).astype("int32")
    for n in (1, 2, 3):
        for index in range(9):
            banned = to_numpy(generation.repeated_ngram_tokens(keras.ops.convert_to_tensor(ids),
                                                                index, n, 4))
            for row in range(6):
                expected = [_repeats_ngram(list(ids[row, :index]) + [t], n) for t in range(4)]
                np.testing.assert_array_equal(banned[row], expected, err_msg=f"{n} {index}")


def test_ngram_blocking_never_emits_a_repeated_ngram(gpt):
    # The small-init model repeats its last token: 2-grams repeat without blocking.
    kwargs = dict(max_length=12)
    free = generation.generate(gpt, PROMPT, PROMPT > 0, sampler=generation.BeamSampler(3),
                               **kwargs)
    blocked = generation.generate(
        gpt, PROMPT, PROMPT > 0, sampler=generation.BeamSampler(3, no_repeat_ngram_size=2),
        **kwargs)

    def repeats(out):
        ids, mask = to_numpy(out["beam_token_ids"]), to_numpy(out["beam_padding_mask"])
        return [any(_repeats_ngram(seq[:end], 2) for end in range(3, len(seq) + 1))
                for seq in (ids[r, b][mask[r, b]] for r in range(2) for b in range(3))]

    assert any(repeats(free))
    assert not any(repeats(blocked))


def test_stop_token_ids_are_checked(gpt):
    with pytest.raises(ValueError, match="end_token_id"):
        generation.generate(gpt, PROMPT, PROMPT > 0, max_length=8, end_token_id=[3, 50])
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        generation.BeamSampler(2, no_repeat_ngram_size=-1)


# ------------------------------------------------- bfloat16 and int8 decoding


@pytest.fixture(scope="module")
def moderate_gpt():
    """Weights of std 0.15: logits spread ~0.9, greedy choices not near-ties everywhere."""
    keras.utils.set_random_seed(3)
    backbone = GPTBackbone(vocabulary_size=64, num_layers=2, num_heads=2, hidden_size=32,
                           intermediate_size=64, max_sequence_length=32, dropout=0.0)
    rng = np.random.default_rng(0)
    for variable in backbone.weights:
        if len(variable.shape) >= 2:
            variable.assign(rng.normal(0.0, 0.15, variable.shape).astype("float32"))
    return backbone


def _full_logits(backbone, ids):
    hidden = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"]
    return to_numpy(keras.ops.cast(backbone.logits(hidden), "float32"))


@pytest.mark.parametrize("precision", [
    "bfloat16", pytest.param("int8", marks=pytest.mark.slow)])  # int8: ~40 s; tests/test_quantization.py
def test_bfloat16_and_int8_decoding_stay_close_to_float32(moderate_gpt, precision):
    prompt = np.random.default_rng(1).integers(1, 64, (4, 4))
    reference = to_numpy(generation.generate(moderate_gpt, prompt, max_length=20)["token_ids"])
    fast = generation.for_decoding(moderate_gpt, precision)
    # The weights really are stored in the new precision; the original is untouched.
    dtypes = {w.path: w.dtype for w in fast.weights}
    assert dtypes["decoder_block_0/feedforward/intermediate/kernel"] == precision
    assert dtypes["token_embedding/embeddings"] == precision  # the tied output layer
    assert all(w.dtype == "float32" for w in moderate_gpt.weights)
    # Teacher-forced on float32's greedy output: logits and argmax agree.
    expected, got = _full_logits(moderate_gpt, reference), _full_logits(fast, reference)
    assert np.abs(got - expected).max() < 0.1 * expected.std()
    assert (got.argmax(-1) == expected.argmax(-1)).mean() >= 0.95
    # The compiled, cached loop in that precision: the first 8 generated tokens
    # of every row are float32's.
    out = to_numpy(generation.generate(fast, prompt, max_length=20)["token_ids"])
    np.testing.assert_array_equal(out[:, :12], reference[:, :12])
    with pytest.raises(ValueError, match="precision"):
        generation.for_decoding(moderate_gpt, "float16")


@pytest.mark.parametrize("family, precision", [
    pytest.param("t5", "int8", marks=pytest.mark.slow),  # ~100 s: int8 T5 decodes slowly on a CPU
    ("bart", "bfloat16")])
def test_seq2seq_decoding_in_bfloat16_and_int8_keeps_float32_tokens(family, precision):
    keras.utils.set_random_seed(5)
    config = dict(SEQ2SEQ, vocabulary_size=64, num_layers=2, hidden_size=32,
                  intermediate_size=64)
    backbone = (T5Backbone(**config) if family == "t5"
                else BartBackbone(**config, max_sequence_length=16))
    rng = np.random.default_rng(0)
    for variable in backbone.weights:
        if len(variable.shape) >= 2:
            variable.assign(rng.normal(0.0, 0.15, variable.shape).astype("float32"))
    encoder_ids = rng.integers(1, 64, (4, 6))
    kwargs = dict(max_length=12, decoder_start_token_id=1)
    reference = generation.generate_seq2seq(backbone, encoder_ids, **kwargs)["token_ids"]
    fast = generation.for_decoding(backbone, precision)
    assert {w.dtype for w in fast.weights} >= {precision}
    out = generation.generate_seq2seq(fast, encoder_ids, **kwargs)["token_ids"]
    np.testing.assert_array_equal(to_numpy(out), to_numpy(reference))

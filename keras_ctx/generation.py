"""Autoregressive generation that compiles with XLA: samplers and decode loops.

The token buffer has a static shape (batch, max_length): the prompt sits at
its start (right-padded), `padding_mask` marks prompt tokens, and each loop
step writes one position. With `use_cache=True` each step runs one token
through the decoder with a static-shape key/value cache (written in place by
`keras_ctx.layers.MultiHeadAttention`); with `use_cache=False` it re-runs the
whole buffer (the reference the cache is tested against). Rows stop at
a stop token (`end_token_id`: one id or several; later positions get
`pad_token_id`); the loop stops once every row has. Beam search
(`BeamSampler`) returns every beam with its score, with GNMT's length
penalty and n-gram blocking as options.

Decoder-only backbones (GPT) provide `build_cache(batch, max_length)`,
`call_with_cache(token_ids, cache, index)` and `logits(hidden)`;
encoder-decoders (T5, BART) provide `encode(...)`,
`build_decoder_cache(encoder_output, max_length)`,
`decode_with_cache(token_ids, cache, index, encoder_padding_mask)` and
`logits(hidden)`.

Example:
>>> out = keras_ctx.generation.generate(backbone, prompt_ids, prompt_mask,
...                                     max_length=64, sampler="top_p")
>>> out["token_ids"], out["padding_mask"]
"""

import warnings
import weakref

import numpy as np
from keras_ctx.optional import tensorflow as tf
from keras import ops

from keras_ctx.layers._backend import update_positions

NEG_INF = -1e9


# --------------------------------------------------------------------- samplers


class Sampler:
    """Picks the next token from (batch, vocab) logits; `seed` is an int tensor."""

    def __call__(self, logits, step, seed):
        raise NotImplementedError

    def get_config(self):
        return {}

    def _key(self):
        return (type(self).__name__,) + tuple(sorted(self.get_config().items()))


class GreedySampler(Sampler):
    """The most probable token."""

    def __call__(self, logits, step, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)


class RandomSampler(Sampler):
    """Samples from softmax(logits / temperature)."""

    def __init__(self, temperature=1.0):
        if temperature <= 0:
            raise ValueError(f"`temperature` must be positive, got {temperature}.")
        self.temperature = float(temperature)

    def _sample(self, logits, step, seed):
        seeds = tf.stack([tf.cast(seed, tf.int32), tf.cast(step, tf.int32)])
        return tf.random.stateless_categorical(
            tf.cast(logits, tf.float32) / self.temperature, 1, seeds, dtype=tf.int32
        )[:, 0]

    def __call__(self, logits, step, seed):
        return self._sample(logits, step, seed)

    def get_config(self):
        return {"temperature": self.temperature}


class TopKSampler(RandomSampler):
    """Samples among the k most probable tokens (Fan et al., 2018)."""

    def __init__(self, k=5, temperature=1.0):
        super().__init__(temperature)
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"`k` must be a positive integer, got {k!r}.")
        self.k = k

    def __call__(self, logits, step, seed):
        values, indices = tf.math.top_k(tf.cast(logits, tf.float32), k=self.k)
        choice = self._sample(values, step, seed)
        return tf.gather(indices, choice[:, None], batch_dims=1)[:, 0]

    def get_config(self):
        return {"k": self.k, "temperature": self.temperature}


class TopPSampler(RandomSampler):
    """Nucleus sampling (Holtzman et al., 2020): the smallest set of tokens with
    cumulative probability >= p."""

    def __init__(self, p=0.9, temperature=1.0):
        super().__init__(temperature)
        if not 0.0 < p <= 1.0:
            raise ValueError(f"`p` must be in (0, 1], got {p!r}.")
        self.p = float(p)

    def __call__(self, logits, step, seed):
        logits = tf.cast(logits, tf.float32) / self.temperature
        vocabulary = logits.shape[-1] or tf.shape(logits)[-1]
        sorted_logits, indices = tf.math.top_k(logits, k=vocabulary)
        probabilities = tf.nn.softmax(sorted_logits, axis=-1)
        # Keep token i when the mass strictly before it is < p (the top token always).
        before = tf.cumsum(probabilities, axis=-1, exclusive=True)
        sorted_logits = tf.where(before < self.p, sorted_logits, NEG_INF)
        seeds = tf.stack([tf.cast(seed, tf.int32), tf.cast(step, tf.int32)])
        choice = tf.random.stateless_categorical(sorted_logits, 1, seeds, dtype=tf.int32)
        return tf.gather(indices, choice, batch_dims=1)[:, 0]

    def get_config(self):
        return {"p": self.p, "temperature": self.temperature}


def gnmt_length_penalty(length, alpha):
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, Sec. 7).

    Beam search ranks finished hypotheses by log P(Y) / lp(Y): alpha = 0 is
    the plain log-probability, alpha > 0 favours longer outputs (T5's beam
    search gin sets 0.6), alpha < 0 shorter ones. |Y| counts the
    generated tokens, the stop token included, not the prompt.
    """
    return ((5.0 + length) / 6.0) ** alpha


class BeamSampler(Sampler):
    """Beam search over the `num_beams` most probable continuations.

    Two sets per row, as in GNMT / T5X: `num_beams` running beams ranked by
    log-probability, and the `num_beams` best finished hypotheses (ended
    with a stop token, or reaching max_length) ranked by
    log P(Y) / gnmt_length_penalty(|Y|, length_penalty). A row is done when no
    running beam can still enter its finished set (its log-probability can
    only fall; the bound takes the most favourable length penalty left);
    the loop ends when every row is done or at max_length. All beams are
    returned with their scores, best first.

    Args:
        num_beams: beams kept per row.
        length_penalty: alpha of `gnmt_length_penalty` (0 = none).
        no_repeat_ngram_size: n > 0 forbids any token that would repeat an
            n-gram already in the sequence (prompt included), as Hugging
            Face's `no_repeat_ngram_size`; 0 = off.
    """

    def __init__(self, num_beams=4, length_penalty=0.0, no_repeat_ngram_size=0):
        if not isinstance(num_beams, int) or num_beams < 1:
            raise ValueError(f"`num_beams` must be a positive integer, got {num_beams!r}.")
        if not isinstance(no_repeat_ngram_size, int) or no_repeat_ngram_size < 0:
            raise ValueError("`no_repeat_ngram_size` must be an integer >= 0 (0 = off), "
                             f"got {no_repeat_ngram_size!r}.")
        self.num_beams = num_beams
        self.length_penalty = float(length_penalty)
        self.no_repeat_ngram_size = no_repeat_ngram_size

    def get_config(self):
        return {"num_beams": self.num_beams, "length_penalty": self.length_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size}


SAMPLERS = {
    "greedy": GreedySampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
}


def get_sampler(identifier):
    """A Sampler from itself or a name: greedy, random, top_k, top_p, beam."""
    if isinstance(identifier, Sampler):
        return identifier
    if identifier not in SAMPLERS:
        raise ValueError(
            f"Unknown sampler {identifier!r}; use one of {sorted(SAMPLERS)} or a "
            "Sampler instance (e.g. TopKSampler(k=10))."
        )
    return SAMPLERS[identifier]()


# ------------------------------------------------------------------ decode loops


def _column(tensor, index):
    return tf.gather(tensor, index, axis=1)


def _write_column(tensor, index, values):
    return update_positions(tensor, index, ops.cast(values, tensor.dtype)[:, None])


def _is_end(tokens, end_tokens):
    """True where `tokens` is one of the stop tokens (a tuple, or None: never)."""
    if not end_tokens:
        return tf.zeros_like(tokens, tf.bool)
    ends = tf.constant(end_tokens, tf.int32)
    return tf.reduce_any(tf.cast(tokens, tf.int32)[..., None] == ends, axis=-1)


def _final_mask(token_ids, prompt_mask, generated_until, end_tokens):
    length = tf.shape(token_ids)[1]
    positions = tf.range(length)[None, :]
    mask = prompt_mask | (positions < generated_until)
    if end_tokens:
        is_end = tf.cast(_is_end(token_ids, end_tokens) & ~prompt_mask, tf.int32)
        ended_before = (tf.cumsum(is_end, axis=1) - is_end) > 0
        mask = mask & ~ended_before
    return mask


def _sampling_loop(step_fn, token_ids, prompt_mask, state, start, sampler, seed,
                   end_tokens, pad_token_id):
    """Writes positions start..L-1.

    step_fn(token_ids, state, i) -> (next-token logits at position i, state).
    """
    batch = tf.shape(token_ids)[0]
    length = token_ids.shape[1]

    def cond(index, token_ids, state, done):
        return (index < length) & ~tf.reduce_all(done)

    def body(index, token_ids, state, done):
        logits, state = step_fn(token_ids, state, index - 1)
        sampled = tf.cast(sampler(logits, index, seed), tf.int32)
        in_prompt = _column(prompt_mask, index)
        sampled = tf.where(done, pad_token_id, sampled)
        new = tf.where(in_prompt, _column(token_ids, index), sampled)
        token_ids = _write_column(token_ids, index, new)
        done = done | (~in_prompt & _is_end(new, end_tokens))
        return index + 1, token_ids, state, done

    done = tf.zeros((batch,), tf.bool)
    index, token_ids, state, done = tf.while_loop(
        cond, body, (start, token_ids, state, done), maximum_iterations=length
    )
    return {"token_ids": token_ids,
            "padding_mask": _final_mask(token_ids, prompt_mask, index, end_tokens)}


def repeated_ngram_tokens(token_ids, index, n, vocabulary_size):
    """(rows, vocab) bool: tokens that, written at `index`, would repeat an n-gram
    of token_ids[:, :index] (the n-gram blocking of Paulus et al. 2018, as
    Hugging Face's `no_repeat_ngram_size`). Static shapes: every start j is
    checked, those whose n-gram does not lie before `index` are masked out."""
    rows, length = tf.shape(token_ids)[0], token_ids.shape[1]
    starts = length - n + 1
    if starts <= 0:
        return tf.zeros((rows, vocabulary_size), tf.bool)
    match = tf.broadcast_to(tf.range(starts)[None, :] <= index - n, (rows, starts))
    for k in range(n - 1):  # the last n-1 tokens equal ids[j + k]
        previous = tf.gather(token_ids, tf.clip_by_value(index - n + 1 + k, 0, length - 1),
                             axis=1)
        match = match & (token_ids[:, k:k + starts] == previous[:, None])
    following = tf.clip_by_value(token_ids[:, n - 1:n - 1 + starts], 0, vocabulary_size - 1)
    row = tf.broadcast_to(tf.range(rows)[:, None], (rows, starts))
    indices = tf.reshape(tf.stack([row, following], axis=-1), (-1, 2))
    banned = tf.tensor_scatter_nd_max(tf.zeros((rows, vocabulary_size), tf.int32), indices,
                                      tf.reshape(tf.cast(match, tf.int32), (-1,)))
    return banned > 0


def _top(scores, k, *tensors):
    """The k best of scores (batch, n) and the same entries of each (batch, n, ...) tensor."""
    values, indices = tf.math.top_k(scores, k=k)
    return (values,) + tuple(tf.gather(t, indices, batch_dims=1) for t in tensors)


def _beam_loop(step_fn, token_ids, prompt_mask, state, start, sampler, end_tokens):
    """Beam search (see BeamSampler). Scores are -inf for beams that do not exist."""
    beams = sampler.num_beams
    alpha, ngram = sampler.length_penalty, sampler.no_repeat_ngram_size
    batch = tf.shape(token_ids)[0]
    length = token_ids.shape[1]
    stops = len(end_tokens or ())
    prompt_length = tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)  # (batch,)
    generated_max = tf.cast(length - prompt_length, tf.float32)

    def penalty(generated):  # lp of |Y| generated tokens (clamped: rows still in the prompt)
        return gnmt_length_penalty(tf.maximum(tf.cast(generated, tf.float32), 1.0), alpha)

    def expand(t):
        return tf.repeat(t, beams, axis=0)

    def per_row(t):  # (batch * k, ...) -> (batch, k, ...)
        return tf.reshape(t, tf.concat([[batch, -1], tf.shape(t)[1:]], 0))

    def flat(t):
        return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))

    ids = expand(token_ids)
    prompt_mask = expand(prompt_mask)
    state = tf.nest.map_structure(expand, state)
    minus_inf = float("-inf")
    # Only beam 0 exists at first (all beams hold the same prompt).
    alive = tf.tile(tf.constant([[0.0] + [minus_inf] * (beams - 1)]), [batch, 1])
    finished_ids = per_row(ids)
    finished = tf.fill([batch, beams], minus_inf)  # penalised scores
    finished_log_probs = finished
    done = tf.zeros((batch,), tf.bool)

    def cond(index, ids, state, alive, finished_ids, finished, finished_log_probs, done):
        return (index < length) & ~tf.reduce_all(done)

    def body(index, ids, state, alive, finished_ids, finished, finished_log_probs, done):
        old = (ids, state, alive, finished_ids, finished, finished_log_probs, done)
        logits, state = step_fn(ids, state, index - 1)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        vocabulary = log_probs.shape[-1] or tf.shape(log_probs)[-1]
        if ngram:
            banned = repeated_ngram_tokens(ids, index, ngram, vocabulary)
            log_probs = tf.where(banned, minus_inf, log_probs)
        # A position inside a row's prompt allows only its prompt token, at no cost.
        in_prompt = _column(prompt_mask, index)
        forced = tf.one_hot(_column(ids, index), vocabulary, on_value=0.0,
                            off_value=minus_inf)
        log_probs = tf.where(in_prompt[:, None], forced, log_probs)
        candidates = tf.reshape(flat(alive[..., None]) + log_probs, (batch, -1))
        ending = _is_end(tf.range(vocabulary), end_tokens)[None, :] & ~in_prompt[:, None]
        ending = tf.reshape(ending, (batch, -1))
        token_of = tf.range(beams * vocabulary) % vocabulary
        source_of = tf.range(beams * vocabulary) // vocabulary

        def pick(scores, k):
            values, indices = tf.math.top_k(scores, k=k)
            source = flat(tf.range(batch)[:, None] * beams + tf.gather(source_of, indices))
            new_ids = _write_column(tf.gather(ids, source), index,
                                    flat(tf.gather(token_of, indices)))
            return values, source, new_ids

        if end_tokens:
            # The stop-token candidates: at most beams * stops of them.
            raw, _, ended_ids = pick(tf.where(ending, candidates, minus_inf),
                                     min(beams * stops, beams * vocabulary))
            generated = index + 1 - prompt_length
            scores = raw / penalty(generated)[:, None]
            finished, finished_ids, finished_log_probs = _top(
                tf.concat([finished, scores], 1), beams,
                tf.concat([finished_ids, per_row(ended_ids)], 1),
                tf.concat([finished_log_probs, raw], 1))
        alive, source, ids = pick(tf.where(ending, minus_inf, candidates), beams)
        state = tf.nest.map_structure(lambda t: tf.gather(t, source, axis=0), state)
        if end_tokens:
            # No running beam can enter the finished set: its log-probability only
            # falls, divided by the largest penalty of the lengths still possible.
            generated = tf.cast(index + 1 - prompt_length, tf.float32)
            best_penalty = tf.maximum(penalty(generated + 1.0), penalty(generated_max))
            bound = tf.reduce_max(alive, axis=1) / best_penalty
            done = (bound < finished[:, -1]) | tf.reduce_all(alive == minus_inf, axis=1)
        new = (ids, state, alive, finished_ids, finished, finished_log_probs, done)
        for t, o in zip(tf.nest.flatten(new), tf.nest.flatten(old)):
            t.set_shape(o.shape)
        return (index + 1,) + new

    loop_vars = (start, ids, state, alive, finished_ids, finished, finished_log_probs, done)
    (until, ids, state, alive, finished_ids, finished, finished_log_probs,
     done) = tf.while_loop(cond, body, loop_vars, maximum_iterations=length)
    # Running beams compete as they stand (max_length reached, or they cannot win).
    scores = alive / penalty(until - prompt_length)[:, None]
    scores, beam_ids, log_probs = _top(
        tf.concat([finished, scores], 1), beams,
        tf.concat([finished_ids, per_row(ids)], 1), tf.concat([finished_log_probs, alive], 1))
    beam_mask = per_row(_final_mask(flat(beam_ids), prompt_mask, until, end_tokens))
    return {"token_ids": beam_ids[:, 0], "padding_mask": beam_mask[:, 0],
            "beam_token_ids": beam_ids, "beam_padding_mask": beam_mask,
            "beam_scores": scores, "beam_log_probabilities": log_probs}


def _run_loop(step_fn, token_ids, prompt_mask, state, sampler, seed, end_tokens,
              pad_token_id):
    start = tf.maximum(tf.reduce_min(tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)), 1)
    if isinstance(sampler, BeamSampler):
        return _beam_loop(step_fn, token_ids, prompt_mask, state, start, sampler, end_tokens)
    return _sampling_loop(step_fn, token_ids, prompt_mask, state, start, sampler, seed,
                          end_tokens, pad_token_id)


def end_tokens_of(end_token_id, backbone):
    """The stop tokens as a tuple (None: no stop token), checked against the vocabulary."""
    if end_token_id is None:
        return None
    ends = (end_token_id,) if np.ndim(end_token_id) == 0 else tuple(end_token_id)
    vocabulary = getattr(backbone, "vocabulary_size", None)
    for end in ends:
        if not float(end).is_integer() or end < 0 or (vocabulary and end >= vocabulary):
            raise ValueError(f"`end_token_id` {end!r} is not a token id of the vocabulary "
                             f"(size {vocabulary}); pass ids in [0, vocabulary_size).")
    return tuple(int(end) for end in ends) or None


PRECISIONS = ("float32", "bfloat16", "int8", "int4", "float8")


def for_decoding(backbone, precision):
    """A copy of `backbone` whose weights are stored (and read per token) in `precision`.

    Decoding at small batch reads every weight once per token, so its speed
    is bounded by bytes of weights / memory bandwidth; smaller weights help.

    - "float32": a plain copy.
    - "bfloat16": Keras' "bfloat16" dtype policy (weights and compute in
      bfloat16; Keras' layer norms and our attention softmax compute in
      float32, the samplers' softmax too): half the bytes.
    - "int8": Keras' own post-training quantization, `model.quantize("int8")`:
      every Dense / EinsumDense kernel becomes int8 with a per-output-channel
      abs-max scale, activations are quantized per token on the fly;
      `TokenEmbedding` (and so the tied output layer) keeps one scale per
      token row. Layer norms, biases and position embeddings stay float32.
    - "int4": the same with int4 weights (Keras' sub-channel blocks of 128
      for Dense kernels; one scale per token row, two values per byte, for
      `TokenEmbedding`).
    - "float8": Keras' float8 (e4m3 weights and activations, scaled) for the
      Dense / EinsumDense kernels; the token table stays float32 (Keras'
      Embedding has no float8 mode).

    The original backbone is left as it is. Example:
    >>> fast = keras_ctx.generation.for_decoding(backbone, "int8")
    >>> keras_ctx.generation.generate(fast, prompt_ids, max_length=64)
    """
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}; use one of {PRECISIONS}.")
    config = backbone.get_config()
    if precision == "bfloat16":
        config["dtype"] = "bfloat16"
    copy = type(backbone).from_config(config)
    copy.set_weights([np.asarray(w) for w in backbone.get_weights()])
    if precision in ("int8", "int4", "float8"):
        with warnings.catch_warnings():  # Keras warns for every layer it leaves as is
            warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
            warnings.filterwarnings("ignore", message=".*TokenEmbedding.*quantizes to")
            copy.quantize(precision)
    return copy


_COMPILED = weakref.WeakKeyDictionary()


def resolve_jit_compile(jit_compile, backbone, rows=1):
    """`jit_compile` of the decode loop over `rows` sequences (batch x beams).

    "auto": XLA, except one row of float32 weights on a machine without an
    accelerator. Measured on a 2-core AMD EPYC (benchmarks/RESULTS.md,
    generation): there XLA's CPU code for the matrix-vector products of one
    row is slow (GPT-2 greedy 0.6x the same loop as a TF graph, T5 0.7x); from
    two rows on, and with int8 or bfloat16 weights, XLA is the faster one
    (keras-hub's generate always runs as a TF graph on a CPU: Keras'
    `jit_compile="auto"` turns XLA off where there is no GPU). Any
    accelerator: XLA.
    """
    if jit_compile != "auto":
        if not isinstance(jit_compile, bool):
            raise ValueError(f"`jit_compile` must be True, False or 'auto', got {jit_compile!r}.")
        return jit_compile
    if rows > 1 or any(d.device_type != "CPU" for d in tf.config.list_logical_devices()):
        return True
    return not all(tf.as_dtype(w.dtype) == tf.float32 for w in backbone.weights)


def _rows(token_ids, sampler):
    beams = sampler.num_beams if isinstance(sampler, BeamSampler) else 1
    return int(token_ids.shape[0]) * beams


def _compiled(backbone, key, make):
    functions = _COMPILED.setdefault(backbone, {})
    if key not in functions:
        functions[key] = make()
    return functions[key]


def _prepare_prompt(token_ids, padding_mask, max_length, pad_token_id, name):
    token_ids = np.asarray(token_ids)
    if token_ids.ndim != 2:
        raise ValueError(f"`{name}` must be (batch, length) integers, got shape "
                         f"{token_ids.shape}.")
    if padding_mask is None:
        padding_mask = np.ones_like(token_ids, dtype=bool)
    padding_mask = np.asarray(padding_mask).astype(bool)
    length = token_ids.shape[1]
    max_length = length if max_length is None else max_length
    if length > max_length:
        raise ValueError(
            f"The prompt has {length} positions but max_length is {max_length}; "
            "pass a larger max_length or a shorter prompt."
        )
    if not padding_mask[:, 0].all():
        raise ValueError(
            "Every prompt needs at least one token at position 0 (for an "
            "encoder-decoder, the decoder start token), right-padded."
        )
    pad = max_length - length
    token_ids = np.pad(token_ids, ((0, 0), (0, pad)), constant_values=pad_token_id)
    padding_mask = np.pad(padding_mask, ((0, 0), (0, pad)), constant_values=False)
    return tf.constant(token_ids, tf.int32), tf.constant(padding_mask)


def decoder_prefill(backbone, token_ids):
    """The key/value cache of a decoder-only backbone after reading `token_ids`."""
    cache = backbone.build_cache(tf.shape(token_ids)[0], token_ids.shape[1])
    return backbone.call_with_cache(token_ids, cache, 0)[1]


def decoder_step(backbone):
    """step(ids, cache, i) -> (logits of the token after position i, cache)."""
    def step(ids, cache, i):
        hidden, cache = backbone.call_with_cache(tf.gather(ids, [i], axis=1), cache, i)
        return backbone.logits(hidden)[:, 0], cache

    return step


def seq2seq_prefill(backbone, token_ids, encoder_ids, encoder_mask):
    """(decoder cache after reading `token_ids`, encoder mask): the encoder runs once."""
    encoder_output = backbone.encode(encoder_ids, encoder_mask)
    cache = backbone.build_decoder_cache(encoder_output, token_ids.shape[1])
    _, cache = backbone.decode_with_cache(token_ids, cache, 0, encoder_mask)
    return cache, encoder_mask


def seq2seq_step(backbone):
    """step(ids, (cache, encoder mask), i) -> (logits after position i, state)."""
    def step(ids, state, i):
        cache, encoder_mask = state
        hidden, cache = backbone.decode_with_cache(tf.gather(ids, [i], axis=1), cache, i,
                                                   encoder_mask)
        return backbone.logits(hidden)[:, 0], (cache, encoder_mask)

    return step


def decode(backbone, token_ids, prompt_mask, sampler, seed, end_tokens=None,
           pad_token_id=0, use_cache=True, encoder_token_ids=None,
           encoder_padding_mask=None):
    """The decode loop on tensors, inside the caller's graph (a tf.function or an export).

    `generate` and `generate_seq2seq` run it in a compiled function after
    checking their arguments; `keras_ctx.export`'s `serve_generate` runs it
    inside the served graph (core TensorFlow ops only outside XLA).

    Args:
        backbone: a decoder-only backbone, or an encoder-decoder when
            `encoder_token_ids` is given.
        token_ids: (batch, max_length) int32: the prompt (the decoder's,
            start token first), right-padded to the static output length.
        prompt_mask: (batch, max_length) bool, true on prompt tokens.
        sampler: a Sampler (`get_sampler`).
        seed: int32 scalar tensor of the random samplers.
        end_tokens: a tuple of stop token ids, or None.
        pad_token_id: written after a row's stop token.
        use_cache: one token per step with a key/value cache.
        encoder_token_ids, encoder_padding_mask: (batch, source_length)
            int32 for an encoder-decoder.

    Returns:
        `generate`'s dict of tensors.
    """
    batch = tf.shape(token_ids)[0]
    if encoder_token_ids is None:
        if use_cache:
            state, step = decoder_prefill(backbone, token_ids), decoder_step(backbone)
        else:
            def step(ids, state, i):
                hidden = backbone({"token_ids": ids,
                                   "padding_mask": tf.ones_like(ids)})["sequence_output"]
                return backbone.logits(tf.gather(hidden, i, axis=1)), state

            state = tf.zeros((batch,))
    elif use_cache:
        state = seq2seq_prefill(backbone, token_ids, encoder_token_ids, encoder_padding_mask)
        step = seq2seq_step(backbone)
    else:
        def step(ids, state, i):
            encoder_ids, encoder_mask = state
            outputs = backbone({
                "encoder_token_ids": encoder_ids,
                "encoder_padding_mask": encoder_mask,
                "decoder_token_ids": ids,
                "decoder_padding_mask": tf.ones_like(ids),
            })
            hidden = tf.gather(outputs["decoder_sequence_output"], i, axis=1)
            return backbone.logits(hidden), state

        state = (encoder_token_ids, encoder_padding_mask)
    return _run_loop(step, token_ids, prompt_mask, state, sampler, seed, end_tokens,
                     pad_token_id)


def generate(backbone, token_ids, padding_mask=None, max_length=None, sampler="greedy",
             end_token_id=None, pad_token_id=0, use_cache=True, jit_compile="auto", seed=0):
    """Continues right-padded prompts with a decoder-only backbone (GPT, GPT-2).

    Args:
        backbone: a decoder backbone (e.g. `GPTBackbone`).
        token_ids: (batch, prompt_length) int prompt, right-padded.
        padding_mask: (batch, prompt_length), true for prompt tokens.
        max_length: total length of the output (prompt + generated).
        sampler: a Sampler or "greedy", "random", "top_k", "top_p", "beam".
        end_token_id: a stop token id, or a list of them: a row (a beam) ends
            with the first one it generates; later positions get `pad_token_id`.
        use_cache: one token per step with a key/value cache (False re-runs
            the whole sequence per step; same tokens, slower).
        jit_compile: compile the whole loop with XLA (True), run it as a TF
            graph (False), or "auto" (`resolve_jit_compile`: XLA except for
            one row (batch 1, no beams) of float32 weights on a machine
            without an accelerator, where TF's own CPU kernels decode
            faster). The tokens are the same.
        seed: int seed of the random samplers.

    Returns:
        {"token_ids": (batch, max_length), "padding_mask": prompt and
        generated tokens, through the end token}. Beam search adds every
        beam, best first: "beam_token_ids" and "beam_padding_mask" (batch,
        num_beams, max_length), "beam_scores" (batch, num_beams; the
        length-penalised log-probability that ranks them) and
        "beam_log_probabilities" (their log P of the generated tokens); beams
        that do not exist (fewer continuations than beams) score -inf.
    """
    sampler = get_sampler(sampler)
    token_ids, prompt_mask = _prepare_prompt(token_ids, padding_mask, max_length,
                                             pad_token_id, "token_ids")
    end_tokens = end_tokens_of(end_token_id, backbone)
    jit_compile = resolve_jit_compile(jit_compile, backbone, _rows(token_ids, sampler))
    key = ("decoder", sampler._key(), end_tokens, pad_token_id, use_cache, jit_compile)

    def make():
        def run(token_ids, prompt_mask, seed):
            return decode(backbone, token_ids, prompt_mask, sampler, seed, end_tokens,
                          pad_token_id, use_cache=use_cache)

        return tf.function(run, jit_compile=jit_compile)

    run = _compiled(backbone, key, make)
    return run(token_ids, prompt_mask, tf.constant(seed, tf.int32))


def generate_seq2seq(backbone, encoder_token_ids, encoder_padding_mask=None,
                     max_length=32, decoder_start_token_id=0, decoder_token_ids=None,
                     decoder_padding_mask=None, sampler="greedy", end_token_id=None,
                     pad_token_id=0, use_cache=True, jit_compile="auto", seed=0):
    """Generates decoder sequences for an encoder-decoder backbone (T5, BART).

    The encoder runs once; each step runs the decoder on one token with a
    self-attention cache and the precomputed cross-attention keys/values.
    `decoder_token_ids` (right-padded, starting with the start token) is an
    optional decoder prompt; by default every row starts with
    `decoder_start_token_id` (T5: pad 0; BART: eos 2).

    Other arguments and the beam-search outputs as in `generate`.

    Returns:
        {"token_ids": (batch, max_length) decoder tokens, start token first,
        "padding_mask"}.
    """
    sampler = get_sampler(sampler)
    encoder_token_ids = np.asarray(encoder_token_ids)
    if encoder_padding_mask is None:
        encoder_padding_mask = np.ones_like(encoder_token_ids)
    if decoder_token_ids is None:
        decoder_token_ids = np.full((encoder_token_ids.shape[0], 1), decoder_start_token_id)
    token_ids, prompt_mask = _prepare_prompt(decoder_token_ids, decoder_padding_mask,
                                             max_length, pad_token_id,
                                             "decoder_token_ids")
    end_tokens = end_tokens_of(end_token_id, backbone)
    jit_compile = resolve_jit_compile(jit_compile, backbone, _rows(token_ids, sampler))
    key = ("seq2seq", sampler._key(), end_tokens, pad_token_id, use_cache, jit_compile)

    def make():
        def run(token_ids, prompt_mask, encoder_ids, encoder_mask, seed):
            return decode(backbone, token_ids, prompt_mask, sampler, seed, end_tokens,
                          pad_token_id, use_cache=use_cache, encoder_token_ids=encoder_ids,
                          encoder_padding_mask=encoder_mask)

        return tf.function(run, jit_compile=jit_compile)

    run = _compiled(backbone, key, make)
    return run(token_ids, prompt_mask, tf.constant(encoder_token_ids, tf.int32),
               tf.constant(np.asarray(encoder_padding_mask), tf.int32),
               tf.constant(seed, tf.int32))


def sequence_log_probability(logits_fn, token_ids, prompt_mask, padding_mask):
    """Sum of log p(token_t | tokens_<t) over generated (non-prompt, unpadded) positions.

    `logits_fn(token_ids)` -> (batch, length, vocab) logits of the next token.
    Used to compare beam search with greedy decoding.
    """
    logits = tf.cast(logits_fn(token_ids), tf.float32)[:, :-1]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    targets = token_ids[:, 1:]
    picked = tf.gather(log_probs, targets[..., None], batch_dims=2)[..., 0]
    keep = tf.cast(np.asarray(padding_mask)[:, 1:] & ~np.asarray(prompt_mask)[:, 1:],
                   tf.float32)
    return tf.reduce_sum(picked * keep, axis=1)


def stream(backbone, token_ids, max_length=None, sampler="greedy", end_token_id=None,
           pad_token_id=0, seed=0, encoder_token_ids=None, encoder_padding_mask=None):
    """Yields the generated token ids of one prompt, one at a time, as they are decoded.

    The same tokens as `generate` (encoder-decoders: `generate_seq2seq` with
    `decoder_token_ids=token_ids`) with the same sampler and seed: the same
    prefill, step and sampler call (seeded by position), run one step per
    Python iteration (a TF graph, not XLA) instead of inside one loop. Ends
    after a stop token or at max_length. Beam search cannot stream (a beam's
    tokens change until it finishes).

    Args:
        backbone: a decoder-only or (with `encoder_token_ids`) an
            encoder-decoder backbone.
        token_ids: (1, prompt_length) prompt (the decoder's, start token first).
        encoder_token_ids, encoder_padding_mask: (1, source_length) for an
            encoder-decoder.
        Others as in `generate`.

    Yields:
        int token ids.
    """
    sampler = get_sampler(sampler)
    if isinstance(sampler, BeamSampler):
        raise ValueError("Beam search cannot stream (a beam's tokens change until it ends); "
                         "use a greedy, top_k, top_p or random sampler, or `generate`.")
    token_ids, prompt_mask = _prepare_prompt(token_ids, None, max_length, pad_token_id,
                                             "token_ids")
    if token_ids.shape[0] != 1:
        raise ValueError(f"`stream` decodes one prompt, got a batch of {token_ids.shape[0]}.")
    end_tokens = end_tokens_of(end_token_id, backbone) or ()
    key = ("stream", encoder_token_ids is not None, sampler._key())

    def make():
        if encoder_token_ids is None:
            prefill = tf.function(lambda ids, *_: decoder_prefill(backbone, ids))
            step = decoder_step(backbone)
        else:
            prefill = tf.function(lambda ids, e, m: seq2seq_prefill(backbone, ids, e, m))
            step = seq2seq_step(backbone)

        @tf.function
        def next_token(ids, state, index, seed):
            logits, state = step(ids, state, index - 1)
            return tf.cast(sampler(logits, index, seed), tf.int32), state

        return prefill, next_token

    prefill, next_token = _compiled(backbone, key, make)
    encoder = () if encoder_token_ids is None else (
        tf.constant(np.asarray(encoder_token_ids), tf.int32),
        tf.constant(np.ones_like(encoder_token_ids) if encoder_padding_mask is None
                    else np.asarray(encoder_padding_mask), tf.int32))
    state = prefill(token_ids, *encoder)
    seed = tf.constant(seed, tf.int32)
    for index in range(int(tf.reduce_sum(tf.cast(prompt_mask, tf.int32))), token_ids.shape[1]):
        sampled, state = next_token(token_ids, state, tf.constant(index), seed)
        token_ids = _write_column(token_ids, index, sampled)
        token = int(sampled[0])
        yield token
        if token in end_tokens:
            return

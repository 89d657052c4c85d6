"""The decode loops: a static-shape token buffer written one position per step.

The token buffer has a static shape (batch, max_length): the prompt sits at
its start (right-padded), `prompt_mask` marks prompt tokens, and each loop
step writes one position. With a cache, each step runs one token through the
decoder with a static-shape key/value cache (written in place by
`keras_ctx.layers.MultiHeadAttention`); without, it re-runs the whole buffer
(the reference the cache is tested against). Rows stop at a stop token
(later positions get `pad_token_id`); the loop (`ops.while_loop`, so one
XLA loop on every backend) stops once every row has.

Decoder-only backbones (GPT) provide `build_cache(batch, max_length)`,
`call_with_cache(token_ids, cache, index)` and `logits(hidden)`;
encoder-decoders (T5, BART) provide `encode(...)`,
`build_decoder_cache(encoder_output, max_length)`,
`decode_with_cache(token_ids, cache, index, encoder_padding_mask)` and
`logits(hidden)`.
"""

import keras
from keras import ops

from keras_ctx import backend
from keras_ctx.generation.samplers import BeamSampler, gnmt_length_penalty
from keras_ctx.layers import update_positions


def column(tensor, index):
    return ops.take(tensor, index, axis=1)


def write_column(tensor, index, values):
    return update_positions(tensor, index, ops.cast(values, tensor.dtype)[:, None])


def _is_end(tokens, end_tokens):
    """True where `tokens` is one of the stop tokens (a tuple, or None: never)."""
    if not end_tokens:
        return ops.zeros_like(tokens, "bool")
    ends = ops.convert_to_tensor(end_tokens, "int32")
    return ops.any(ops.cast(tokens, "int32")[..., None] == ends, axis=-1)


def _final_mask(token_ids, prompt_mask, generated_until, end_tokens):
    positions = ops.arange(token_ids.shape[1], dtype="int32")[None, :]
    mask = prompt_mask | (positions < generated_until)
    if end_tokens:
        is_end = ops.cast(_is_end(token_ids, end_tokens) & ~prompt_mask, "int32")
        ended_before = (ops.cumsum(is_end, axis=1) - is_end) > 0
        mask = mask & ~ended_before
    return mask


def sampling_loop(step_fn, token_ids, prompt_mask, state, start, sampler, seed,
                  end_tokens, pad_token_id):
    """Writes positions start..L-1.

    step_fn(token_ids, state, i) -> (next-token logits at position i, state).
    """
    length = token_ids.shape[1]

    def cond(index, token_ids, state, done):
        return (index < length) & ~ops.all(done)

    def body(index, token_ids, state, done):
        logits, state = step_fn(token_ids, state, index - 1)
        sampled = ops.cast(sampler(logits, index, seed), "int32")
        in_prompt = column(prompt_mask, index)
        sampled = ops.where(done, pad_token_id, sampled)
        new = ops.where(in_prompt, column(token_ids, index), sampled)
        token_ids = write_column(token_ids, index, new)
        done = done | (~in_prompt & _is_end(new, end_tokens))
        return index + 1, token_ids, state, done

    done = ops.zeros((ops.shape(token_ids)[0],), "bool")
    index, token_ids, state, done = ops.while_loop(
        cond, body, (start, token_ids, state, done), maximum_iterations=length)
    return {"token_ids": token_ids,
            "padding_mask": _final_mask(token_ids, prompt_mask, index, end_tokens)}


def repeated_ngram_tokens(token_ids, index, n, vocabulary_size):
    """(rows, vocab) bool: tokens that, written at `index`, would repeat an n-gram
    of token_ids[:, :index] (the n-gram blocking of Paulus et al. 2018, as
    Hugging Face's `no_repeat_ngram_size`). Static shapes: every start j is
    checked, those whose n-gram does not lie before `index` are masked out."""
    rows, length = ops.shape(token_ids)[0], token_ids.shape[1]
    starts = length - n + 1
    if starts <= 0:
        return ops.zeros((rows, vocabulary_size), "bool")
    match = ops.broadcast_to(ops.arange(starts, dtype="int32")[None, :] <= index - n,
                             (rows, starts))
    for k in range(n - 1):  # the last n-1 tokens equal ids[j + k]
        previous = column(token_ids, ops.clip(ops.cast(index - n + 1 + k, "int32"), 0, length - 1))
        match = match & (token_ids[:, k:k + starts] == previous[:, None])
    following = ops.clip(token_ids[:, n - 1:n - 1 + starts], 0, vocabulary_size - 1)
    # banned[r, v]: some matching start j of row r is followed by v.
    hits = ops.one_hot(following, vocabulary_size, dtype="int32") * ops.cast(
        match, "int32")[..., None]
    return ops.max(hits, axis=1) > 0


def _top(scores, k, *tensors):
    """The k best of scores (batch, n) and the same entries of each (batch, n, ...) tensor."""
    values, indices = ops.top_k(scores, k=k)

    def gather(tensor):
        index = indices
        for _ in range(len(tensor.shape) - 2):
            index = index[..., None]
        return ops.take_along_axis(tensor, index, axis=1)

    return (values,) + tuple(gather(t) for t in tensors)


def beam_loop(step_fn, token_ids, prompt_mask, state, start, sampler, end_tokens):
    """Beam search (see BeamSampler). Scores are -inf for beams that do not exist."""
    beams = sampler.num_beams
    alpha, ngram = sampler.length_penalty, sampler.no_repeat_ngram_size
    batch = ops.shape(token_ids)[0]
    length = token_ids.shape[1]
    stops = len(end_tokens or ())
    prompt_length = ops.sum(ops.cast(prompt_mask, "int32"), axis=1)  # (batch,)
    generated_max = ops.cast(length - prompt_length, "float32")

    def penalty(generated):  # lp of |Y| generated tokens (clamped: rows still in the prompt)
        return gnmt_length_penalty(ops.maximum(ops.cast(generated, "float32"), 1.0), alpha)

    def expand(t):
        return ops.repeat(t, beams, axis=0)

    def per_row(t):  # (batch * k, ...) -> (batch, k, ...)
        return ops.reshape(t, (batch, -1) + tuple(ops.shape(t)[1:]))

    def flat(t):
        return ops.reshape(t, (-1,) + tuple(ops.shape(t)[2:]))

    ids = expand(token_ids)
    prompt_mask = expand(prompt_mask)
    state = keras.tree.map_structure(expand, state)
    minus_inf = float("-inf")
    # Only beam 0 exists at first (all beams hold the same prompt).
    alive = ops.tile(ops.convert_to_tensor([[0.0] + [minus_inf] * (beams - 1)]), (batch, 1))
    finished_ids = per_row(ids)
    finished = ops.full((batch, beams), minus_inf)  # penalised scores
    finished_log_probs = finished
    done = ops.zeros((batch,), "bool")

    def cond(index, ids, state, alive, finished_ids, finished, finished_log_probs, done):
        return (index < length) & ~ops.all(done)

    def body(index, ids, state, alive, finished_ids, finished, finished_log_probs, done):
        old = (ids, state, alive, finished_ids, finished, finished_log_probs, done)
        logits, state = step_fn(ids, state, index - 1)
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        vocabulary = log_probs.shape[-1]
        if ngram:
            banned = repeated_ngram_tokens(ids, index, ngram, vocabulary)
            log_probs = ops.where(banned, minus_inf, log_probs)
        # A position inside a row's prompt allows only its prompt token, at no cost.
        in_prompt = column(prompt_mask, index)
        forced = ops.where(ops.one_hot(column(ids, index), vocabulary) > 0, 0.0, minus_inf)
        log_probs = ops.where(in_prompt[:, None], forced, log_probs)
        candidates = ops.reshape(flat(alive[..., None]) + log_probs, (batch, -1))
        ending = (_is_end(ops.arange(vocabulary, dtype="int32"), end_tokens)[None, :]
                  & ~in_prompt[:, None])
        ending = ops.reshape(ending, (batch, -1))
        token_of = ops.arange(beams * vocabulary, dtype="int32") % vocabulary
        source_of = ops.arange(beams * vocabulary, dtype="int32") // vocabulary

        def pick(scores, k):
            values, indices = ops.top_k(scores, k=k)
            source = flat(ops.arange(batch, dtype="int32")[:, None] * beams
                          + ops.take(source_of, indices))
            new_ids = write_column(ops.take(ids, source, axis=0), index,
                                   flat(ops.take(token_of, indices)))
            return values, source, new_ids

        if end_tokens:
            # The stop-token candidates: at most beams * stops of them.
            raw, _, ended_ids = pick(ops.where(ending, candidates, minus_inf),
                                     min(beams * stops, beams * vocabulary))
            generated = index + 1 - prompt_length
            scores = raw / penalty(generated)[:, None]
            finished, finished_ids, finished_log_probs = _top(
                ops.concatenate([finished, scores], 1), beams,
                ops.concatenate([finished_ids, per_row(ended_ids)], 1),
                ops.concatenate([finished_log_probs, raw], 1))
        alive, source, ids = pick(ops.where(ending, minus_inf, candidates), beams)
        state = keras.tree.map_structure(lambda t: ops.take(t, source, axis=0), state)
        if end_tokens:
            # No running beam can enter the finished set: its log-probability only
            # falls, divided by the largest penalty of the lengths still possible.
            generated = ops.cast(index + 1 - prompt_length, "float32")
            best_penalty = ops.maximum(penalty(generated + 1.0), penalty(generated_max))
            bound = ops.max(alive, axis=1) / best_penalty
            done = (bound < finished[:, -1]) | ops.all(alive == minus_inf, axis=1)
        new = backend.keep_shapes(
            (ids, state, alive, finished_ids, finished, finished_log_probs, done), old)
        return (index + 1,) + tuple(new)

    loop_vars = (start, ids, state, alive, finished_ids, finished, finished_log_probs, done)
    (until, ids, state, alive, finished_ids, finished, finished_log_probs,
     done) = ops.while_loop(cond, body, loop_vars, maximum_iterations=length)
    # Running beams compete as they stand (max_length reached, or they cannot win).
    scores = alive / penalty(until - prompt_length)[:, None]
    scores, beam_ids, log_probs = _top(
        ops.concatenate([finished, scores], 1), beams,
        ops.concatenate([finished_ids, per_row(ids)], 1),
        ops.concatenate([finished_log_probs, alive], 1))
    beam_mask = per_row(_final_mask(flat(beam_ids), prompt_mask, until, end_tokens))
    return {"token_ids": beam_ids[:, 0], "padding_mask": beam_mask[:, 0],
            "beam_token_ids": beam_ids, "beam_padding_mask": beam_mask,
            "beam_scores": scores, "beam_log_probabilities": log_probs}


def run_loop(step_fn, token_ids, prompt_mask, state, sampler, seed, end_tokens,
             pad_token_id):
    prompt_lengths = ops.sum(ops.cast(prompt_mask, "int32"), axis=1)
    start = ops.maximum(ops.min(prompt_lengths), 1)
    if isinstance(sampler, BeamSampler):
        return beam_loop(step_fn, token_ids, prompt_mask, state, start, sampler, end_tokens)
    return sampling_loop(step_fn, token_ids, prompt_mask, state, start, sampler, seed,
                         end_tokens, pad_token_id)


def decoder_prefill(backbone, token_ids):
    """The key/value cache of a decoder-only backbone after reading `token_ids`."""
    cache = backbone.build_cache(ops.shape(token_ids)[0], token_ids.shape[1])
    return backbone.call_with_cache(token_ids, cache, 0)[1]


def _one_column(ids, i):
    return ops.expand_dims(column(ids, i), 1)


def decoder_step(backbone):
    """step(ids, cache, i) -> (logits of the token after position i, cache)."""
    def step(ids, cache, i):
        hidden, cache = backbone.call_with_cache(_one_column(ids, i), cache, i)
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
        hidden, cache = backbone.decode_with_cache(_one_column(ids, i), cache, i, encoder_mask)
        return backbone.logits(hidden)[:, 0], (cache, encoder_mask)

    return step


def decode(backbone, token_ids, prompt_mask, sampler, seed, end_tokens=None,
           pad_token_id=0, use_cache=True, encoder_token_ids=None,
           encoder_padding_mask=None):
    """The decode loop on tensors, inside the caller's compiled function or graph.

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
    batch = ops.shape(token_ids)[0]
    if encoder_token_ids is None:
        if use_cache:
            state, step = decoder_prefill(backbone, token_ids), decoder_step(backbone)
        else:
            def step(ids, state, i):
                hidden = backbone({"token_ids": ids,
                                   "padding_mask": ops.ones_like(ids)})["sequence_output"]
                return backbone.logits(column(hidden, i)), state

            state = ops.zeros((batch,))
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
                "decoder_padding_mask": ops.ones_like(ids),
            })
            return backbone.logits(column(outputs["decoder_sequence_output"], i)), state

        state = (encoder_token_ids, encoder_padding_mask)
    return run_loop(step, token_ids, prompt_mask, state, sampler, seed, end_tokens,
                    pad_token_id)

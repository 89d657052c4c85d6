"""Autoregressive generation that compiles with XLA: samplers and decode loops.

The token buffer has a static shape (batch, max_length): the prompt sits at
its start (right-padded), `padding_mask` marks prompt tokens, and each loop
step writes one position. With `use_cache=True` each step runs one token
through the decoder with a static-shape key/value cache (written in place by
`keras_ctx.layers.MultiHeadAttention`); with `use_cache=False` it re-runs the
whole buffer (the reference the cache is tested against). Rows stop at
`end_token_id` (later positions get `pad_token_id`); the loop stops once
every row has.

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

import weakref

import numpy as np
import tensorflow as tf
from keras import ops

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


class BeamSampler(Sampler):
    """Beam search: keeps the `num_beams` highest log-probability sequences.

    Finished beams (ended with `end_token_id`) keep their score and are
    extended with padding; the best beam of each row is returned.
    """

    def __init__(self, num_beams=4):
        if not isinstance(num_beams, int) or num_beams < 1:
            raise ValueError(f"`num_beams` must be a positive integer, got {num_beams!r}.")
        self.num_beams = num_beams

    def get_config(self):
        return {"num_beams": self.num_beams}


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
    return ops.slice_update(tensor, [0, index], ops.cast(values, tensor.dtype)[:, None])


def _final_mask(token_ids, prompt_mask, generated_until, end_token_id):
    length = tf.shape(token_ids)[1]
    positions = tf.range(length)[None, :]
    mask = prompt_mask | (positions < generated_until)
    if end_token_id is not None:
        is_end = tf.cast((token_ids == end_token_id) & ~prompt_mask, tf.int32)
        ended_before = (tf.cumsum(is_end, axis=1) - is_end) > 0
        mask = mask & ~ended_before
    return mask


def _sampling_loop(step_fn, token_ids, prompt_mask, state, start, sampler, seed,
                   end_token_id, pad_token_id):
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
        if end_token_id is not None:
            done = done | (~in_prompt & (new == end_token_id))
        return index + 1, token_ids, state, done

    done = tf.zeros((batch,), tf.bool)
    index, token_ids, state, done = tf.while_loop(
        cond, body, (start, token_ids, state, done), maximum_iterations=length
    )
    return token_ids, index


def _beam_loop(step_fn, token_ids, prompt_mask, state, start, num_beams,
               end_token_id, pad_token_id):
    batch = tf.shape(token_ids)[0]
    length = token_ids.shape[1]

    def expand(t):
        return tf.repeat(t, num_beams, axis=0)

    token_ids = expand(token_ids)
    prompt_mask = expand(prompt_mask)
    state = tf.nest.map_structure(expand, state)
    scores = tf.tile(
        tf.constant([0.0] + [NEG_INF] * (num_beams - 1), tf.float32), [batch]
    )
    done = tf.zeros((batch * num_beams,), tf.bool)

    def cond(index, token_ids, state, scores, done):
        return (index < length) & ~tf.reduce_all(done)

    def body(index, token_ids, state, scores, done):
        token_ids_in, state_in, scores_in, done_in = token_ids, state, scores, done
        logits, state = step_fn(token_ids, state, index - 1)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
        vocabulary = tf.shape(log_probs)[-1]
        in_prompt = _column(prompt_mask, index)
        # Prompt positions and finished beams have one allowed token, at no cost.
        forced_token = tf.where(in_prompt, _column(token_ids, index), pad_token_id)
        forced = tf.where(tf.one_hot(forced_token, vocabulary) > 0, 0.0, NEG_INF)
        log_probs = tf.where((in_prompt | done)[:, None], forced, log_probs)
        candidates = tf.reshape(scores[:, None] + log_probs, (batch, -1))
        top_scores, top_indices = tf.math.top_k(candidates, k=num_beams)
        beam = top_indices // vocabulary
        token = top_indices % vocabulary
        source = tf.reshape(tf.range(batch)[:, None] * num_beams + beam, (-1,))

        def reorder(t):
            return tf.gather(t, source, axis=0)

        token_ids = reorder(token_ids)
        state = tf.nest.map_structure(reorder, state)
        done = reorder(done)
        token = tf.reshape(token, (-1,))
        token_ids = _write_column(token_ids, index, token)
        if end_token_id is not None:
            done = done | (~in_prompt & (token == end_token_id))
        new = (token_ids, state, tf.reshape(top_scores, (-1,)), done)
        old = (token_ids_in, state_in, scores_in, done_in)
        for t, o in zip(tf.nest.flatten(new), tf.nest.flatten(old)):
            t.set_shape(o.shape)
        return (index + 1,) + new

    index, token_ids, state, scores, done = tf.while_loop(
        cond, body, (start, token_ids, state, scores, done), maximum_iterations=length
    )
    best = tf.argmax(tf.reshape(scores, (batch, num_beams)), axis=-1, output_type=tf.int32)
    rows = tf.range(batch) * num_beams + best
    return tf.gather(token_ids, rows), index


def _run_loop(step_fn, token_ids, prompt_mask, state, sampler, seed, end_token_id,
              pad_token_id):
    start = tf.maximum(tf.reduce_min(tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)), 1)
    if isinstance(sampler, BeamSampler):
        out, until = _beam_loop(step_fn, token_ids, prompt_mask, state, start,
                                sampler.num_beams, end_token_id, pad_token_id)
    else:
        out, until = _sampling_loop(step_fn, token_ids, prompt_mask, state, start, sampler,
                                    seed, end_token_id, pad_token_id)
    return {"token_ids": out,
            "padding_mask": _final_mask(out, prompt_mask, until, end_token_id)}


_COMPILED = weakref.WeakKeyDictionary()


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


def generate(backbone, token_ids, padding_mask=None, max_length=None, sampler="greedy",
             end_token_id=None, pad_token_id=0, use_cache=True, jit_compile=True, seed=0):
    """Continues right-padded prompts with a decoder-only backbone (GPT, GPT-2).

    Args:
        backbone: a decoder backbone (e.g. `GPTBackbone`).
        token_ids: (batch, prompt_length) int prompt, right-padded.
        padding_mask: (batch, prompt_length), true for prompt tokens.
        max_length: total length of the output (prompt + generated).
        sampler: a Sampler or "greedy", "random", "top_k", "top_p", "beam".
        end_token_id: rows stop after generating it; later positions are padded.
        use_cache: one token per step with a key/value cache (False re-runs
            the whole sequence per step; same tokens, slower).
        jit_compile: compile the whole loop with XLA.
        seed: int seed of the random samplers.

    Returns:
        {"token_ids": (batch, max_length), "padding_mask": prompt and
        generated tokens, through the end token}.
    """
    sampler = get_sampler(sampler)
    token_ids, prompt_mask = _prepare_prompt(token_ids, padding_mask, max_length,
                                             pad_token_id, "token_ids")
    key = ("decoder", sampler._key(), end_token_id, pad_token_id, use_cache, jit_compile)

    def make():
        def run(token_ids, prompt_mask, seed):
            batch, length = tf.shape(token_ids)[0], token_ids.shape[1]
            if use_cache:
                cache = backbone.build_cache(batch, length)
                _, cache = backbone.call_with_cache(token_ids, cache, 0)

                def step(ids, cache, i):
                    hidden, cache = backbone.call_with_cache(
                        tf.gather(ids, [i], axis=1), cache, i)
                    return backbone.logits(hidden)[:, 0], cache

                state = cache
            else:
                def step(ids, state, i):
                    hidden = backbone({"token_ids": ids,
                                       "padding_mask": tf.ones_like(ids)})["sequence_output"]
                    return backbone.logits(tf.gather(hidden, i, axis=1)), state

                state = tf.zeros((batch,))
            return _run_loop(step, token_ids, prompt_mask, state, sampler, seed,
                             end_token_id, pad_token_id)

        return tf.function(run, jit_compile=jit_compile)

    run = _compiled(backbone, key, make)
    return run(token_ids, prompt_mask, tf.constant(seed, tf.int32))


def generate_seq2seq(backbone, encoder_token_ids, encoder_padding_mask=None,
                     max_length=32, decoder_start_token_id=0, decoder_token_ids=None,
                     decoder_padding_mask=None, sampler="greedy", end_token_id=None,
                     pad_token_id=0, use_cache=True, jit_compile=True, seed=0):
    """Generates decoder sequences for an encoder-decoder backbone (T5, BART).

    The encoder runs once; each step runs the decoder on one token with a
    self-attention cache and the precomputed cross-attention keys/values.
    `decoder_token_ids` (right-padded, starting with the start token) is an
    optional decoder prompt; by default every row starts with
    `decoder_start_token_id` (T5: pad 0; BART: eos 2).

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
    key = ("seq2seq", sampler._key(), end_token_id, pad_token_id, use_cache, jit_compile)

    def make():
        def run(token_ids, prompt_mask, encoder_ids, encoder_mask, seed):
            length = token_ids.shape[1]
            if use_cache:
                encoder_output = backbone.encode(encoder_ids, encoder_mask)
                cache = backbone.build_decoder_cache(encoder_output, length)
                _, cache = backbone.decode_with_cache(token_ids, cache, 0, encoder_mask)

                def step(ids, state, i):
                    cache, encoder_mask = state
                    hidden, cache = backbone.decode_with_cache(
                        tf.gather(ids, [i], axis=1), cache, i, encoder_mask)
                    return backbone.logits(hidden)[:, 0], (cache, encoder_mask)

                state = (cache, encoder_mask)
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

                state = (encoder_ids, encoder_mask)
            return _run_loop(step, token_ids, prompt_mask, state, sampler, seed,
                             end_token_id, pad_token_id)

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

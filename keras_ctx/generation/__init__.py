"""Autoregressive generation on every Keras backend: the API and its compile policy.

Three parts: `samplers` (how the next token is picked), `decoding` (the
static-shape decode loops, with a key/value cache; `ops.while_loop`, so the
whole loop is one XLA loop where it compiles), and this module: argument
checks, the compile policy (`resolve_jit_compile`) and the functions users
call. Rows stop at a stop token (`end_token_id`: one id or several; later
positions get `pad_token_id`). Beam search (`BeamSampler`) returns every beam with its
score, with GNMT's length penalty and n-gram blocking as options. The loop
compiles through `keras_ctx.backend.compile_function`: TensorFlow's
`tf.function` (XLA or a graph), JAX's `jax.jit`; PyTorch runs it eagerly
under `torch.no_grad` (its draws from a seeded torch.Generator). Greedy
tokens are the same on all three (tests/models/test_backends.py).

Example:
>>> out = keras_ctx.generation.generate(backbone, prompt_ids, prompt_mask,
...                                     max_length=64, sampler="top_p")
>>> out["token_ids"], out["padding_mask"]
"""

import warnings
import weakref

import keras
import numpy as np
from keras import ops

from keras_ctx import backend, registry
from keras_ctx.models.checked_input import checked_token_ids
from keras_ctx.generation.decoding import (  # noqa: F401  (the package's face)
    decode,
    decoder_prefill,
    decoder_step,
    repeated_ngram_tokens,
    seq2seq_prefill,
    seq2seq_step,
    write_column,
)
from keras_ctx.generation.samplers import (  # noqa: F401  (the package's face)
    NEG_INF,
    SAMPLERS,
    BeamSampler,
    GreedySampler,
    RandomSampler,
    Sampler,
    TopKSampler,
    TopPSampler,
    get_sampler,
    gnmt_length_penalty,
)


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

    `backbone` may be a family's decoder (`causal_decoder`: XLM's CLM with its PredLayer):
    its backbone is copied and the decoder made again over the copy (`with_backbone`: its
    output layer read from the copy's token table, its bias kept).

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
    if hasattr(backbone, "with_backbone"):  # a family's decoder: its head re-read from the copy
        return backbone.with_backbone(for_decoding(backbone.backbone, precision))
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
_DECODERS = weakref.WeakKeyDictionary()  # a backbone's own decoder: one compile for its calls


def causal_decoder(backbone, lm_head=None, language_id=None):
    """What the decoder-only loops read (`build_cache`, `call_with_cache`, `logits`).

    A backbone that decodes by itself (GPT's) is its own decoder; another causal
    backbone gets its family's `decoder` (`keras_ctx.registry.Family`): XLM's CLM
    models, with their PredLayer (`lm_head`, its bias) and the language the rows are
    written in (`language_id`, an index of its language table).

    Example:
    >>> decoder = keras_ctx.generation.causal_decoder(xlm, pretrainer.lm_head, language_id=1)
    >>> keras_ctx.generation.generate(decoder, prompt_ids, max_length=32)
    """
    if hasattr(backbone, "call_with_cache"):
        if lm_head is not None or language_id is not None:
            raise ValueError(f"{type(backbone).__name__} decodes with its own output layer "
                             "and no language ids: leave out lm_head and language_id.")
        return backbone
    family = registry.of_backbone(backbone)
    if family is None or family.decoder is None:
        raise ValueError(f"{type(backbone).__name__} does not generate text (no key/value "
                         "decoding, no family decoder): use a decoder-only model (GPT, "
                         "XLM's CLM) or an encoder-decoder with generate_seq2seq.")
    if lm_head is not None or language_id is not None:
        return family.decoder(backbone, lm_head, language_id)
    if backbone not in _DECODERS:
        _DECODERS[backbone] = family.decoder(backbone, None, None)
    return _DECODERS[backbone]


def resolve_jit_compile(jit_compile, backbone, rows=1):
    """`jit_compile` of the decode loop over `rows` sequences (batch x beams).

    "auto": XLA, except one row of float32 weights on a machine without an
    accelerator on TensorFlow. Measured on a 2-core AMD EPYC
    (benchmarks/RESULTS.md, generation): there XLA's CPU code for the
    matrix-vector products of one row is slow (GPT-2 greedy 0.6x the same loop
    as a TF graph, T5 0.7x); from two rows on, and with int8 or bfloat16
    weights, XLA is the faster one (keras-hub's generate always runs as a TF
    graph on a CPU: Keras' `jit_compile="auto"` turns XLA off where there is no
    GPU). Any accelerator: XLA. On JAX "auto" is always `jax.jit` (the loop
    is an XLA loop either way; jit only adds the prefill and the sampler). On
    PyTorch the loop runs eagerly whatever `jit_compile` says (Keras' torch
    `while_loop` is a Python loop), so "auto" is False there.
    """
    if jit_compile != "auto":
        if not isinstance(jit_compile, bool):
            raise ValueError(f"`jit_compile` must be True, False or 'auto', got {jit_compile!r}.")
        return jit_compile
    float32 = all(keras.backend.standardize_dtype(w.dtype) == "float32"
                  for w in backbone.weights)
    return backend.auto_jit_compile(rows, float32)


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
    return ops.convert_to_tensor(token_ids, "int32"), ops.convert_to_tensor(padding_mask)


def _int32(value):
    return ops.convert_to_tensor(np.asarray(value), "int32")


def generate(backbone, token_ids, padding_mask=None, max_length=None, sampler="greedy",
             end_token_id=None, pad_token_id=0, use_cache=True, jit_compile="auto", seed=0):
    """Continues right-padded prompts with a decoder-only backbone (GPT, GPT-2, XLM's CLM).

    Args:
        backbone: a decoder backbone (e.g. `GPTBackbone`), or the `causal_decoder`
            of another causal one (XLM's CLM: with its output bias and language).
        token_ids: (batch, prompt_length) int prompt, right-padded.
        padding_mask: (batch, prompt_length), true for prompt tokens.
        max_length: total length of the output (prompt + generated).
        sampler: a Sampler or "greedy", "random", "top_k", "top_p", "beam".
        end_token_id: a stop token id, or a list of them: a row (a beam) ends
            with the first one it generates; later positions get `pad_token_id`.
        use_cache: one token per step with a key/value cache (False re-runs
            the whole sequence per step; same tokens, slower).
        jit_compile: compile the whole loop with XLA (True), run it as a TF
            graph or, on JAX, the loop alone (False), or "auto"
            (`resolve_jit_compile`: XLA except, on TensorFlow, for one row
            (batch 1, no beams) of float32 weights on a machine without an
            accelerator, where TF's own CPU kernels decode faster). The
            tokens are the same. PyTorch decodes eagerly either way.
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
    backbone = causal_decoder(backbone)
    # Compiled decoding cannot check its gathers (XLA clamps, JAX fills NaN): the prompt is.
    checked_token_ids({"token_ids": token_ids}, backbone)
    token_ids, prompt_mask = _prepare_prompt(token_ids, padding_mask, max_length,
                                             pad_token_id, "token_ids")
    end_tokens = end_tokens_of(end_token_id, backbone)
    jit_compile = resolve_jit_compile(jit_compile, backbone, _rows(token_ids, sampler))
    key = ("decoder", sampler._key(), end_tokens, pad_token_id, use_cache, jit_compile)

    def make():
        def run(token_ids, prompt_mask, seed):
            return decode(backbone, token_ids, prompt_mask, sampler, seed, end_tokens,
                          pad_token_id, use_cache=use_cache)

        return backend.compile_function(backbone, run, jit_compile)

    run = _compiled(backbone, key, make)
    return run(token_ids, prompt_mask, _int32(seed))


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
    checked_token_ids({"encoder_token_ids": encoder_token_ids,
                       "decoder_token_ids": decoder_token_ids}, backbone)
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

        return backend.compile_function(backbone, run, jit_compile)

    run = _compiled(backbone, key, make)
    return run(token_ids, prompt_mask, _int32(encoder_token_ids),
               _int32(encoder_padding_mask), _int32(seed))


def sequence_log_probability(logits_fn, token_ids, prompt_mask, padding_mask):
    """Sum of log p(token_t | tokens_<t) over generated (non-prompt, unpadded) positions.

    `logits_fn(token_ids)` -> (batch, length, vocab) logits of the next token.
    Used to compare beam search with greedy decoding.
    """
    logits = ops.cast(logits_fn(token_ids), "float32")[:, :-1]
    log_probs = ops.log_softmax(logits, axis=-1)
    targets = ops.cast(token_ids[:, 1:], "int32")
    picked = ops.take_along_axis(log_probs, targets[..., None], axis=2)[..., 0]
    keep = ops.cast(np.asarray(padding_mask)[:, 1:] & ~np.asarray(prompt_mask)[:, 1:],
                    "float32")
    return ops.sum(picked * keep, axis=1)


def stream(backbone, token_ids, max_length=None, sampler="greedy", end_token_id=None,
           pad_token_id=0, seed=0, encoder_token_ids=None, encoder_padding_mask=None):
    """Yields the generated token ids of one prompt, one at a time, as they are decoded.

    The same tokens as `generate` (encoder-decoders: `generate_seq2seq` with
    `decoder_token_ids=token_ids`) with the same sampler and seed: the same
    prefill, step and sampler call (seeded by position), run one step per
    Python iteration (a TF graph, a `jax.jit` step or, on PyTorch, eagerly)
    instead of inside one loop. Ends after a stop token or at max_length. Beam
    search cannot stream (a beam's tokens change until it finishes).

    Args:
        backbone: a decoder-only or (with `encoder_token_ids`) an
            encoder-decoder backbone.
        token_ids: (1, prompt_length) prompt (the decoder's, start token first).
        encoder_token_ids, encoder_padding_mask: (1, source_length) for an
            encoder-decoder.
        max_length, sampler, end_token_id, pad_token_id, seed: as in `generate`.

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
    if encoder_token_ids is None:
        backbone = causal_decoder(backbone)
    end_tokens = end_tokens_of(end_token_id, backbone) or ()
    key = ("stream", encoder_token_ids is not None, sampler._key())

    def make():
        if encoder_token_ids is None:
            def prefill(ids, *_):
                return decoder_prefill(backbone, ids)

            step = decoder_step(backbone)
        else:
            def prefill(ids, encoder_ids, encoder_mask):
                return seq2seq_prefill(backbone, ids, encoder_ids, encoder_mask)

            step = seq2seq_step(backbone)

        def next_token(ids, state, index, seed):
            logits, state = step(ids, state, index - 1)
            return ops.cast(sampler(logits, index, seed), "int32"), state

        # A graph per step, not XLA (`stream` runs one row at a time).
        return (backend.compile_function(backbone, prefill, jit_compile=False),
                backend.compile_function(backbone, next_token, jit_compile=False))

    prefill, next_token = _compiled(backbone, key, make)
    encoder = () if encoder_token_ids is None else (
        _int32(encoder_token_ids),
        _int32(np.ones_like(encoder_token_ids) if encoder_padding_mask is None
               else encoder_padding_mask))
    state = prefill(token_ids, *encoder)
    seed = _int32(seed)
    for index in range(int(np.sum(ops.convert_to_numpy(prompt_mask))), token_ids.shape[1]):
        sampled, state = next_token(token_ids, state, _int32(index), seed)
        token_ids = write_column(token_ids, index, sampled)
        token = int(sampled[0])
        yield token
        if token in end_tokens:
            return

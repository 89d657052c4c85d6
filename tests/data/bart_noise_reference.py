"""BART's text infilling as released, transcribed for test_noise.py.

facebookresearch/fairseq fairseq/data/denoising_dataset.py @003179f,
`DenoisingDataset.add_whole_word_mask` with `--mask-length span-poisson
--replace-length 1` and the `add_insertion_noise` it calls for zero-length spans;
`word_starts` and the span distribution of `__init__`. The item is `<s> ... </s>`
(the first and last positions are never word starts). NumPy's legacy RandomState
in place of torch's generator: `randperm` -> `permutation`, `Categorical.sample`
-> `choice(p=)`, `uniform_` -> `rand`, `randint` -> `randint`; torch's float32
sum of the word starts kept (its ceil differs from the exact one for some
counts). Only the span-poisson branch with replace_length 1 is transcribed.
"""

import math

import numpy as np


def span_distribution(poisson_lambda):
    """`__init__`: Poisson probabilities for k = 0.. until one falls under 1e-7."""
    lambda_to_the_k, e_to_the_minus_lambda, k_factorial, ps = 1, math.exp(-poisson_lambda), 1, []
    for k in range(0, 128):
        ps.append(e_to_the_minus_lambda * lambda_to_the_k / k_factorial)
        lambda_to_the_k *= poisson_lambda
        k_factorial *= k + 1
        if ps[-1] < 0.0000001:
            break
    ps = np.asarray(ps, np.float32).astype(np.float64)
    return ps / ps.sum()


def add_insertion_noise(tokens, p, rng, mask_idx, random_ratio, vocab_size):
    if p == 0.0:
        return tokens
    num_tokens = len(tokens)
    n = int(math.ceil(num_tokens * p))
    noise_indices = rng.permutation(num_tokens + n - 2)[:n] + 1
    noise_mask = np.zeros(num_tokens + n, bool)
    noise_mask[noise_indices] = True
    result = np.full(n + len(tokens), -1, np.int64)
    num_random = int(math.ceil(n * random_ratio))
    result[noise_indices[num_random:]] = mask_idx
    result[noise_indices[:num_random]] = rng.randint(1, vocab_size, size=num_random)
    result[~noise_mask] = tokens
    assert (result >= 0).all()
    return result


def add_whole_word_mask(source, is_word_start, p, rng, mask_idx, poisson_lambda=3.0,
                        random_ratio=0.0, vocab_size=None):
    """The released function on one item: returns (noised source, span lengths drawn).

    is_word_start: 0/1 per position of `source` (`mask_whole_words` gathered);
    positions 0 and -1 are zeroed here as `word_starts` does.
    """
    source = np.array(source, np.int64)
    is_word_start = np.array(is_word_start, np.int64)
    is_word_start[0] = 0
    is_word_start[-1] = 0
    num_to_mask = int(math.ceil(np.float32(is_word_start.sum()) * np.float32(p)))
    num_inserts = 0
    if num_to_mask == 0:
        return source, np.zeros(0, np.int64)
    ps = span_distribution(poisson_lambda)
    lengths = rng.choice(len(ps), size=num_to_mask, p=ps)
    cum_length = np.cumsum(lengths)
    while cum_length[-1] < num_to_mask:
        lengths = np.concatenate([lengths, rng.choice(len(ps), size=num_to_mask, p=ps)])
        cum_length = np.cumsum(lengths)
    i = 0
    while cum_length[i] < num_to_mask:
        i += 1
    lengths[i] = num_to_mask - (0 if i == 0 else cum_length[i - 1])
    num_to_mask = i + 1
    lengths = lengths[:num_to_mask]
    drawn = lengths.copy()
    lengths = lengths[lengths > 0]
    num_inserts = num_to_mask - lengths.size
    num_to_mask -= num_inserts
    if num_to_mask == 0:
        return add_insertion_noise(source, num_inserts / source.size, rng, mask_idx,
                                   random_ratio, vocab_size), drawn
    word_starts = np.flatnonzero(is_word_start)
    indices = word_starts[rng.permutation(word_starts.size)[:num_to_mask]]
    mask_random = rng.rand(num_to_mask) < random_ratio
    source_length = source.size
    to_keep = np.ones(source_length, bool)
    is_word_start[-1] = 255  # acts as a long length, so spans don't go over the end of doc
    source[indices] = mask_idx
    source[indices[mask_random]] = rng.randint(1, vocab_size or 2, size=mask_random.sum())
    lengths = lengths - 1
    while indices.size > 0:
        lengths = lengths - is_word_start[indices + 1]
        uncompleted = lengths >= 0
        indices = indices[uncompleted] + 1
        mask_random = mask_random[uncompleted]
        lengths = lengths[uncompleted]
        to_keep[indices] = False  # replace_length != -1: delete the token
    source = source[to_keep]
    if num_inserts > 0:
        source = add_insertion_noise(source, num_inserts / source.size, rng, mask_idx,
                                     random_ratio, vocab_size)
    return source, drawn

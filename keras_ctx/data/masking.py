"""BERT's masked-LM corruption on dense batches, static or dynamic, as tf.data maps.

`mask_tokens` is pure dense TensorFlow with stateless random ops: it runs in a
tf.data map and equally inside a compiled (XLA) train step, which is how an
ELECTRA generator or an in-step dynamic masking reuses it.

Recipe (Devlin et al. 2019, Sec. 3.1 and Appendix A.1; google-research/bert
create_pretraining_data.py at eedf571): min(max_predictions, max(1,
round(0.15 L))) positions, L the row's real tokens with [CLS] and [SEP]
counted (`prediction_budget`), chosen among the non-special tokens ([UNK]
may be chosen); of the selected, 80% -> [MASK], 10% -> a random token, 10%
unchanged. Loss only at selected positions (`mask_weights`), listed in
increasing order in `max_predictions` slots.

Static masking (BERT): masks drawn once, identical every epoch (BERT's
`dupe_factor` copies of every instance, each masked differently and shuffled
among all instances, are made where the instances are:
`keras_ctx.data.segments.nsp_pairs(duplicate=k)`). Dynamic masking
(RoBERTa, Liu et al. 2019, Sec. 4.1): a fresh mask every time a sequence is
seen.

ELECTRA's released masking (google-research/electra, pretrain_helpers.mask):
15% of the tokens, 85% of them [MASK] and 15% left unchanged, no random
replacement: `mask_token_rate=ELECTRA_MASK_TOKEN_RATE, random_token_rate=0`.

XLM (Lample & Conneau 2019, Sec. 3.3) keeps the 15% budget but draws the
tokens "according to a multinomial distribution whose weights are
proportional to the square root of their invert frequencies" (after
Mikolov's subsampling), so that frequent tokens are masked less:
`token_weights=inverse_frequency_weights(counts)`.
"""

import math

import numpy as np

from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

MASK_RATE = 0.15  # Devlin et al. 2019
MASK_TOKEN_RATE = 0.8
RANDOM_TOKEN_RATE = 0.1
# google-research/electra pretrain_helpers.mask: tf.less(uniform, 0.85) -> [MASK],
# the rest unchanged (configure_pretraining.py: mask_prob 0.15).
ELECTRA_MASK_TOKEN_RATE = 0.85
ELECTRA_RANDOM_TOKEN_RATE = 0.0


def default_max_predictions(sequence_length, mask_rate=MASK_RATE):
    """Enough prediction slots that the mask_rate budget is never capped: ceil(rate * T).

    20 for 128 tokens, BERT's max_predictions_per_seq at 128 (its README);
    round(rate * L) <= ceil(rate * T) for every row length L <= T.
    """
    return max(1, int(math.ceil(mask_rate * sequence_length)))


def prediction_budget(lengths, num_candidates, mask_rate=MASK_RATE, max_predictions=None):
    """How many positions a row masks: min(P, max(1, round(rate * L))), at most its candidates.

    google-research/bert create_pretraining_data.py (eedf571): num_to_predict =
    min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    with len(tokens) counting [CLS] and both [SEP]: `lengths` are the rows'
    real tokens (padding_mask), not only the maskable ones. Python's round
    on float64, half to even, as tf.round on float64.

    Args:
        lengths: (batch,) real tokens per row.
        num_candidates: (batch,) tokens that may be masked.
        max_predictions: P, or None: no cap but the candidates.

    Returns:
        (batch,) float32 counts.
    """
    lengths = tf.cast(lengths, tf.float64)
    count = tf.maximum(tf.constant(1.0, tf.float64), tf.round(lengths * mask_rate))
    if max_predictions is not None:
        count = tf.minimum(count, float(max_predictions))
    return tf.cast(tf.minimum(count, tf.cast(num_candidates, tf.float64)), tf.float32)


def sorted_slots(positions, weights):
    """The used prediction slots' positions in increasing order, unused slots (0) last.

    BERT's script sorts masked_lm_positions (`sorted(masked_lms, key=index)`).
    `weights` (1 at used slots) must be a prefix of ones per row.
    """
    used = weights > 0
    key = tf.where(used, positions, tf.int32.max)
    return tf.where(used, tf.sort(key, axis=-1), 0)


def _check_rates(mask_rate, mask_token_rate, random_token_rate):
    # A share of the tokens is selected (none or all teaches nothing); the selected are
    # split by one draw between [MASK], a random token and unchanged.
    validation.open_fraction("mask_rate", mask_rate)
    validation.shares(mask_token_rate=mask_token_rate, random_token_rate=random_token_rate)


def _check_random_range(random_token_range, vocabulary_size):
    """None, or (low, high) with 0 <= low < high <= V: ids past the vocabulary would be
    random replacements the embedding has no row for."""
    if random_token_range is None:
        return
    if not isinstance(random_token_range, (list, tuple)) or len(random_token_range) != 2:
        validation.refuse("random_token_range", "None or a (low, high) pair of ids",
                          random_token_range)
    low, high = random_token_range
    validation.integer_in("random_token_range[0]", low, 0, vocabulary_size - 1)
    validation.integer_in("random_token_range[1]", high, low + 1, vocabulary_size)


def inverse_frequency_weights(counts, power=0.5):
    """XLM's masking weights: max(count, 1) ** -power per vocabulary id (numpy float32).

    power=0.5 is the paper's square root (Lample & Conneau 2019, Sec. 3.3);
    counts of 0 count as 1, as in XLM's code, so unseen ids stay drawable.
    """
    counts = np.asarray(counts, np.float64)
    if counts.ndim != 1 or not len(counts) or np.any(counts < 0) or not np.all(
            np.isfinite(counts)):
        raise ValueError("`counts` must be a 1-D array of non-negative token counts, one per "
                         f"vocabulary id; got shape {counts.shape}.")
    power = validation.non_negative_number("power", power)
    return (np.maximum(counts, 1.0) ** -power).astype(np.float32)


def _check_token_weights(token_weights, vocabulary_size):
    weights = np.asarray(token_weights, np.float32)
    if weights.shape != (vocabulary_size,):
        raise ValueError(f"`token_weights` must have one weight per vocabulary id, shape "
                         f"({vocabulary_size},); got {weights.shape}.")
    if not np.all(np.isfinite(weights)) or np.any(weights <= 0):
        raise ValueError("`token_weights` must be positive and finite; exclude tokens with "
                         "`special_token_ids` instead of a zero weight.")
    return weights


def real_lengths(token_ids, padding_mask=None):
    """(batch,) real tokens per row ([CLS] and [SEP] included): the budget's L."""
    if padding_mask is None:
        return tf.fill(tf.shape(token_ids)[:1], tf.shape(token_ids)[1])
    return tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=-1)


def candidate_mask(token_ids, padding_mask=None, special_token_ids=()):
    """True where a token may be selected: real (padding_mask) and not special."""
    token_ids = tf.convert_to_tensor(token_ids)
    ok = tf.ones_like(token_ids, tf.bool)
    if padding_mask is not None:
        ok = tf.logical_and(ok, tf.cast(padding_mask, tf.bool))
    for special in special_token_ids:
        ok = tf.logical_and(ok, tf.not_equal(token_ids, special))
    return ok


def select_positions(candidates, seed, mask_rate=MASK_RATE, max_predictions=None,
                     weights=None, lengths=None):
    """Chooses `prediction_budget` candidate positions per row, without replacement.

    Uniformly, or with `weights` by successive draws proportional to them
    (Gumbel top-k: top-k of log w + Gumbel noise draws k without replacement
    as a weighted multinomial does, e.g. numpy's `choice(replace=False, p=)`).

    Args:
        candidates: (batch, time) bool.
        seed: shape (2,) int seed of the stateless random ops.
        weights: optional (batch, time) positive float, each position's weight.
        lengths: (batch,) real tokens per row, specials counted (the budget's
            L); default: the candidates' count.

    Returns:
        positions (batch, P) int32 in increasing order (0 where unused),
        weights (batch, P) float32 (1 at used slots), selected (batch, time)
        bool.
    """
    candidates = tf.cast(candidates, tf.bool)
    length = candidates.shape[-1]
    if max_predictions is None:
        max_predictions = default_max_predictions(length, mask_rate)
    max_predictions = min(max_predictions, length)
    n = tf.reduce_sum(tf.cast(candidates, tf.float32), axis=-1)
    count = prediction_budget(n if lengths is None else lengths, n, mask_rate, max_predictions)
    scores = tf.random.stateless_uniform(tf.shape(candidates), seed)
    if weights is None:
        scores = tf.where(candidates, scores, -1.0)
    else:
        scores = gumbel_keys(scores, weights, candidates)
    _, positions = tf.math.top_k(scores, k=max_predictions)
    slots = tf.range(max_predictions, dtype=tf.float32)[None, :]
    weights = tf.cast(slots < count[:, None], tf.float32)
    positions = sorted_slots(positions, weights)
    selected = tf.reduce_sum(
        tf.one_hot(positions, tf.shape(candidates)[-1], dtype=tf.float32) * weights[..., None],
        axis=1,
    ) > 0
    return tf.cast(positions, tf.int32), weights, selected


def gumbel_keys(uniform, weights, candidates):
    """Keys whose k highest are k draws without replacement proportional to `weights`
    among `candidates` (-inf elsewhere): log w + Gumbel noise made of `uniform` (Gumbel
    top-k, as numpy's `choice(replace=False, p=)`): `select_positions`' weighted draw and
    XLM's (`keras_ctx.data.multilingual.XLMMasker`)."""
    tiny = float(np.finfo(np.float32).tiny)
    gumbel = -tf.math.log(-tf.math.log(tf.maximum(uniform, tiny)))
    return tf.where(candidates, tf.math.log(tf.cast(weights, tf.float32)) + gumbel,
                    -float("inf"))


def check_mask_token_id(mask_token_id, vocabulary_size):
    """Every masker's check that [MASK] is an id of the model's vocabulary."""
    validation.positive_int("vocabulary_size", vocabulary_size)
    if validation.non_negative_int("mask_token_id", mask_token_id) >= vocabulary_size:
        raise ValueError(
            f"mask_token_id {mask_token_id} is not below vocabulary_size "
            f"{vocabulary_size}; the tokenizer and the model disagree on the vocabulary.")


def corrupt_selected(token_ids, selected, action, random_ids, mask_token_id,
                     mask_token_rate=MASK_TOKEN_RATE, random_token_rate=RANDOM_TOKEN_RATE):
    """BERT's replacement of the selected tokens, from one uniform `action` draw each.

    action < mask_token_rate -> [MASK]; the next random_token_rate -> `random_ids`;
    the rest unchanged (80 / 10 / 10 by default, Devlin et al. 2019).
    """
    corrupted = tf.where(selected & (action < mask_token_rate), mask_token_id, token_ids)
    return tf.where(
        selected & (action >= mask_token_rate) & (action < mask_token_rate + random_token_rate),
        random_ids, corrupted)


def corrupted_batch(token_ids, selected, positions, weights, seeds, vocabulary_size,
                    mask_token_id, mask_token_rate, random_token_rate, random_token_range):
    """Every masker's output: the selected tokens replaced (`corrupt_selected`,
    one action and one random id per token from the two `seeds`) and the
    prediction slots `positions` (weights 1 where used) with their original ids."""
    action_seed, random_seed = seeds
    low, high = random_token_range or (0, vocabulary_size)
    action = tf.random.stateless_uniform(tf.shape(token_ids), action_seed)
    random_ids = tf.random.stateless_uniform(
        tf.shape(token_ids), random_seed, minval=low, maxval=high, dtype=tf.int32)
    corrupted = corrupt_selected(token_ids, selected, action, random_ids, mask_token_id,
                                 mask_token_rate, random_token_rate)
    mask_ids = tf.gather(token_ids, positions, batch_dims=1)
    return {
        "token_ids": corrupted,
        "mask_positions": positions,
        "mask_ids": tf.where(weights > 0, mask_ids, 0),
        "mask_weights": weights,
    }


def mask_tokens(
    token_ids,
    seed,
    vocabulary_size,
    mask_token_id,
    padding_mask=None,
    special_token_ids=(),
    mask_rate=MASK_RATE,
    mask_token_rate=MASK_TOKEN_RATE,
    random_token_rate=RANDOM_TOKEN_RATE,
    max_predictions=None,
    random_token_range=None,
    token_weights=None,
    count_specials=True,
):
    """BERT masking of a dense (batch, time) batch with a stateless seed.

    Args:
        token_ids: (batch, time) int.
        seed: (2,) int seed; the same seed gives the same masks.
        vocabulary_size: random replacements are drawn from
            `random_token_range` = [low, high), default [0, vocabulary_size).
        mask_token_id: id of [MASK].
        padding_mask: (batch, time), 1 for real tokens.
        special_token_ids: ids never selected ([CLS], [SEP], [PAD], ...;
            not [UNK], which BERT's script may mask).
        max_predictions: P, the static number of prediction slots.
        token_weights: optional (vocabulary_size,) positive weights: the
            selection draws tokens proportionally to them (XLM:
            `inverse_frequency_weights(counts)`); the count stays
            round(mask_rate * n). Default: uniform.
        count_specials: the budget's L counts the row's special tokens, as
            google-research/bert's create_pretraining_data.py counts [CLS] and [SEP]
            (True); False: only the tokens that may be masked, as Hugging Face's
            DataCollatorForLanguageModeling draws 15% of the non-special tokens (MAD-X's
            released language-adapter scripts), whatever the separators in a row.

    Returns:
        dict with `token_ids` (corrupted), `mask_positions` (batch, P),
        `mask_ids` (original ids there), `mask_weights` (1 at used slots).
    """
    _check_rates(mask_rate, mask_token_rate, random_token_rate)
    token_ids = tf.cast(tf.convert_to_tensor(token_ids), tf.int32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int32)
    select_seed, action_seed, random_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3))
    candidates = candidate_mask(token_ids, padding_mask, special_token_ids)
    position_weights = None
    if token_weights is not None:
        position_weights = tf.gather(tf.cast(token_weights, tf.float32), token_ids)
    positions, weights, selected = select_positions(
        candidates, select_seed, mask_rate, max_predictions, position_weights,
        real_lengths(token_ids, padding_mask) if count_specials else None)
    return corrupted_batch(token_ids, selected, positions, weights, (action_seed, random_seed),
                           vocabulary_size, mask_token_id, mask_token_rate,
                           random_token_rate, random_token_range)


class Masker:
    """What every masker shares: its checked vocabulary, rates and seed stream.

    A masker is a tf.data map over batches: `masker(batch, seed)` returns the
    corrupted batch; `apply(dataset)` pairs each batch with a stateless seed,
    the same every epoch (static, BERT) or new every epoch (dynamic, RoBERTa).
    Subclasses implement `__call__`.

    Args:
        vocabulary_size: V; `mask_token_id` must be below it.
        mask_token_id: the [MASK] id.
        special_token_ids: ids never selected (padding, [CLS], [SEP], ...).
        mask_rate: share of the candidate tokens selected (0.15, Devlin et al. 2019).
        mask_token_rate: share of the selected replaced by [MASK] (0.8).
        random_token_rate: share of the selected replaced by a random token
            (0.1); the rest stay unchanged.
        max_predictions: prediction slots per sequence (None: enough for
            `mask_rate`).
        random_token_range: (low, high) of the random replacement ids (None:
            the whole vocabulary).
        dynamic: True: new masks each epoch; False: the same masks every epoch.
        seed: integer seed of the whole masking stream.
    """

    def __init__(self, vocabulary_size, mask_token_id, special_token_ids=(),
                 mask_rate=MASK_RATE, mask_token_rate=MASK_TOKEN_RATE,
                 random_token_rate=RANDOM_TOKEN_RATE, max_predictions=None,
                 random_token_range=None, dynamic=True, seed=0):
        _check_rates(mask_rate, mask_token_rate, random_token_rate)
        check_mask_token_id(mask_token_id, vocabulary_size)
        validation.optional_positive_int("max_predictions", max_predictions)
        validation.non_negative_int("seed", seed)
        _check_random_range(random_token_range, vocabulary_size)
        self.vocabulary_size = vocabulary_size
        self.mask_token_id = mask_token_id
        self.special_token_ids = tuple(special_token_ids)
        self.mask_rate = mask_rate
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        self.max_predictions = max_predictions
        self.random_token_range = random_token_range
        self.dynamic = dynamic
        self.seed = seed

    def __call__(self, batch, seed):
        raise NotImplementedError

    def apply(self, dataset):
        """Masks every element of a batched dataset (static or dynamic, see the class)."""
        return map_with_seeds(dataset, self, self.seed, self.dynamic)


class MLMMasker(Masker):
    """A tf.data map: `dataset.map(masker)` on batches of dicts with `token_ids`.

    The batch dict keeps its other keys (`padding_mask`, `segment_ids`,
    labels); `token_ids` is replaced by the corrupted ids and `mask_positions`,
    `mask_ids`, `mask_weights` are added. Use `apply(dataset)` to get static or
    dynamic masking (it pairs each batch with a seed).

    Args:
        vocabulary_size, mask_token_id, special_token_ids: as `mask_tokens`.
        mask_rate, mask_token_rate, random_token_rate: as `Masker`.
        max_predictions, random_token_range, dynamic, seed: as `Masker`.
        token_weights: as `mask_tokens` (XLM's frequency-weighted selection).
        count_specials: as `mask_tokens` (whether the budget counts the specials).
    """

    def __init__(self, vocabulary_size, mask_token_id, special_token_ids=(),
                 mask_rate=MASK_RATE, mask_token_rate=MASK_TOKEN_RATE,
                 random_token_rate=RANDOM_TOKEN_RATE, max_predictions=None,
                 random_token_range=None, dynamic=True, seed=0, token_weights=None,
                 count_specials=True):
        super().__init__(vocabulary_size, mask_token_id, special_token_ids, mask_rate,
                         mask_token_rate, random_token_rate, max_predictions,
                         random_token_range, dynamic, seed)
        self.token_weights = (None if token_weights is None
                              else _check_token_weights(token_weights, vocabulary_size))
        self.count_specials = bool(count_specials)

    def __call__(self, batch, seed):
        batch = dict(batch)
        masked = mask_tokens(
            batch["token_ids"], seed, self.vocabulary_size, self.mask_token_id,
            padding_mask=batch.get("padding_mask"),
            special_token_ids=self.special_token_ids, mask_rate=self.mask_rate,
            mask_token_rate=self.mask_token_rate, random_token_rate=self.random_token_rate,
            max_predictions=self.max_predictions, random_token_range=self.random_token_range,
            token_weights=self.token_weights, count_specials=self.count_specials,
        )
        batch.update(masked)
        return batch


def map_with_seeds(dataset, masker, seed, dynamic):
    """`dataset.map(masker)` with a (2,) int32 stateless seed per element.

    Dataset.random with rerandomize_each_iteration: new seeds every epoch
    (dynamic), or the same seeds every epoch (static).
    """
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=dynamic).batch(2)
    seeds = seeds.map(lambda s: tf.cast(s % (2**31 - 1), tf.int32))
    return tf.data.Dataset.zip(dataset, seeds).map(
        masker, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def mask_dataset(dataset, vocabulary_size, mask_token_id, **kwargs):
    """`MLMMasker(vocabulary_size, mask_token_id, **kwargs).apply(dataset)`."""
    return MLMMasker(vocabulary_size, mask_token_id, **kwargs).apply(dataset)

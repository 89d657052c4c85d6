"""ALBERT's n-gram masking as released, transcribed for the word-boundary comparison.

google-research/albert create_pretraining_data.py @b772393, `_is_start_piece_sp`
and `create_masked_lm_predictions` with the released flags (do_whole_word_mask,
ngram=3, favor_shorter_ngram, no do_permutation), line for line but for the
FLAGS object; `tests/data/test_word_boundaries.py` runs it on our rows. The
transcription was checked against the released file itself (same rows, same
seeds: identical masks), as docs/notes/data-references.md records. XLNet's
`is_start_piece` is zihangdai/xlnet data_utils.py @bbaa3a6's `_is_start_piece`.
"""

import collections

import numpy as np

MaskedLmInstance = collections.namedtuple("MaskedLmInstance", ["index", "label"])
SPECIAL_PIECES = set(list('!"#$%&\"()*+,-./:;?@[\\]^_`{|}~'))
ENGLISH_CHARS = set(list("abcdefghijklmnopqrstuvwxyz"))
NGRAM = 3


def is_start_piece_sp(piece):
    if (piece.startswith("▁") or piece.startswith("<") or piece in SPECIAL_PIECES
            or not all([i.lower() in ENGLISH_CHARS.union(SPECIAL_PIECES) for i in piece])):
        return True
    return False


# XLNet data_utils.py @bbaa3a6, `_is_start_piece` (its own copy of the marks).
XLNET_SPECIAL_PIECES = set(list('!"#$%&\"()*+,-./:;?@[\\]^_`{|}~'))


def is_start_piece(piece):
    return piece.startswith("▁") or piece.startswith("<") or piece in XLNET_SPECIAL_PIECES


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq,
                                 vocab_words, rng, is_start_piece=is_start_piece_sp):
    cand_indexes = []
    for (i, token) in enumerate(tokens):
        if token == "[CLS]" or token == "[SEP]":
            continue
        if len(cand_indexes) >= 1 and not is_start_piece(token):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq,
                         max(1, int(round(len(tokens) * masked_lm_prob))))
    ngrams = np.arange(1, NGRAM + 1, dtype=np.int64)
    pvals = 1. / np.arange(1, NGRAM + 1)
    pvals /= pvals.sum(keepdims=True)
    ngram_indexes = []
    for idx in range(len(cand_indexes)):
        ngram_index = []
        for n in ngrams:
            ngram_index.append(cand_indexes[idx:idx + n])
        ngram_indexes.append(ngram_index)
    rng.shuffle(ngram_indexes)
    masked_lms = []
    covered_indexes = set()
    for cand_index_set in ngram_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if not cand_index_set:
            continue
        n = np.random.choice(ngrams[:len(cand_index_set)],
                             p=pvals[:len(cand_index_set)] /
                             pvals[:len(cand_index_set)].sum(keepdims=True))
        index_set = sum(cand_index_set[n - 1], [])
        n -= 1
        while len(masked_lms) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(cand_index_set[n - 1], [])
            n -= 1
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        if any(index in covered_indexes for index in index_set):
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = "[MASK]"
            elif rng.random() < 0.5:
                masked_token = tokens[index]
            else:
                masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append(MaskedLmInstance(index=index, label=tokens[index]))
    rng.shuffle(ngram_indexes)  # the released code shuffles again (for do_permutation)
    return sorted(m.index for m in masked_lms)


def runs(flags):
    """Lengths of the maximal runs of true flags (consecutive masked positions / targets)."""
    lengths, current = [], 0
    for flag in list(flags) + [False]:
        if flag:
            current += 1
        elif current:
            lengths.append(current)
            current = 0
    return lengths


def run_lengths(masked, length):
    """Lengths of the runs of consecutive masked positions of one row."""
    flags = np.zeros(length, bool)
    flags[list(masked)] = True
    return runs(flags)


def statistics(rows, masked_rows, starts):
    """Masked share, mean masked-run length, run-length shares (1, 2, 3, 4+), and the
    share of runs that start at a word start and end at a word end of `starts`
    (piece -> bool, the released rule)."""
    lengths, masked, real, aligned = [], 0, 0, 0
    for tokens, positions in zip(rows, masked_rows):
        row_runs = run_lengths(positions, len(tokens))
        lengths += row_runs
        masked += len(positions)
        real += len(tokens)
        begin = [p for p in positions if p - 1 not in positions]
        for first, n in zip(sorted(begin), row_runs):
            after = first + n
            aligned += (starts(tokens[first]) and (
                after >= len(tokens) or tokens[after] == "[SEP]" or starts(tokens[after])))
    lengths = np.asarray(lengths)
    return {"masked_share": masked / real, "mean_run": float(lengths.mean()),
            "run_1": float(np.mean(lengths == 1)), "run_2": float(np.mean(lengths == 2)),
            "run_3": float(np.mean(lengths == 3)), "run_4+": float(np.mean(lengths >= 4)),
            "runs_on_word_boundaries": aligned / len(lengths)}

"""XLM's MLM / TLM batches and masking as released, transcribed for test_multilingual.py.

facebookresearch/XLM @cd281d3, with train.py's defaults and the README's flags
(`--word_pred 0.15 --word_mask_keep_rand 0.8,0.1,0.1 --bptt 256 --batch_size 32`,
`--max_len 100`, `--group_by_size true`, no fp16):
  - xlm/trainer.py `Trainer.__init__` (`mask_scores`: count ** -sample_alpha,
    0 for <pad> and for the dictionary's specials, whose count is 0) and
    `mask_out`;
  - xlm/data/dataset.py `StreamDataset.__init__` (MLM streams) and
    `ParallelDataset.batch_sentences` / `get_iterator` (TLM pairs, grouped by size);
  - xlm/utils.py `concat_batches` (TLM: `</s> src </s> </s> tgt </s>`, positions
    reset, language ids per side).
torch tensors as NumPy arrays (time, batch); `torch.multinomial` and
`random_(n_words)` as NumPy draws from the global generator.
"""

import math

import numpy as np


def mask_scores(counts, sample_alpha, pad_index):
    """Trainer.__init__: the weight of each id as a target."""
    counts = np.asarray(counts)
    scores = np.maximum(counts, 1) ** -float(sample_alpha)
    scores[pad_index] = 0  # do not predict <PAD> index
    scores[counts == 0] = 0  # do not predict special tokens
    return scores


def mask_out(x, scores, sample_alpha, pad_index, mask_index, n_words, word_pred=0.15,
             pred_probs=(0.8, 0.1, 0.1)):
    """Trainer.mask_out: (x corrupted, targets, pred_mask) of a (slen, bs) batch."""
    slen, bs = x.shape
    if sample_alpha == 0:
        pred_mask = np.random.rand(slen, bs) <= word_pred
    else:
        x_prob = scores[x.flatten()]
        n_tgt = math.ceil(word_pred * slen * bs)
        tgt_ids = np.random.choice(len(x_prob), n_tgt, replace=False, p=x_prob / x_prob.sum())
        pred_mask = np.zeros(slen * bs, dtype=bool)
        pred_mask[tgt_ids] = True
        pred_mask = pred_mask.reshape(slen, bs)
    pred_mask[x == pad_index] = False
    pred_mask[0] = False  # TODO: remove
    _x_real = x[pred_mask]
    _x_rand = np.random.randint(0, n_words, len(_x_real))
    _x_mask = np.full_like(_x_real, mask_index)
    probs = np.random.choice(3, len(_x_real), p=np.asarray(pred_probs) / np.sum(pred_probs))
    _x = np.where(probs == 0, _x_mask, np.where(probs == 1, _x_real, _x_rand))
    x = x.copy()
    x[pred_mask] = _x
    return x, _x_real, pred_mask


def stream_batches(sentences, bptt, bs, eos_index):
    """StreamDataset: every sentence followed by </s>, padded at the front with </s>
    to whole batches, `bs` rows each opened by one more </s>, cut into `bptt` windows."""
    sent = np.concatenate([np.append(s, eos_index) for s in sentences]).astype(np.int64)
    n_tokens = len(sent)
    n_batches = math.ceil(n_tokens / (bs * bptt))
    t_size = n_batches * bptt * bs
    buffer = np.zeros(t_size, dtype=sent.dtype) + eos_index
    buffer[t_size - n_tokens:] = sent
    buffer = buffer.reshape((bs, n_batches * bptt)).T
    data = np.zeros((n_batches * bptt + 1, bs), dtype=sent.dtype) + eos_index
    data[1:] = buffer
    return [data[bptt * i:bptt * (i + 1)] for i in range(n_batches)]


def batch_sentences(sentences, pad_index, eos_index):
    """ParallelDataset.batch_sentences: `</s> s </s>` columns padded to the longest."""
    lengths = np.array([len(s) + 2 for s in sentences])
    sent = np.full((lengths.max(), len(sentences)), pad_index, np.int64)
    sent[0] = eos_index
    for i, s in enumerate(sentences):
        if lengths[i] > 2:
            sent[1:lengths[i] - 1, i] = s
        sent[lengths[i] - 1, i] = eos_index
    return sent, lengths


def parallel_batches(pairs, batch_size, max_len=100):
    """ParallelDataset after remove_empty_sentences / remove_long_sentences(max_len):
    get_iterator(shuffle=True, group_by_size=True) with a fixed number of sentences."""
    kept = [(a, b) for a, b in pairs if 0 < len(a) <= max_len and 0 < len(b) <= max_len]
    lengths = np.array([len(a) + len(b) + 4 for a, b in kept])
    indices = np.random.permutation(len(kept))
    indices = indices[np.argsort(lengths[indices], kind="mergesort")]
    batches = np.array_split(indices, math.ceil(len(indices) * 1. / batch_size))
    np.random.shuffle(batches)  # get_iterator: shuffle the batches when shuffle=True
    return [[kept[i] for i in batch] for batch in batches]


def concat_batches(x1, len1, lang1_id, x2, len2, lang2_id, pad_idx, eos_idx):
    """utils.concat_batches with reset_positions=True (TLM)."""
    lengths = len1 + len2
    slen, bs = lengths.max(), len(lengths)
    x = np.full((slen, bs), pad_idx, np.int64)
    x[:len1.max()] = x1
    positions = np.tile(np.arange(slen)[:, None], (1, bs))
    langs = np.full((slen, bs), lang1_id, np.int64)
    for i in range(bs):
        l1 = len1[i]
        x[l1:l1 + len2[i], i] = x2[:len2[i], i]
        positions[l1:, i] -= len1[i]
        langs[l1:, i] = lang2_id
    assert (x == eos_idx).sum() == 4 * bs
    return x, lengths, positions, langs

"""fairseq's RoBERTa masking as released, transcribed for test_roberta_masking.py.

facebookresearch/fairseq fairseq/data/mask_tokens_dataset.py @079540e,
`MaskTokensDataset.__getitem__` with RoBERTa's settings (mask_prob 0.15,
leave_unmasked_prob 0.1, random_token_prob 0.1, no whole-word masking, no
frequency weighting): `num_mask = int(0.15 * sz + U(0, 1))` positions drawn among
*all* `sz` positions of the item (<s> and </s> included), then 10% kept and 10%
replaced by a random non-special symbol. NumPy's legacy RandomState in place of
`data_utils.numpy_seed`; torch tensors as NumPy arrays.
"""

import numpy as np


def mask_item(item, rng, mask_prob=0.15, leave_unmasked_prob=0.1, random_token_prob=0.1):
    """(positions, actions) of one item: action 0 <mask>, 1 random symbol, 2 unchanged."""
    sz = len(item)
    mask = np.full(sz, False)
    num_mask = int(mask_prob * sz + rng.rand())
    mask[rng.choice(sz, num_mask, replace=False)] = True
    rand_or_unmask_prob = random_token_prob + leave_unmasked_prob
    rand_or_unmask = mask & (rng.rand(sz) < rand_or_unmask_prob)
    unmask_prob = leave_unmasked_prob / rand_or_unmask_prob
    decision = rng.rand(sz) < unmask_prob
    unmask = rand_or_unmask & decision
    rand_mask = rand_or_unmask & (~decision)
    positions = np.flatnonzero(mask)
    actions = np.where(unmask[positions], 2, np.where(rand_mask[positions], 1, 0))
    return positions, actions

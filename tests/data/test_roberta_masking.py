"""RoBERTa's masks against fairseq's released masking, on our rows (issue 54).

fairseq (mask_tokens_dataset.py, transcribed in fairseq_masking_reference.py) draws
targets among every position of a block, <s> and </s> included; keras_ctx's RoBERTa
masked only text tokens, so 2.8% of fairseq's targets (the separators) were never
ours. The slow test re-runs the released algorithm on the RoBERTa family's
FULL-SENTENCES rows of the built-in corpus under its own byte-level BPE and holds
ours within 3% of it (docs/notes/data-references.md, "RoBERTa").
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import registry
from keras_ctx.data import segments, tokenizers
from keras_ctx.data.maskers import masker_for
from tests.data import fairseq_masking_reference as reference


def _roberta_masks(tokenizer, ids, rows, seed):
    options = registry.get("roberta").dataset.options
    masker = masker_for(tokenizer, ids, tokenizer.vocabulary_size(), seed=seed, **options)
    positions, actions = [], []
    for start in range(0, len(rows), 256):
        chunk = np.stack(rows[start:start + 256])
        out = masker({"token_ids": tf.constant(chunk),
                      "padding_mask": tf.constant((chunk != ids["pad"]).astype(np.int32))},
                     tf.constant([seed, start], tf.int32))
        where, weights = out["mask_positions"].numpy(), out["mask_weights"].numpy()
        corrupted = out["token_ids"].numpy()
        for i, row in enumerate(chunk):
            chosen = np.asarray(sorted(int(p) for p, w in zip(where[i], weights[i]) if w > 0))
            positions.append(chosen)
            actions.append(np.where(corrupted[i, chosen] == ids["mask"], 0,
                                    np.where(corrupted[i, chosen] == row[chosen], 2, 1)))
    return positions, actions


def _action_statistics(rows, ids, positions, actions):
    real = sum(int((row != ids["pad"]).sum()) for row in rows)
    targets = sum(len(p) for p in positions)
    special = {ids["cls"], ids["sep"]}
    on_special = sum(int(row[p] in special) for row, ps in zip(rows, positions) for p in ps)
    every = np.concatenate(actions)
    return {"masked_share": targets / real, "targets_on_special": on_special / targets,
            "mask_token": float(np.mean(every == 0)), "random": float(np.mean(every == 1))}


def _fairseq(rows, ids, seed):
    rng = np.random.RandomState(seed)
    masked = [reference.mask_item(row[row != ids["pad"]], rng) for row in rows]
    return [m[0] for m in masked], [m[1] for m in masked]


def test_roberta_may_mask_its_separators():
    # Rows <s> w w w </s>: fairseq's 15% of all positions reach <s> and </s>; BERT's
    # candidates (ELECTRA's recipe) never do.
    tokenizer = registry.get("roberta").train_tokenizer(["one two three four five"] * 20, 300)
    ids = tokenizers.special_token_ids(tokenizer)
    word = tokenizers.vocabulary(tokenizer).index("one") if "one" in tokenizers.vocabulary(
        tokenizer) else 10
    rows = [np.asarray([ids["cls"], word, word, word, ids["sep"]] + [ids["pad"]] * 3, np.int32)
            for _ in range(400)]
    positions, _ = _roberta_masks(tokenizer, ids, rows, seed=0)
    picked = np.concatenate(positions)
    share = np.isin(picked, [0, 4]).mean()
    assert share == pytest.approx(0.4, abs=0.08)  # 2 of 5 positions, drawn uniformly
    electra = masker_for(tokenizer, ids, tokenizer.vocabulary_size(), seed=0)
    out = electra({"token_ids": tf.constant(np.stack(rows)),
                   "padding_mask": tf.constant((np.stack(rows) != ids["pad"]).astype(np.int32))},
                  tf.constant([0, 0], tf.int32))
    chosen = out["mask_positions"].numpy()[out["mask_weights"].numpy() > 0]
    assert not np.isin(chosen, [0, 4]).any()


def test_roberta_random_replacements_skip_fairseqs_special_symbols():
    # fairseq's MaskTokensDataset: weights[:nspecial] = 0, so <s> <pad> </s> <unk> (ids
    # 0-3 here as in fairseq's dictionary) never replace a token; <mask> and the rest
    # may. BERT's create_pretraining_data.py draws the whole vocabulary (ELECTRA's
    # recipe here draws no random token at all).
    ids = {"cls": 0, "pad": 1, "sep": 2, "unk": 3, "mask": 4}
    options = registry.get("roberta").dataset.options
    masker = masker_for(None, ids, 12, seed=0, mask_token_rate=0.0, random_token_rate=1.0,
                        mask_rate=0.5, **options)
    rows = np.full((64, 40), 11, np.int32)
    out = masker({"token_ids": tf.constant(rows), "padding_mask": tf.ones_like(rows)},
                 tf.constant([0, 0], tf.int32))
    chosen = out["mask_weights"].numpy() > 0
    new = np.take_along_axis(out["token_ids"].numpy(), out["mask_positions"].numpy(), 1)[chosen]
    assert set(new) == set(range(4, 12))  # was [0, 12): a third of them specials
    bert = masker_for(None, ids, 12, seed=0, mask_token_rate=0.0, random_token_rate=1.0,
                      mask_rate=0.5)
    out = bert({"token_ids": tf.constant(rows), "padding_mask": tf.ones_like(rows)},
               tf.constant([0, 0], tf.int32))
    new = np.take_along_axis(out["token_ids"].numpy(), out["mask_positions"].numpy(), 1)
    assert set(new[out["mask_weights"].numpy() > 0]) == set(range(12))


# fairseq's masking on the RoBERTa family's rows (612 rows of 512 of the built-in
# corpus, seeds 0-2; docs/notes/data-references.md).
RELEASED = {"masked_share": 0.1500, "targets_on_special": 0.0277, "mask_token": 0.7989,
            "random": 0.1001}


@pytest.mark.slow  # the built-in corpus and its byte-level BPE (about 60 s on 2 cores)
def test_roberta_masks_match_fairseq_on_our_rows():
    from keras_ctx.data import corpora

    documents = corpora.builtin_documents()
    tokenizer = registry.get("roberta").train_tokenizer(
        corpora.sample_sentences("builtin", seed=0), 8000)
    ids = tokenizers.special_token_ids(tokenizer)
    tokenized = tokenizers.tokenize_documents(tf.data.Dataset.from_generator(
        lambda: iter(documents), output_signature=tf.TensorSpec([None], tf.string)), tokenizer)
    docs = [[np.asarray(s, np.int32) for s in d.to_list()] for d in tokenized]
    theirs, ours = [], []
    for seed in (0, 1, 2):
        rows = [e["token_ids"] for e in segments.packed_examples(
            docs, 512, ids["cls"], ids["sep"], ids["pad"], rng=np.random.default_rng(seed))]
        theirs.append(_action_statistics(rows, ids, *_fairseq(rows, ids, seed)))
        ours.append(_action_statistics(rows, ids, *_roberta_masks(tokenizer, ids, rows, seed)))
    for key, pinned in RELEASED.items():
        released = np.mean([s[key] for s in theirs])
        mine = np.mean([s[key] for s in ours])
        assert released == pytest.approx(pinned, rel=0.02), key  # the reference as recorded
        assert mine == pytest.approx(released, rel=0.03), key  # issue 54: within 3%

"""MAD-X's language-adapter examples as the released scripts make them (issue 54).

MAD-X (Pfeiffer et al. 2020) trains each language adapter by masked LM over the frozen
base model. The released code is AdapterHub's fork of Hugging Face's language-modeling
examples; it needs `datasets` (not installed here), so the functions that build and
mask the examples are transcribed, keeping their structure:

- `run_mlm_grouped`, `run_mlm_lines`: adapter-hub/adapters @88f18eb
  examples/pytorch/language-modeling/run_mlm.py, `tokenize_function` and `group_texts`
  (the default) or the `--line_by_line` branch; `datasets.map(batched=True)` hands
  `group_texts` 1,000 lines at a time, so each such batch drops its own remainder.
- `text_dataset`: adapter-hub/adapter-transformers @6303b5a (branch legacy)
  src/transformers/data/datasets/language_modeling.py `TextDataset`, which
  examples/language-modeling/run_language_modeling.py reads by default: the script the
  MAD-X authors trained their language adapters with (adapter-hub/adapters issue #125).
- `mask_tokens`: transformers' `DataCollatorForLanguageModeling.torch_mask_tokens`
  (data_collator.py, 5.24.0; the collator both scripts use), in NumPy: each maskable
  token drawn with probability `mlm_probability`, then 80% [MASK], 10% a random id of
  the whole vocabulary, 10% unchanged; special tokens are never drawn.
"""

import itertools

import numpy as np

# datasets' Dataset.map(batched=True) default batch_size: run_mlm.py's group_texts sees
# this many lines at once and drops each batch's remainder.
MAP_BATCH = 1000


def run_mlm_grouped(lines, tokenize, max_seq_length, map_batch=MAP_BATCH):
    """run_mlm.py without --line_by_line: every line of the file (empty lines too) as
    `tokenize(line)` gives it, [CLS] and [SEP] included (`tokenize_function`), joined
    and cut into `max_seq_length` blocks per map batch (`group_texts`)."""
    rows = []
    for start in range(0, len(lines), map_batch):
        concatenated = list(itertools.chain(*(tokenize(line)
                                              for line in lines[start:start + map_batch])))
        total_length = (len(concatenated) // max_seq_length) * max_seq_length
        rows += [concatenated[i:i + max_seq_length]
                 for i in range(0, total_length, max_seq_length)]
    return rows


def run_mlm_lines(lines, tokenize, max_seq_length):
    """run_mlm.py --line_by_line: each non-empty line one example, truncated to
    `max_seq_length` with its [CLS] and [SEP] (`tokenize(line, max_seq_length)`)."""
    lines = [line for line in lines if len(line) > 0 and not line.isspace()]
    return [tokenize(line, max_seq_length) for line in lines]


def text_dataset(text, tokenize_plain, build_inputs_with_special_tokens, block_size):
    """TextDataset: the whole file's text tokenized at once (line ends are whitespace),
    cut into blocks of `block_size` minus the specials, each wrapped in [CLS] ... [SEP];
    the last partial block dropped."""
    block_size = block_size - 2  # tokenizer.num_special_tokens_to_add(pair=False), BERT's
    tokenized_text = tokenize_plain(text)
    return [build_inputs_with_special_tokens(tokenized_text[i:i + block_size])
            for i in range(0, len(tokenized_text) - block_size + 1, block_size)]


def mask_tokens(inputs, special_tokens_mask, mask_token_id, vocabulary_size, rng,
                mlm_probability=0.15, mask_replace_prob=0.8, random_replace_prob=0.1):
    """`torch_mask_tokens` on one row: (corrupted ids, labels with -100 off the targets)."""
    inputs = np.array(inputs)
    labels = inputs.copy()
    probability_matrix = np.full(labels.shape, mlm_probability)
    probability_matrix[np.asarray(special_tokens_mask, bool)] = 0.0
    masked_indices = rng.random(labels.shape) < probability_matrix
    labels[~masked_indices] = -100
    indices_replaced = (rng.random(labels.shape) < mask_replace_prob) & masked_indices
    inputs[indices_replaced] = mask_token_id
    random_replace_prob_scaled = random_replace_prob / (1 - mask_replace_prob)
    indices_random = ((rng.random(labels.shape) < random_replace_prob_scaled)
                      & masked_indices & ~indices_replaced)
    inputs[indices_random] = rng.integers(0, vocabulary_size, labels.shape)[indices_random]
    return inputs, labels

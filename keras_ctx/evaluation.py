"""In-context (zero-, one-, few-shot) evaluation by language-model log-likelihood.

GPT-3 (Brown et al. 2020, Sec. 2.4): each evaluation example is preceded by
K demonstrations drawn at random from the task's training split, delimited
by newlines; "on tasks that involve choosing one correct completion from
several options (multiple choice), we provide K examples of context plus
correct completion, followed by one example of context only, and compare
the LM likelihood of each completion", per token ("to normalize for length")
or summed. Completion tasks score the target's likelihood and whether greedy
decoding would produce it exactly (LAMBADA-style accuracy).

Everything rests on one batched, XLA-compiled scorer of
log p(continuation | context), `score_continuations`, over token ids. It
works with any causal backbone that returns `sequence_output` and has
`logits(hidden)` (GPT, GPT-2, GPT-3, GPT-Neo, converted checkpoints).

Example:
>>> examples = [MultipleChoiceExample("Q: 2 + 2 = ? A:", [" 4", " 5"], label=0), ...]
>>> result = evaluate_multiple_choice(backbone, tokenizer, examples,
...                                   train_examples=train, num_shots=3, seed=0)
>>> result["accuracy_per_token"], result["accuracy_sum"]
"""

import dataclasses
import weakref

import numpy as np
from keras import ops

from keras_ctx import backend
from keras_ctx.common import validation
from keras_ctx.layers.gather import gather_positions

_COMPILED = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class MultipleChoiceExample:
    """A context, its candidate completions, and the index of the correct one."""

    context: str
    choices: list
    label: int


@dataclasses.dataclass
class CompletionExample:
    """A context and the completion the model should assign high likelihood to."""

    context: str
    completion: str


# ------------------------------------------------------------------- the scorer


def _round_up(value, multiple):
    return -(-value // multiple) * multiple


def _scoring_function(backbone, jit_compile):
    functions = _COMPILED.setdefault(backbone, {})
    if jit_compile not in functions:
        def score(token_ids, padding_mask, positions, targets, target_mask):
            hidden = backbone({"token_ids": token_ids, "padding_mask": padding_mask},
                              training=False)["sequence_output"]
            # Only the rows that predict a continuation token reach the vocabulary.
            logits = ops.cast(backbone.logits(gather_positions(hidden, positions)), "float32")
            picked_logits = ops.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
            picked = picked_logits - ops.logsumexp(logits, axis=-1)
            weights = ops.cast(target_mask, "float32")
            is_best = picked_logits >= ops.max(logits, axis=-1)
            greedy = ops.all(ops.logical_or(is_best, ops.logical_not(target_mask)), axis=-1)
            return ops.sum(picked * weights, axis=-1), greedy

        # tf.function (XLA or a graph) on TensorFlow, jax.jit on JAX (generation's switch).
        functions[jit_compile] = backend.compile_function(backbone, score, jit_compile)
    return functions[jit_compile]


def score_continuations(backbone, contexts, continuations, batch_size=8,
                        sequence_length=None, jit_compile=True):
    """log p(continuation | context) for each pair of token-id lists.

    A pair becomes one row `context + continuation`; position t's output
    predicts token t + 1, so the row runs on all but its last token and the
    continuation's tokens are scored from the positions before them. Rows
    longer than `sequence_length` + 1 lose tokens from the left of the
    context (GPT-3 truncates its few-shot prompts to the context window).
    Rows are right-padded to one static length and batches to `batch_size`
    (padding rows are dropped), so the scorer compiles once with XLA.

    Args:
        backbone: a causal backbone with `logits(hidden)` (e.g. GPTBackbone).
        contexts: token-id lists; each needs at least one token (the first
            continuation token is predicted from it; GPT-2/3 use
            <|endoftext|> for an empty context).
        continuations: token-id lists, non-empty.
        batch_size: rows per compiled call.
        sequence_length: the static row length; defaults to the longest
            row, rounded up to a multiple of 64, at most the backbone's
            `max_sequence_length`.
        jit_compile: compile the scorer with XLA.

    Returns:
        {"log_likelihood": summed log-probability (float64 array),
            "num_tokens": continuation lengths, "mean_log_likelihood": per token,
            "is_greedy": whether every continuation token is the argmax}.
    """
    if not hasattr(backbone, "logits"):
        raise ValueError(f"{type(backbone).__name__} has no `logits(hidden)`: in-context "
                         "scoring needs a causal language-model backbone (GPT family).")
    contexts, continuations = list(contexts), list(continuations)
    if len(contexts) != len(continuations):
        raise ValueError(f"{len(contexts)} contexts but {len(continuations)} continuations.")
    if not contexts:
        raise ValueError("Nothing to score: no (context, continuation) pairs.")
    vocabulary = backbone.vocabulary_size
    for name, sequences in (("context", contexts), ("continuation", continuations)):
        for index, ids in enumerate(sequences):
            if len(ids) == 0:
                raise ValueError(f"{name} {index} is empty; every context needs a token "
                                 "(e.g. <|endoftext|>) and every continuation one to score.")
            if min(ids) < 0 or max(ids) >= vocabulary:
                raise ValueError(f"{name} {index} has token ids outside [0, {vocabulary}); "
                                 "was it tokenized with this model's vocabulary?")
    limit = backbone.max_sequence_length
    if sequence_length is None:
        longest = max(len(c) + len(t) - 1 for c, t in zip(contexts, continuations))
        sequence_length = min(_round_up(longest, 64), limit)
    if sequence_length > limit:
        raise ValueError(f"sequence_length {sequence_length} exceeds the backbone's "
                         f"max_sequence_length {limit}.")
    longest_target = max(len(t) for t in continuations)
    if longest_target >= sequence_length + 1:
        raise ValueError(f"A continuation has {longest_target} tokens; with "
                         f"sequence_length {sequence_length} at most {sequence_length} fit "
                         "after one context token.")

    count = len(contexts)
    total = _round_up(count, batch_size)
    length, targets_length = sequence_length, longest_target
    token_ids = np.zeros((total, length), "int32")
    padding_mask = np.zeros((total, length), "int32")
    positions = np.zeros((total, targets_length), "int32")
    targets = np.zeros((total, targets_length), "int32")
    target_mask = np.zeros((total, targets_length), bool)
    for row, (context, continuation) in enumerate(zip(contexts, continuations)):
        tokens = (list(context) + list(continuation))[-(length + 1):]
        inputs = tokens[:-1]
        token_ids[row, :len(inputs)] = inputs
        padding_mask[row, :len(inputs)] = 1
        n = len(continuation)
        positions[row, :n] = np.arange(len(tokens) - 1 - n, len(tokens) - 1)
        targets[row, :n] = continuation
        target_mask[row, :n] = True
    padding_mask[count:, 0] = 1  # padding rows: one token, results dropped

    score = _scoring_function(backbone, jit_compile)
    sums, greedy = [], []
    for start in range(0, total, batch_size):
        batch = slice(start, start + batch_size)
        s, g = score(*(ops.convert_to_tensor(array[batch]) for array in
                       (token_ids, padding_mask, positions, targets, target_mask)))
        sums.append(ops.convert_to_numpy(s))
        greedy.append(ops.convert_to_numpy(g))
    log_likelihood = np.concatenate(sums)[:count].astype("float64")
    num_tokens = np.array([len(t) for t in continuations])
    return {"log_likelihood": log_likelihood, "num_tokens": num_tokens,
            "mean_log_likelihood": log_likelihood / num_tokens,
            "is_greedy": np.concatenate(greedy)[:count]}


# --------------------------------------------------------------- the prompts


def _answer(example):
    if isinstance(example, MultipleChoiceExample):
        return example.choices[example.label]
    return example.completion


def few_shot_contexts(examples, train_examples=(), num_shots=0, seed=0, separator="\n\n"):
    """Each example's context preceded by `num_shots` demonstrations (context + answer).

    Demonstrations are drawn without replacement from `train_examples` with a
    generator seeded by (seed, example index), so a prompt does not depend
    on the batch or on the other examples; an example never demonstrates
    itself (when the training and evaluation lists share objects).
    """
    validation.non_negative_int("num_shots", num_shots)
    train_examples = list(train_examples)
    contexts = []
    for index, example in enumerate(examples):
        pool = [e for e in train_examples if e is not example]
        if num_shots > len(pool):
            raise ValueError(f"num_shots={num_shots} but only {len(pool)} training examples "
                             "to draw demonstrations from.")
        rng = np.random.default_rng([seed, index])
        chosen = rng.choice(len(pool), size=num_shots, replace=False) if num_shots else []
        shots = [pool[i].context + _answer(pool[i]) for i in chosen]
        contexts.append(separator.join(shots + [example.context]))
    return contexts


def _tokenize(tokenizer, text):
    return [int(i) for i in np.asarray(tokenizer(text)).reshape(-1)]


# ------------------------------------------------------------------ the tasks


def evaluate_multiple_choice(backbone, tokenizer, examples, train_examples=(), num_shots=0,
                             seed=0, separator="\n\n", batch_size=8, sequence_length=None,
                             jit_compile=True, unconditional_context=None):
    """Accuracy of picking the most likely choice, by summed and per-token log-likelihood.

    Context and choices are tokenized separately (a choice carries its own
    leading space, e.g. " Paris", as byte-level BPE expects).

    `unconditional_context` (e.g. "Answer:" or "A:") adds GPT-3's third rule
    for ARC, OpenBookQA and RACE (Brown et al. 2020, Sec. 2.4): pick the choice
    maximising P(choice | context) / P(choice | unconditional_context).

    Returns:
        {"accuracy_sum", "accuracy_per_token": fractions correct,
            "num_examples", "log_likelihood": [per-example arrays over choices],
            "num_tokens": [same], "predictions_sum", "predictions_per_token"};
        with `unconditional_context` also "accuracy_unconditional",
        "predictions_unconditional" and "unconditional_log_likelihood".
    """
    examples = list(examples)
    for index, example in enumerate(examples):
        if not 0 <= example.label < len(example.choices):
            raise ValueError(f"Example {index} has label {example.label} but "
                             f"{len(example.choices)} choices.")
    prompts = few_shot_contexts(examples, train_examples, num_shots, seed, separator)
    contexts, continuations, owners = [], [], []
    for index, (prompt, example) in enumerate(zip(prompts, examples)):
        context = _tokenize(tokenizer, prompt)
        for choice in example.choices:
            contexts.append(context)
            continuations.append(_tokenize(tokenizer, choice))
            owners.append(index)
    scores = score_continuations(backbone, contexts, continuations, batch_size,
                                 sequence_length, jit_compile)
    owners = np.array(owners)
    per_example = [np.flatnonzero(owners == i) for i in range(len(examples))]
    sums = [scores["log_likelihood"][rows] for rows in per_example]
    tokens = [scores["num_tokens"][rows] for rows in per_example]
    by_sum = np.array([int(np.argmax(s)) for s in sums])
    by_token = np.array([int(np.argmax(s / n)) for s, n in zip(sums, tokens)])
    labels = np.array([e.label for e in examples])
    result = {"accuracy_sum": float(np.mean(by_sum == labels)),
              "accuracy_per_token": float(np.mean(by_token == labels)),
              "num_examples": len(examples), "log_likelihood": sums, "num_tokens": tokens,
              "predictions_sum": by_sum, "predictions_per_token": by_token}
    if unconditional_context is not None:
        answer_context = _tokenize(tokenizer, unconditional_context)
        unconditional = score_continuations(
            backbone, [answer_context] * len(continuations), continuations, batch_size,
            sequence_length, jit_compile)["log_likelihood"]
        base = [unconditional[rows] for rows in per_example]
        by_ratio = np.array([int(np.argmax(s - b)) for s, b in zip(sums, base)])
        result.update(accuracy_unconditional=float(np.mean(by_ratio == labels)),
                      predictions_unconditional=by_ratio, unconditional_log_likelihood=base)
    return result


def evaluate_completion(backbone, tokenizer, examples, train_examples=(), num_shots=0,
                        seed=0, separator="\n\n", batch_size=8, sequence_length=None,
                        jit_compile=True):
    """Greedy exact-match accuracy and log-likelihood of the target completions.

    Returns:
        {"accuracy": fraction whose every target token is the argmax,
            "log_likelihood": mean over examples of the summed log-probability,
            "mean_log_likelihood": per target token, over all tokens,
            "num_examples", "scores": score_continuations' arrays}.
    """
    examples = list(examples)
    prompts = few_shot_contexts(examples, train_examples, num_shots, seed, separator)
    scores = score_continuations(
        backbone, [_tokenize(tokenizer, p) for p in prompts],
        [_tokenize(tokenizer, e.completion) for e in examples], batch_size,
        sequence_length, jit_compile)
    return {"accuracy": float(np.mean(scores["is_greedy"])),
            "log_likelihood": float(np.mean(scores["log_likelihood"])),
            "mean_log_likelihood": float(scores["log_likelihood"].sum()
                                         / scores["num_tokens"].sum()),
            "num_examples": len(examples), "scores": scores}

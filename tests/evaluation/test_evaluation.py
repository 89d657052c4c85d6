"""In-context evaluation: the scorer against a token-by-token numpy computation."""

import re

import numpy as np
import pytest

from keras_ctx.evaluation import (
    CompletionExample,
    MultipleChoiceExample,
    evaluate_completion,
    evaluate_multiple_choice,
    few_shot_contexts,
    score_continuations,
)
from keras_ctx.models.gpt.backbone import GPTBackbone
from tests.evaluation_cases import SHAPES, SIZES, by_hand, numpy_model



@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_scores_equal_token_by_token_numpy(kind):
    backbone, log_probs = numpy_model(kind)
    contexts = [[3, 7, 1, 4, 9, 2], [5], [8, 8, 2, 6, 1, 0, 11, 12, 13]]
    continuations = [[12, 4, 4], [7, 19], [2]]
    got = score_continuations(backbone, contexts, continuations, batch_size=2)
    for i, (context, continuation) in enumerate(zip(contexts, continuations)):
        total, greedy = by_hand(log_probs, context, continuation)
        np.testing.assert_allclose(got["log_likelihood"][i], total, atol=1e-4)
        np.testing.assert_allclose(got["mean_log_likelihood"][i], total / len(continuation),
                                   atol=1e-4)
        assert got["is_greedy"][i] == greedy
    assert got["num_tokens"].tolist() == [3, 2, 1]


def test_greedy_flag_and_left_truncation():
    backbone, log_probs = numpy_model("gpt_neo")
    context = [1, 2, 3]
    greedy = []
    for _ in range(3):  # the numpy model's own greedy continuation
        greedy.append(int(np.argmax(log_probs(context + greedy))))
    other = [(greedy[0] + 1) % 30] + greedy[1:]
    got = score_continuations(backbone, [context, context], [greedy, other], batch_size=4)
    assert got["is_greedy"].tolist() == [True, False]
    # A 14-token context with sequence_length 8: the row keeps its last 9 tokens.
    long_context = list(range(1, 15))
    got = score_continuations(backbone, [long_context], [[4, 5]], sequence_length=8)
    total, _ = by_hand(log_probs, long_context[-7:], [4, 5])
    np.testing.assert_allclose(got["log_likelihood"][0], total, atol=1e-4)


def test_bad_requests_fail_clearly():
    backbone = GPTBackbone(**SIZES)
    with pytest.raises(ValueError, match="context 0 is empty"):
        score_continuations(backbone, [[]], [[1]])
    with pytest.raises(ValueError, match=r"outside \[0, 30\)"):
        score_continuations(backbone, [[1]], [[30]])
    with pytest.raises(ValueError, match="max_sequence_length"):
        score_continuations(backbone, [[1]], [[2]], sequence_length=32)
    with pytest.raises(ValueError, match="at most 4 fit"):
        score_continuations(backbone, [[1]], [[2] * 5], sequence_length=4)


TRAIN = [CompletionExample(f"q{i} =", f" a{i}") for i in range(6)]


def test_few_shot_prompts_are_seeded_and_never_show_the_answer():
    examples = TRAIN[:2]
    zero = few_shot_contexts(examples, TRAIN, num_shots=0)
    assert zero == ["q0 =", "q1 ="]
    three = few_shot_contexts(examples, TRAIN, num_shots=3, seed=7)
    assert three == few_shot_contexts(examples, TRAIN, num_shots=3, seed=7)
    assert three != few_shot_contexts(examples, TRAIN, num_shots=3, seed=8)
    for prompt, example in zip(three, examples):
        parts = prompt.split("\n\n")
        assert len(parts) == 4 and parts[-1] == example.context
        assert example.context + example.completion not in parts[:-1]  # not itself
        assert len(set(parts[:-1])) == 3 and all(p in {e.context + e.completion for e in TRAIN}
                                                 for p in parts[:-1])
    with pytest.raises(ValueError, match="only 5 training examples"):
        few_shot_contexts(examples, TRAIN, num_shots=6)


class WordTokenizer:
    """Whitespace-separated words -> ids of a fixed vocabulary."""

    def __init__(self, words):
        self.index = {w: i for i, w in enumerate(words)}

    def __call__(self, text):
        return [self.index[w] for w in re.findall(r"\S+", text)]


def test_multiple_choice_and_completion_tasks_pick_by_numpy_likelihoods():
    backbone, log_probs = numpy_model("gpt2")
    words = ["<eot>", "q0", "q1", "q2", "q3", "=", "a0", "a1", "a2", "a3", "x", "yy"]
    tokenizer = WordTokenizer(words)
    train = [MultipleChoiceExample(f"q{i} =", [f" a{i}", " x"], label=0) for i in range(4)]
    tests = [MultipleChoiceExample("q1 =", [" a1", " x yy", " a3"], label=2),
             MultipleChoiceExample("q2 =", [" x", " a2"], label=1)]
    result = evaluate_multiple_choice(backbone, tokenizer, tests, train, num_shots=2, seed=1,
                                      unconditional_context="<eot> =")
    prompts = few_shot_contexts(tests, train, num_shots=2, seed=1)
    correct_sum = correct_token = correct_ratio = 0
    for i, (example, prompt, sums) in enumerate(zip(tests, prompts, result["log_likelihood"])):
        context = tokenizer(prompt)
        want = [by_hand(log_probs, context, tokenizer(c))[0] for c in example.choices]
        np.testing.assert_allclose(sums, want, atol=1e-4)
        lengths = [len(tokenizer(c)) for c in example.choices]
        correct_sum += int(np.argmax(want)) == example.label
        correct_token += int(np.argmax(np.array(want) / lengths)) == example.label
        # GPT-3's P(choice | context) / P(choice | "Answer:")-style rule.
        base = [by_hand(log_probs, tokenizer("<eot> ="), tokenizer(c))[0]
                for c in example.choices]
        np.testing.assert_allclose(result["unconditional_log_likelihood"][i], base, atol=1e-4)
        ratio = int(np.argmax(np.array(want) - base))
        assert ratio == result["predictions_unconditional"][i]
        correct_ratio += ratio == example.label
    assert result["accuracy_sum"] == correct_sum / 2
    assert result["accuracy_per_token"] == correct_token / 2
    assert result["accuracy_unconditional"] == correct_ratio / 2

    completions = [CompletionExample("q3 =", " a3 x")]
    done = evaluate_completion(backbone, tokenizer, completions, [], num_shots=0)
    total, greedy = by_hand(log_probs, tokenizer("q3 ="), tokenizer(" a3 x"))
    np.testing.assert_allclose(done["log_likelihood"], total, atol=1e-4)
    assert done["accuracy"] == float(greedy)


def test_converted_checkpoint_scores_like_the_original(tmp_path):
    """A GPT-Neo written as a Hugging Face checkpoint and read back scores the same."""
    from keras_ctx.convert import from_huggingface, to_huggingface

    backbone, _ = numpy_model("gpt_neo")
    converted = from_huggingface(to_huggingface(backbone, tmp_path / "neo"))
    pairs = ([[3, 7, 1, 4, 9, 2, 5, 5]], [[12, 4]])
    np.testing.assert_array_equal(score_continuations(converted, *pairs)["log_likelihood"],
                                  score_continuations(backbone, *pairs)["log_likelihood"])


@pytest.mark.tensorflow_only("starts the other backend in a subprocess (TensorFlow blocked "
                             "there), once, from TensorFlow's run")
@pytest.mark.parametrize("backend", ("jax", "torch"))
def test_scores_without_tensorflow_equal_numpy(backend, tmp_path):
    """The scorer is keras.ops, compiled by the backend switch (it was tf.function and
    tf ops only): on JAX and torch, TensorFlow unimportable, it gives the numpy scores."""
    import json

    from tests.backends import run_on_backend

    run_on_backend(backend, "evaluation_scores", {"out": str(tmp_path / "errors.json")},
                   without_tensorflow=True)
    errors = json.loads((tmp_path / "errors.json").read_text())
    assert len(errors) == 8 and max(errors.values()) < 1e-4, errors

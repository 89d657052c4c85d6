"""The numeric arguments of the task models and transfer recipes: a value that makes no
sense (NaN, inf, 0 or a negative where it must be positive, a rate outside its range, a
float where an integer is meant) is refused naming the argument, and 0 is never taken as
"not given" (issue 53)."""

import math

import pytest

from keras_ctx.common.errors import ConfigError
from keras_ctx.tasks import transfer, ulmfit
from keras_ctx.pretraining import GPTFineTuner
from keras_ctx.tasks.heads import SequenceClassifier, TokenClassifier

from tests.tasks import text_fixtures

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def bert():
    return text_fixtures.backbone("bert")


@pytest.mark.parametrize("task, arguments, message", [
    # dropout 1.0 was taken and switched dropout off (keras_ctx's Dropout skips rate >= 1)
    (SequenceClassifier, dict(num_classes=2, dropout=1.0), "`dropout` must be a number in [0, 1)"),
    (SequenceClassifier, dict(num_classes=2, dropout=NAN), "`dropout` must be a number in [0, 1)"),
    (SequenceClassifier, dict(num_classes=2.0), "`num_classes` must be a positive integer"),
    (TokenClassifier, dict(num_labels=3, dropout=-0.1), "`dropout` must be a number in [0, 1)"),
    (TokenClassifier, dict(num_labels=True), "`num_labels` must be a positive integer"),
])
def test_task_heads_refuse_sizes_and_rates_that_make_no_sense(bert, task, arguments, message):
    with pytest.raises(ConfigError) as error:
        task(bert, **arguments)
    assert message in str(error.value)


@pytest.mark.parametrize("arguments, message", [
    (dict(num_classes=2, lm_weight=NAN), "`lm_weight` must be a finite number >= 0"),
    (dict(num_classes=2, lm_weight=-0.5), "`lm_weight` must be a finite number >= 0"),
    (dict(num_classes=2, dropout=1.0), "`dropout` must be a number in [0, 1)"),
    (dict(num_classes=1), "`num_classes` must be an integer >= 2"),
])
def test_the_gpt_finetuner_refuses_weights_and_rates_that_make_no_sense(arguments, message):
    gpt = text_fixtures.backbone("gpt2")
    with pytest.raises(ConfigError) as error:
        GPTFineTuner(gpt, **arguments)
    assert message in str(error.value)


@pytest.mark.parametrize("call, message", [
    (lambda: transfer.discriminative_multipliers(3, factor=NAN), "`factor` must be a positive"),
    (lambda: transfer.discriminative_multipliers(3, factor=0), "`factor` must be a positive"),
    (lambda: transfer.discriminative_multipliers(0), "`num_groups` must be a positive"),
    (lambda: transfer.layer_wise_decay_multipliers(2, decay=NAN), "`decay` must be a number in"),
    (lambda: transfer.layer_wise_decay_multipliers(2, decay=1.5), "`decay` must be a number in"),
    (lambda: transfer.layer_wise_decay_multipliers(2, decay=0.0), "`decay` must be a number in"),
    (lambda: transfer.GradualUnfreezing([[1]], epochs_per_group=0), "`epochs_per_group`"),
    # 0 epochs ran the default (one per layer group) instead of being refused
    (lambda: ulmfit.fine_tune_classifier(None, None, 2, epochs=0), "`epochs` must be a positive"),
    (lambda: ulmfit.fine_tune_language_model(None, None, learning_rate=NAN),
     "`learning_rate` must be a positive finite number"),
    (lambda: ulmfit.pretrain_language_model(None, None, epochs=2.5), "`epochs` must be a pos"),
])
def test_the_transfer_recipes_refuse_numbers_that_make_no_sense(call, message):
    with pytest.raises(ConfigError) as error:
        call()
    assert message in str(error.value)


def test_layer_learning_rates_refuse_an_infinite_multiplier(bert):
    import keras

    groups = transfer.layer_groups(bert)
    multipliers = [1.0] * (len(groups) - 1) + [INF]
    with pytest.raises(ConfigError, match="`learning-rate multiplier` must be a positive"):
        transfer.with_layer_learning_rates(keras.optimizers.Adam(1e-3), groups, multipliers)
    assert math.isinf(multipliers[-1])


def test_text_tasks_refuse_a_zero_length_instead_of_taking_the_default(bert):
    from keras_ctx.tasks.text import TextClassifier

    tokenizer = text_fixtures.tokenizer("bert")
    for length, message in ((0, "got 0"), (7.5, "got 7.5")):
        with pytest.raises(ConfigError, match=f"`sequence_length` must be a positive "
                                              f"integer, {message}"):
            TextClassifier(bert, tokenizer, num_classes=2, sequence_length=length)
    task = TextClassifier(bert, tokenizer, num_classes=2, sequence_length=12)
    assert task.max_length() == 12 and task.max_length(5) == 5
    with pytest.raises(ConfigError, match="`max_length` must be a positive integer, got 0"):
        task.max_length(0)  # 0 meant "the task's sequence_length"


@pytest.mark.parametrize("tokens", [0, 2.5, NAN])
def test_question_answering_refuses_an_answer_length_that_makes_no_sense(bert, tokens):
    from keras_ctx.tasks.text import QuestionAnswerer

    with pytest.raises(ConfigError, match="`max_answer_tokens` must be a positive integer"):
        QuestionAnswerer(bert, text_fixtures.tokenizer("bert"), sequence_length=16,
                     max_answer_tokens=tokens)


@pytest.mark.parametrize("size", [0, -4, 2.5, NAN, True])
def test_text_tasks_refuse_a_batch_size_that_makes_no_sense(bert, size):
    """A batch size of 0 reached tf.data ('batch_size must be greater than zero', TensorFlow's
    InvalidArgumentError); 2.5 and True were batched as 2 and 1."""
    from keras_ctx.tasks.text import QuestionAnswerer, TextClassifier, WordClassifier

    tokenizer = text_fixtures.tokenizer("bert")
    classifier = TextClassifier(bert, tokenizer, num_classes=2, sequence_length=12)
    tagger = WordClassifier(bert, tokenizer, labels=3, sequence_length=12)
    reader = QuestionAnswerer(bert, tokenizer, sequence_length=16)
    for call in (lambda: classifier.fit(["a b"], [1], batch_size=size),
                 lambda: classifier.evaluate(["a b"], [1], batch_size=size),
                 lambda: classifier.predict(["a b"], batch_size=size),
                 lambda: tagger.predict([["a", "b"]], batch_size=size),
                 lambda: reader.predict([("a?", "b c")], batch_size=size)):
        with pytest.raises(ConfigError, match="`batch_size` must be a positive integer"):
            call()

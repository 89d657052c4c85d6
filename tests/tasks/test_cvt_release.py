"""CVT as tensorflow/models research/cvt_text releases it (Clark et al. 2018; issue 54).

(1) cvt_text wraps each sentence in `<start>` ... `<end>` (corpus_processing/example.py's
Example; ids 2 and 3, base/embeddings.py's SPECIAL_TOKENS), which its BiLSTMs read and
no loss weighs (minibatching.py's mask 0 on them; model_helpers.py's masked_ce_loss,
rolled for the future and past modules). The transcription in
tests/data/cvt_minibatching_reference.py is the ground truth here.
"""

import json

import keras
import numpy as np
import pytest

from keras_ctx.data.cvt import WordVocabulary
from keras_ctx.models.cvt import AUXILIARY_VIEWS, CvtEncoder
from keras_ctx.pretraining.cvt import CrossViewTrainer
from keras_ctx.tasks.cvt_tagger import tagging_inputs
from tests.backends import slow_on
from tests.data import cvt_minibatching_reference as reference
from tests.execution import FEW_STEPS

SENTENCES = [["The", "river", "bank", "opened", "in", "1999", "."], ["Bank", "of", "the"],
             ["river", "don", "'t"]]
WORDS = ["the", "river", "bank", "opened", "in", "0000", ".", "of", "do", "n't"]


def _small_trainer(words, boundaries, tags=3, seed=0):
    keras.utils.set_random_seed(seed)
    encoder = CvtEncoder(len(words) + (4 if boundaries else 2), embedding_size=6,
                         first_layer_size=6, second_layer_size=5, projection_size=6,
                         filters=[[2, 3]], character_embedding_size=3, dropout=0.0,
                         lstm_implementation="loop")
    return CrossViewTrainer(encoder, tags, hidden_size=6, unlabelled_dropout=0.0,
                            sentence_boundaries=boundaries)


def test_rows_begin_with_start_and_end_with_end_as_cvt_text_s_examples():
    from keras_ctx.data.characters import tokens_to_character_ids

    vocabulary = WordVocabulary(WORDS, sentence_boundaries=True)
    x = tagging_inputs(SENTENCES, vocabulary, 7)
    assert x["token_ids"].shape == (3, 9)  # 7 words + <start> + <end>
    theirs = reference.word_vocabulary(WORDS)
    spelled = {i: w for w, i in theirs.items()}
    ours_spelled = {i + 4: w for i, w in enumerate(WORDS)}
    ours_spelled.update({1: "<unk>", 2: "<start>", 3: "<end>"})
    for row, words in enumerate(SENTENCES):
        example = reference.Example(words, theirs, reference.get_char_vocab())
        # cvt_text's LSTMs read len(example.words) positions: ours are the real ones.
        assert x["padding_mask"][row].sum() == len(example.words) == len(words) + 2
        ids = x["token_ids"][row, :len(example.words)]
        assert [ours_spelled[i] for i in ids] == [spelled[i] for i in example.words]
        assert example.words[0] == reference.START == ids[0] == vocabulary.START_ID
        assert example.words[-1] == reference.END == ids[-1] == vocabulary.END_ID
    # <start>/<end> spelled as ELMo's sentence boundaries (cvt_text: its own characters).
    boundaries = np.asarray(tokens_to_character_ids(np.array(["<S>", "</S>"])))
    np.testing.assert_array_equal(x["character_ids"][2, [0, 4]], boundaries)


@slow_on("jax")  # 8 s there (eager JAX compiles each op), < 5 s elsewhere
def test_the_tagger_trains_on_rows_with_start_and_end_and_labels_of_the_words(
        tmp_path, monkeypatch):
    from keras_ctx.tasks.cvt_tagger import train_cvt_tagger

    (tmp_path / "u.txt").write_text("the river bank\nbank of the river opened\n" * 4,
                                    encoding="utf-8")
    (tmp_path / "t.tsv").write_text("the\tA\nbank\tB\n\nriver\tA\nbank\tB\nof\tC\n",
                                    encoding="utf-8")
    seen = {}
    monkeypatch.setattr(CrossViewTrainer, "fit", lambda self, data, **_: seen.update(data=data))
    small = {"embedding_size": 4, "first_layer_size": 4, "second_layer_size": 4,
             "projection_size": 4, "filters": [[2, 2]], "character_embedding_size": 2}
    trainer, vocabulary, _ = train_cvt_tagger(str(tmp_path / "t.tsv"), str(tmp_path / "u.txt"),
                                              steps=1, batch_size=2, encoder_config=small)
    assert trainer.sentence_boundaries and vocabulary.sentence_boundaries
    assert trainer.encoder.vocabulary_size == len(vocabulary) + 4 == 5 + 4
    for element in seen["data"].take(4).as_numpy_iterator():
        (x, labels), = element["labelled"].values()
        for inputs in (x, element["unlabelled"]["tags"]):
            length = inputs["padding_mask"].sum(axis=1)
            assert (inputs["token_ids"][:, 0] == 2).all()
            assert (inputs["token_ids"][np.arange(len(length)), length - 1] == 3).all()
        assert labels.shape[1] == x["token_ids"].shape[1] - 2  # aligned to the words
        # Before: rows of the words alone, 'the' at position 0.
        assert set(labels[x["padding_mask"][:, 2:] == 1]) <= {0, 1, 2}


def _module_logits_numpy(module, features):
    """U act(W h + b) + c of a `PredictionModule`, in numpy."""
    hidden = features @ keras.ops.convert_to_numpy(module.hidden.kernel) + \
        keras.ops.convert_to_numpy(module.hidden.bias)
    if module.activate:
        hidden = np.maximum(hidden, 0)
    return hidden @ keras.ops.convert_to_numpy(module.output_layer.kernel) + \
        keras.ops.convert_to_numpy(module.output_layer.bias)


def _log_probabilities(logits):
    logits = logits - logits.max(-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


@slow_on("jax")  # 18 s there (eager JAX compiles each op), < 5 s elsewhere
def test_predictions_and_losses_skip_start_and_end_as_cvt_text_s_masks():
    trainer = _small_trainer(WORDS, boundaries=True)
    vocabulary = WordVocabulary(WORDS, sentence_boundaries=True)
    x = tagging_inputs(SENTENCES, vocabulary, 7)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, (3, 7)).astype("int32")
    for module in trainer.primary + trainer.auxiliary[0]:  # losses far from 0 (float32)
        kernel = module.output_layer.kernel
        kernel.assign(rng.normal(0, 3, kernel.shape).astype("float32"))
    features = {k: keras.ops.convert_to_numpy(v) for k, v in trainer.encoder(x).items()
                if k != "hidden_states"}
    # cvt_text's coordinates: <start> w_1 .. w_n <end>, mask 0 on the boundaries and padding.
    lengths = x["padding_mask"].sum(axis=1)
    mask = reference.build_array([[0] + [1] * (n - 2) + [0] + [0] * (9 - n) for n in lengths])
    primary = _module_logits_numpy(trainer.primary[0], features["sequence_output"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(trainer.primary_logits(x)),
                               primary[:, 1:-1], rtol=1e-5, atol=1e-6)
    # The supervised loss: labels [0] + y + [0] (tagging_module.py), weighed by the mask.
    wrapped = np.pad(labels, ((0, 0), (1, 1)))
    nll = -np.take_along_axis(_log_probabilities(primary), wrapped[..., None], -1)[..., 0]
    got = trainer.supervised_losses(x, labels, "tags", training=False)["supervised"]
    assert float(got) == pytest.approx((mask * nll).sum() / mask.sum(), rel=1e-5)
    # The consistency loss: each module at every position against the teacher, the
    # future and past ones at t against the teacher at t + 1 / t - 1 (masked_ce_loss's
    # roll), as KL (cross-entropy less the teacher's entropy, the same gradients).
    teacher = np.exp(_log_probabilities(primary))
    inputs = {"full": features["sequence_output"], "forward": features["forward_states"],
              "backward": features["backward_states"], "future": features["forward_states"],
              "past": features["backward_states"]}
    want = 0.0
    for view, module in zip(AUXILIARY_VIEWS, trainer.auxiliary[0]):
        direction = {"future": 1, "past": -1}.get(view, 0)
        target = reference._roll(teacher, direction)
        weights = reference.loss_weights(mask, direction)
        kl = (target * (np.log(np.maximum(target, 1e-20))
                        - _log_probabilities(_module_logits_numpy(module, inputs[view])))).sum(-1)
        want += (weights * kl).sum() / weights.sum()
    assert float(trainer.cvt_losses(x)["cvt"]) == pytest.approx(want, rel=1e-4)
    # Rows of the words alone are refused in one line, not read with the words shifted.
    plain = tagging_inputs(SENTENCES, WORDS, 7)
    with pytest.raises(ValueError, match="Labels of 7 words need inputs 9 wide"):
        trainer.supervised_losses(plain, labels, "tags", training=False)


def test_a_tagger_saved_before_start_and_end_loads_and_predicts_as_before(tmp_path):
    from keras_ctx.tasks.cvt_tagger import load_cvt_tagger, save_cvt_tagger

    before = _small_trainer(WORDS, boundaries=False)
    plain = tagging_inputs(SENTENCES, WORDS, 7)
    want = keras.ops.convert_to_numpy(before.primary_logits(plain))
    run = tmp_path / "old"
    save_cvt_tagger(before, WordVocabulary(WORDS), ["A", "B", "C"], str(run))
    record = json.loads((run / "vocabulary.json").read_text())
    del record["sentence_boundaries"]  # as keras-ctx cvt wrote it before
    (run / "vocabulary.json").write_text(json.dumps(record))
    trainer, vocabulary, _ = load_cvt_tagger(str(run))
    assert not trainer.sentence_boundaries and vocabulary.reserved == 2
    x = tagging_inputs(SENTENCES, vocabulary, 7)
    np.testing.assert_array_equal(x["token_ids"], plain["token_ids"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(trainer.primary_logits(x)), want,
                               rtol=1e-5, atol=1e-6)


def test_a_new_tagger_records_start_and_end_and_tags_through_them(tmp_path):
    from keras_ctx.commands.cvt_tag import tag_file
    from keras_ctx.tasks.cvt_tagger import save_cvt_tagger

    after, tags = _small_trainer(WORDS, boundaries=True), ["A", "B", "C"]
    vocabulary = WordVocabulary(WORDS, sentence_boundaries=True)
    run = tmp_path / "new"
    save_cvt_tagger(after, vocabulary, tags, str(run))
    assert json.loads((run / "vocabulary.json").read_text())["sentence_boundaries"] is True
    wrapped = tagging_inputs(SENTENCES, vocabulary, 7)
    best = keras.ops.convert_to_numpy(after.primary_logits(wrapped)).argmax(-1)
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(words) for words in SENTENCES) + "\n", encoding="utf-8")
    assert tag_file(str(run), str(text)) == [
        " ".join(f"{w}/{tags[k]}" for w, k in zip(words, row)) for words, row in
        zip(SENTENCES, best)]
    with pytest.raises(ValueError, match="sentence_boundaries=False but the trainer's is True"):
        save_cvt_tagger(after, WordVocabulary(WORDS), ["A", "B", "C"], str(tmp_path / "x"))


# (2) With several tasks cvt_text's trainer (training/trainer.py @b3817b9, _get_training_mbs)
# draws one labelled task per step, task k with probability sqrt(size_k) / sum sqrt(size),
# then takes one unlabelled minibatch; each is its own update.

def _one_row_batch(rng, width=4):
    ids = rng.integers(4, 9, (2, width + 2)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3
    x = {"token_ids": ids, "padding_mask": np.ones_like(ids),
         "character_ids": rng.integers(1, 262, ids.shape + (50,)).astype("int32")}
    return x, rng.integers(0, 2, (2, width)).astype("int32")


def test_each_step_draws_one_task_by_the_square_root_of_its_size():
    import tensorflow as tf

    from keras_ctx.data.cvt import cvt_dataset

    x, y = {"token_ids": np.ones((2, 3), "int32")}, np.zeros((2, 1), "int32")
    sizes = {"ner": 100, "chunk": 400, "pos": 1600}  # sqrt: 10, 20, 40
    data = cvt_dataset({t: tf.data.Dataset.from_tensors((x, y)) for t in sizes},
                       tf.data.Dataset.from_tensors(x), sizes=sizes, seed=0)
    steps = 3000
    drawn = next(data.take(steps).map(lambda element: element["task"]).batch(steps)
                 .as_numpy_iterator())
    assert drawn.shape == (steps, 2) and (drawn == drawn[:, :1]).all()  # one task a step
    counts = np.bincount(drawn[:, 0], minlength=3)
    expected = steps * np.array([10, 20, 40]) / 70
    sigma = np.sqrt(expected * (1 - np.array([10, 20, 40]) / 70))
    print(counts, expected)
    assert (np.abs(counts - expected) < 3 * sigma).all()
    # Pearson's chi-square, 2 degrees of freedom: 13.8 is its 0.1% tail.
    assert ((counts - expected) ** 2 / expected).sum() < 13.8
    # Before: every task each step (equal shares).
    with pytest.raises(ValueError, match="need sizes="):
        cvt_dataset({t: tf.data.Dataset.from_tensors((x, y)) for t in sizes},
                    tf.data.Dataset.from_tensors(x))


@slow_on("jax")  # 21 s there (eager JAX compiles each op), < 5 s elsewhere
def test_a_step_updates_the_drawn_task_and_then_the_unlabelled_batch():
    encoder = CvtEncoder(10, embedding_size=6, first_layer_size=6, second_layer_size=5,
                         projection_size=6, filters=[[2, 3]], character_embedding_size=3,
                         dropout=0.0, lstm_implementation="loop")
    trainer = CrossViewTrainer(encoder, {"a": 2, "b": 2}, hidden_size=6,
                               sentence_boundaries=True)
    x, y = _one_row_batch(np.random.default_rng(1))
    drawn = {"task": np.array([1, 1], "int32"), "labelled": (x, y), "unlabelled": x}
    want = float(trainer.supervised_losses(x, y, "b", training=True)["supervised"])
    got = float(trainer.compute_losses(trainer.step_batches(drawn)[0], True)["supervised"])
    assert got == pytest.approx(want, rel=1e-5)  # task b's primary module, not a's
    before = [keras.ops.convert_to_numpy(w) for m in trainer.primary for w in m.weights]
    trainer.compile(keras.optimizers.SGD(0.5), **FEW_STEPS)
    trainer.train_on_batch(drawn)
    assert int(trainer.optimizer.iterations) == 2  # L_b then U (before: L_a, U, L_b, U)
    after = [keras.ops.convert_to_numpy(w) for m in trainer.primary for w in m.weights]
    moved = [not np.allclose(b, a) for b, a in zip(before, after)]
    assert moved == [False] * 4 + [True] * 4  # a's kernel, bias x2 unchanged; b's learn

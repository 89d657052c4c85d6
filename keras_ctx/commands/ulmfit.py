"""`keras-ctx ulmfit`: the three ULMFiT stages on files (Howard & Ruder 2018).

The stages themselves are `keras_ctx.tasks.ulmfit`. By default they run twice, a forward
and a backward LM each with its classifier, and the saved classifier averages the two's
probabilities (Sec. 3.3, "Bidirectional language model"; `DirectionEnsemble`).
"""

import keras
import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common.files import json_writer, write_files
from keras_ctx.runs import check_new_directory
from keras_ctx.schedules import SlantedTriangular
from keras_ctx.tasks.ulmfit import fine_tune_classifier, fine_tune_language_model, pretrain_language_model

# `--directions`: which of ULMFiT's two directions to train; "both" is the paper's
# (Howard & Ruder 2018, Sec. 3.3 and Table 7's "bidir").
DIRECTION_CHOICES = {"forward": ("forward",), "backward": ("backward",),
                     "both": ("forward", "backward")}


def _lm_dataset(documents, index, sequence_length, batch_size, seed=0, direction="forward"):
    """Documents' words (`ulmfit_text.ulmfit_words`: each starts with xxbos) as one
    `BpttStream`: fastai's stream of all texts concatenated in order (backward: read from
    its end, `ulmfit_text.lm_stream_ids`), Merity et al.'s `batchify` and variable-length
    BPTT around `sequence_length`."""
    from keras_ctx.data.lm_stream import BpttStream
    from keras_ctx.data.ulmfit_text import lm_stream_ids

    stream = np.array(lm_stream_ids(documents, index, direction), "int32")
    if len(stream) // batch_size < sequence_length:
        raise ValueError(f"The text has {len(stream)} words: fewer than one batch of "
                         f"{batch_size} x {sequence_length}; lower --batch-size.")
    return BpttStream(stream, batch_size, bptt=sequence_length, seed=seed)


def _classifier_data(texts, labels, index, direction, batch_size, seed):
    """The labelled texts' ids in `direction`'s reading order, right-padded, batched."""
    from keras_ctx.data.ulmfit_text import directed, ulmfit_ids

    rows = [ulmfit_ids(directed(t, direction), index) for t in texts]
    ids = np.zeros((len(rows), max(len(r) for r in rows)), "int32")
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    return tf.data.Dataset.from_tensor_slices(
        ({"token_ids": ids, "padding_mask": (ids > 0).astype("int32")}, labels)).shuffle(
        len(labels), seed=seed).batch(batch_size)


def _stages_line(directions, general):
    stages = ("general-domain LM on --general-text, " if general else "") + (
        "target LM fine-tuning on --text, classifier on --train")
    line = (f"ULMFiT's stages (Howard & Ruder 2018, Sec. 3), {' then '.join(directions)}: "
            f"{stages}")
    if not general:
        line += "; the general-domain LM is not run (no --general-text)"
    if len(directions) == 2:
        return line + "; the saved classifier averages the two's probabilities (Sec. 3.3)."
    return line + (f"; only the {directions[0]} direction (--directions {directions[0]}; "
                   "the paper's default is both, Sec. 3.3).")


def _lines(path):
    """The file's non-blank lines, each a document, without its line end (fastai's
    rules would read a kept newline as a word)."""
    from keras_ctx.common.files import naming_decode_errors

    with naming_decode_errors(path), open(path, encoding="utf-8") as handle:
        return [line.rstrip("\r\n") for line in handle if line.strip()]


def ulmfit_from_files(train, text, out, general_text=None, lm_epochs=1, epochs=None, batch_size=64,
           sequence_length=70, vocabulary_size=60000, seed=0, overrides=None, directions="both"):
    """`keras-ctx ulmfit`: the three ULMFiT stages into the new directory `out`.

    Stage 1 (general-domain LM) runs on `general_text` when given; stage 2
    fine-tunes the LM on the target `text` (one document per line); stage 3
    fine-tunes the classifier on `train` (text<TAB>label) with gradual
    unfreezing, discriminative rates and STLR (Howard & Ruder 2018). `directions`
    "both" (the paper's, Sec. 3.3) runs them for a forward and a backward LM, each
    from the same seed, and saves their `DirectionEnsemble`; "forward" saves the
    forward `ConcatPoolClassifier` alone, "backward" the backward one in an ensemble
    of one (it reads each text reversed).
    """
    from keras_ctx.common import validation
    from keras_ctx.data.labelled import read_labelled_tsv
    from keras_ctx.data.ulmfit_text import (
        PADDING_ID, UNKNOWN_ID, ulmfit_vocabulary, ulmfit_words)
    from keras_ctx.models.awd_lstm.backbone import AwdLstmBackbone
    from keras_ctx.tasks.direction_ensemble import DirectionEnsemble

    overrides = dict(overrides or {})
    validation.check_args(epochs=epochs, lm_epochs=lm_epochs, batch_size=batch_size,
                          sequence_length=sequence_length, vocabulary_size=vocabulary_size,
                          seed=seed)
    validation.check_given(train=train, text=text, out=out, general_text=general_text)
    directions = DIRECTION_CHOICES[validation.one_of("directions", directions,
                                                     DIRECTION_CHOICES)]
    validation.check_set("ulmfit's AwdLstmBackbone", AwdLstmBackbone, overrides)
    check_new_directory(out)
    from keras_ctx.common.files import naming_decode_errors

    with naming_decode_errors(train):
        texts, labels = read_labelled_tsv(train)
    target = _lines(text)
    general = _lines(general_text) if general_text else None
    # STLR needs T * cut_frac >= 1: check the classifier's T before any training.
    layers = overrides.get("num_layers", 3)  # AwdLstmBackbone's default
    epochs = epochs or layers + 2  # groups: embeddings, each LSTM, the head
    SlantedTriangular(1.0, epochs * -(-len(texts) // batch_size))
    classes = sorted(set(labels))
    y = np.array([classes.index(label) for label in labels], "int32")
    # fastai's words and vocabulary (keras_ctx.data.ulmfit_text): xxbos, xxmaj, xxup, ...
    general, target, texts = ([ulmfit_words(t) for t in part] for part in (general or [],
                                                                          target, texts))
    vocabulary = ulmfit_vocabulary(general + target + texts, vocabulary_size)
    index = {w: i for i, w in enumerate(vocabulary)}
    print(_stages_line(directions, bool(general)), flush=True)
    classifiers = []
    for direction in directions:
        keras.utils.set_random_seed(seed)  # each direction as it would train alone
        lm = backbone = AwdLstmBackbone(len(vocabulary), **overrides)
        if general:
            print(f"{direction}: stage 1, the general-domain LM", flush=True)
            lm = pretrain_language_model(
                backbone, _lm_dataset(general, index, sequence_length, batch_size, seed,
                                      direction), epochs=lm_epochs, verbose=2)
        print(f"{direction}: stage 2, target LM fine-tuning", flush=True)
        lm = fine_tune_language_model(
            lm, _lm_dataset(target, index, sequence_length, batch_size, seed, direction),
            epochs=lm_epochs, verbose=2)
        print(f"{direction}: stage 3, the classifier (gradual unfreezing)", flush=True)
        classifier, _ = fine_tune_classifier(
            lm.backbone, _classifier_data(texts, y, index, direction, batch_size, seed),
            len(classes), epochs=epochs, verbose=2)
        classifiers.append(classifier)
    if directions != ("forward",):
        classifier = DirectionEnsemble(classifiers, directions, name="ulmfit_directions")
    write_files(out, {
        "classifier.keras": classifier.save,
        "vocabulary.json": json_writer({"words": vocabulary, "padding_id": PADDING_ID,
                                         "unknown_id": UNKNOWN_ID, "classes": classes,
                                         "directions": list(directions)}),
    })
    print(f"Saved the ULMFiT classifier ({len(classes)} classes, "
          f"{' and '.join(directions)}) to {out}.")
    return classifier

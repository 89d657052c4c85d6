"""ULMFiT's three stages and CVT tagging as Python functions (the CLI calls these).

ULMFiT (Howard & Ruder 2018, Sec. 3):
    1. `pretrain_language_model`: the AWD-LSTM LM on general-domain text;
    2. `fine_tune_language_model`: the same LM on the target task's text, with
       discriminative rates and STLR;
    3. `fine_tune_classifier`: concat pooling + two linear blocks, with
       discriminative rates, STLR and gradual unfreezing.
Hyperparameters from Sec. 4: Adam with beta_1 = 0.7, beta_2 = 0.99; base
learning rates 0.004 (LM fine-tuning) and 0.01 (classifier); cut_frac 0.1,
ratio 32; eta^(l-1) = eta^l / 2.6.

CVT (Clark et al. 2018): `train_cvt_tagger` reads a CoNLL-style TSV of tagged
sentences and a file of unlabelled sentences and trains `CrossViewTrainer`.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_ctx.tasks.transfer import (
    ConcatPoolClassifier,
    GradualUnfreezing,
    SlantedTriangular,
    discriminative_multipliers,
    layer_groups,
    with_layer_learning_rates,
)

# Howard & Ruder 2018, Sec. 4.
ULMFIT_ADAM = dict(beta_1=0.7, beta_2=0.99)
LM_FINE_TUNING_RATE = 0.004
CLASSIFIER_RATE = 0.01


def _steps(dataset, steps_per_epoch):
    if steps_per_epoch is not None:
        return steps_per_epoch
    if _is_stream(dataset):  # every epoch has its steps_per_epoch segments
        return dataset.expected_steps()
    count = int(dataset.cardinality())
    if count < 0:
        raise ValueError("The dataset's length is unknown (or infinite): pass steps_per_epoch.")
    return count


def _ulmfit_optimizer(model, backbone, learning_rate, total_steps):
    groups = layer_groups(model, backbone)
    adam = keras.optimizers.Adam(SlantedTriangular(learning_rate, total_steps), **ULMFIT_ADAM)
    return with_layer_learning_rates(adam, groups, discriminative_multipliers(len(groups))), \
        groups


def _language_model(lm_or_backbone, stream_batch_size):
    """An `AwdLstmLMPretrainer` on the backbone that carries its LSTM states over
    batches of `stream_batch_size` rows (None: a fresh state per batch); a given
    pretrainer's output bias is kept."""
    from keras_ctx.pretraining.awd_lstm import AwdLstmLMPretrainer

    lm = lm_or_backbone
    carry = stream_batch_size is not None
    if isinstance(lm, AwdLstmLMPretrainer):
        if lm.carry_state == carry and (not carry or lm.batch_size == stream_batch_size):
            return lm
        bias = lm.output_bias
        lm = AwdLstmLMPretrainer(lm.backbone, batch_size=stream_batch_size,
                                 carry_state=carry)
        lm.output_bias.assign(bias)
        return lm
    return AwdLstmLMPretrainer(lm, batch_size=stream_batch_size, carry_state=carry)


def _is_stream(dataset):
    from keras_ctx.data.lm_stream import BpttStream

    return isinstance(dataset, BpttStream)


def _stream_batch_size(dataset, stream_batch_size):
    """A `BpttStream` carries the state over its own batch size."""
    if _is_stream(dataset):
        if stream_batch_size not in (None, dataset.batch_size):
            raise ValueError(f"stream_batch_size={stream_batch_size} but the BpttStream "
                             f"has batch_size={dataset.batch_size}: leave it out.")
        return dataset.batch_size
    return stream_batch_size


def _fit_language_model(lm, dataset, epochs, steps_per_epoch, fit_kwargs):
    from keras_ctx.pretraining.awd_lstm import StateReset

    if _is_stream(dataset):
        dataset = dataset.dataset()  # each epoch draws its own lengths, always K of them
    callbacks = list(fit_kwargs.pop("callbacks", None) or [])
    if lm.carry_state:
        callbacks.append(StateReset())  # each epoch reads the stream from its start
    lm.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
           **fit_kwargs)


def pretrain_language_model(backbone, dataset, epochs=1, learning_rate=1e-3,
                            steps_per_epoch=None, stream_batch_size=None, **fit_kwargs):
    """Stage 1: the general-domain LM (Adam; AWD-LSTM's AR/TAR and dropouts).

    Args:
        backbone: an `AwdLstmBackbone`.
        dataset: a `keras_ctx.data.lm_stream.BpttStream` (Merity et al.'s
            training: the LSTM states carried from batch to batch,
            variable-length BPTT with the learning rate rescaled per batch),
            or a dataset of {"token_ids", "padding_mask"} batches.
        stream_batch_size: for a dataset (not a BpttStream) that is a
            continuous stream (row i of batch k + 1 continues row i of batch
            k) of this fixed batch size: carry the LSTM states from batch to
            batch. None: zero states per batch.

    Returns:
        The `AwdLstmLMPretrainer` (its backbone is `backbone`, trained).
    """
    lm = _language_model(backbone, _stream_batch_size(dataset, stream_batch_size))
    lm.compile(keras.optimizers.Adam(learning_rate, **ULMFIT_ADAM))
    _fit_language_model(lm, dataset, epochs, steps_per_epoch, fit_kwargs)
    return lm


def fine_tune_language_model(lm_or_backbone, dataset, epochs=1,
                             learning_rate=LM_FINE_TUNING_RATE, steps_per_epoch=None,
                             stream_batch_size=None, **fit_kwargs):
    """Stage 2: target-task LM fine-tuning with discriminative rates and STLR (Sec. 3.2).

    Args:
        lm_or_backbone: the stage-1 `AwdLstmLMPretrainer` (keeps its output
            bias) or a bare backbone.
        dataset: the target task's text, as for `pretrain_language_model`.
        stream_batch_size: as for `pretrain_language_model`.

    Returns:
        The fine-tuned `AwdLstmLMPretrainer`.
    """
    lm = _language_model(lm_or_backbone, _stream_batch_size(dataset, stream_batch_size))
    total = epochs * _steps(dataset, steps_per_epoch)
    optimizer, _ = _ulmfit_optimizer(lm, lm.backbone, learning_rate, total)
    lm.compile(optimizer)
    _fit_language_model(lm, dataset, epochs, steps_per_epoch, fit_kwargs)
    return lm


def fine_tune_classifier(backbone, dataset, num_classes, epochs=None,
                         learning_rate=CLASSIFIER_RATE, steps_per_epoch=None,
                         gradual_unfreezing=True, validation_data=None, **fit_kwargs):
    """Stage 3: the classifier, with discriminative rates, STLR and gradual unfreezing.

    Args:
        backbone: the fine-tuned LM's backbone.
        dataset: batches of ({"token_ids", "padding_mask"}, label).
        num_classes: labels.
        epochs: default: one per layer group (the last epoch trains everything).
        gradual_unfreezing: unfreeze from the top, one group per epoch (Sec. 3.3).

    Returns:
        (the `ConcatPoolClassifier`, its History).
    """
    classifier = ConcatPoolClassifier(backbone, num_classes)
    groups = layer_groups(classifier)
    epochs = epochs or len(groups)
    total = epochs * _steps(dataset, steps_per_epoch)
    optimizer, groups = _ulmfit_optimizer(classifier, backbone, learning_rate, total)
    classifier.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"])
    callbacks = list(fit_kwargs.pop("callbacks", []))
    if gradual_unfreezing:
        callbacks.insert(0, GradualUnfreezing(groups))
    history = classifier.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                             validation_data=validation_data, callbacks=callbacks,
                             **fit_kwargs)
    return classifier, history


def ulmfit(backbone, target_text, labelled, num_classes, general_text=None,
           lm_epochs=1, classifier_epochs=None, **fit_kwargs):
    """All three stages; `general_text=None` skips stage 1 (a pretrained backbone).

    Returns:
        (classifier, History of stage 3).
    """
    lm = backbone
    if general_text is not None:
        lm = pretrain_language_model(backbone, general_text, epochs=lm_epochs, **fit_kwargs)
    lm = fine_tune_language_model(lm, target_text, epochs=lm_epochs, **fit_kwargs)
    return fine_tune_classifier(lm.backbone, labelled, num_classes, epochs=classifier_epochs,
                                **fit_kwargs)


# ---------------------------------------------------------------- CVT tagging

def read_tagged_tsv(path):
    """CoNLL-style TSV: `token<TAB>tag` per line, a blank line between sentences.

    Returns:
        (sentences as token lists, tag lists).
    """
    from keras_ctx.files import naming_decode_errors

    sentences, tags, words, labels = [], [], [], []
    with naming_decode_errors(path), open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\n")
            if not line.strip():
                if words:
                    sentences.append(words)
                    tags.append(labels)
                words, labels = [], []
                continue
            fields = line.rstrip("\r").split("\t")
            if len(fields) != 2 or not fields[0] or not fields[1].strip():
                raise ValueError(f"{path}:{number}: expected exactly token<TAB>tag (2 "
                                 f"fields), got {len(fields)} field(s): {line!r}.")
            token, tag = fields[0], fields[1].strip()
            words.append(token)
            labels.append(tag)
    if words:
        sentences.append(words)
        tags.append(labels)
    if not sentences:
        raise ValueError(f"{path} has no tagged sentences.")
    return sentences, tags


def read_sentences(path):
    """One whitespace-tokenised sentence per non-empty line."""
    from keras_ctx.files import naming_decode_errors

    with naming_decode_errors(path), open(path, encoding="utf-8") as handle:
        sentences = [line.split() for line in handle if line.strip()]
    if not sentences:
        raise ValueError(f"{path} has no sentences.")
    return sentences


def tagging_inputs(sentences, vocabulary, sequence_length, max_characters_per_token=50):
    """{"token_ids", "character_ids", "padding_mask"} numpy arrays; unknown words -> id 1.

    Id 0 is padding, 1 the unknown word. A sentence longer than
    `sequence_length` raises (nothing is cut).
    """
    from keras_ctx.data.characters import tokens_to_character_ids

    too_long = [i for i, s in enumerate(sentences) if len(s) > sequence_length]
    if too_long:
        raise ValueError(f"Sentence {too_long[0]} has {len(sentences[too_long[0]])} tokens, "
                         f"more than sequence_length={sequence_length}: raise it.")
    index = {word: i + 2 for i, word in enumerate(vocabulary)}
    ids = np.zeros((len(sentences), sequence_length), "int32")
    padded = np.full((len(sentences), sequence_length), "", object)
    for row, words in enumerate(sentences):
        ids[row, :len(words)] = [index.get(w, 1) for w in words]
        padded[row, :len(words)] = words
    characters = tokens_to_character_ids(tf.constant(padded.astype(str)),
                                         max_characters_per_token)
    return {"token_ids": ids, "character_ids": np.asarray(characters),
            "padding_mask": (np.arange(sequence_length) < np.array(
                [len(s) for s in sentences])[:, None]).astype("int32")}


def train_cvt_tagger(labelled_path, unlabelled_path, steps, sequence_length=None,
                     batch_size=64, vocabulary_size=20000, learning_rate=0.5,
                     encoder_config=None, seed=0, warm_up_steps=5000, **fit_kwargs):
    """CVT on a tagged TSV and an unlabelled text file, trained as cvt_text trains it.

    Optimizer (`keras_ctx.pretraining.cvt.cvt_optimizer`): momentum SGD (0.9),
    global-norm clipping 1.0, learning rate
    0.5 * min(t, 5000) / 5000 / (1 + 0.005 sqrt(t)) over updates t (each step
    makes a labelled and an unlabelled update), and the weights' moving average
    (0.998) as the final weights. Dropout 0.5 on labelled batches and 0.2 on
    unlabelled ones, label smoothing 0.1 (`CrossViewTrainer`'s defaults).

    Returns:
        (trainer, vocabulary, tag names).
    """
    from keras_ctx.models.cvt import CvtEncoder
    from keras_ctx.pretraining.cvt import CrossViewTrainer, cvt_dataset, cvt_optimizer

    sentences, tags = read_tagged_tsv(labelled_path)
    unlabelled = read_sentences(unlabelled_path)
    tag_names = sorted({t for row in tags for t in row})
    counts = {}
    for words in sentences + unlabelled:
        for w in words:
            counts[w] = counts.get(w, 0) + 1
    vocabulary = sorted(counts, key=lambda w: (-counts[w], w))[:vocabulary_size - 2]
    encoder = CvtEncoder(len(vocabulary) + 2, **(encoder_config or {}))
    characters = encoder.get_config()["max_characters_per_token"]
    length = sequence_length or max(len(s) for s in sentences + unlabelled)
    x = tagging_inputs(sentences, vocabulary, length, characters)
    y = np.zeros_like(x["token_ids"])
    for row, labels in enumerate(tags):
        y[row, :len(labels)] = [tag_names.index(t) for t in labels]
    u = tagging_inputs(unlabelled, vocabulary, length, characters)
    labelled = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        len(sentences), seed=seed).batch(min(batch_size, len(sentences)), drop_remainder=True)
    unlabelled_data = tf.data.Dataset.from_tensor_slices(u).shuffle(
        min(len(unlabelled), 100_000), seed=seed).batch(
        min(batch_size, len(unlabelled)), drop_remainder=True)
    trainer = CrossViewTrainer(encoder, len(tag_names))
    trainer.compile(cvt_optimizer(learning_rate, warm_up_steps))
    trainer.fit(cvt_dataset(labelled, unlabelled_data), steps_per_epoch=steps, epochs=1,
                **fit_kwargs)
    return trainer, vocabulary, tag_names


def load_cvt_tagger(run_dir):
    """(trainer, vocabulary, tag names) saved by `keras-ctx cvt` in `run_dir`."""
    import json
    import os

    from keras_ctx.pretraining.cvt import CrossViewTrainer

    names = ("vocabulary.json", "encoder.keras", "tagger.weights.h5")
    missing = [n for n in names if not os.path.isfile(os.path.join(run_dir, n))]
    if missing:
        raise ValueError(f"{run_dir} is not a `keras-ctx cvt` run directory (no {missing[0]}): "
                         "pass the --out directory of `keras-ctx cvt`.")
    with open(os.path.join(run_dir, "vocabulary.json"), encoding="utf-8") as handle:
        saved = json.load(handle)
    encoder = keras.saving.load_model(os.path.join(run_dir, "encoder.keras"), compile=False)
    trainer = CrossViewTrainer(encoder, len(saved["tags"]),
                               hidden_size=saved.get("hidden_size", 512))
    trainer.load_weights(os.path.join(run_dir, "tagger.weights.h5"))
    return trainer, saved["words"], saved["tags"]


def tag_file(run_dir, input_path, batch_size=64):
    """`keras-ctx cvt-tag`: one `word/TAG word/TAG ...` line per line of `input_path`.

    Lines are whitespace-tokenised sentences; an empty line stays empty.
    Words outside the vocabulary are the unknown word (their characters
    still count).
    """
    from keras_ctx import validation

    validation.check_training_args(batch_size=batch_size)
    trainer, vocabulary, tags = load_cvt_tagger(run_dir)
    try:
        with open(input_path, encoding="utf-8") as handle:
            sentences = [line.split() for line in handle.read().splitlines()]
    except UnicodeDecodeError as error:
        raise ValueError(f"{input_path} is not UTF-8 text ({error.reason} at byte "
                         f"{error.start}): convert it to UTF-8.") from None
    rows = [i for i, words in enumerate(sentences) if words]
    if not rows:
        raise ValueError(f"{input_path} has no sentences: write one whitespace-tokenised "
                         "sentence per line.")
    characters = trainer.encoder.get_config()["max_characters_per_token"]
    tagged = [""] * len(sentences)
    for start in range(0, len(rows), batch_size):
        chunk = [sentences[i] for i in rows[start:start + batch_size]]
        x = tagging_inputs(chunk, vocabulary, max(len(s) for s in chunk), characters)
        best = np.argmax(keras.ops.convert_to_numpy(trainer.primary_logits(x)), axis=-1)
        for i, words, labels in zip(rows[start:start + batch_size], chunk, best):
            tagged[i] = " ".join(f"{w}/{tags[k]}" for w, k in zip(words, labels))
    return tagged


# ---------------------------------------------------------------- the CLI's commands

def _word_vocabulary(texts, size):
    counts = {}
    for text in texts:
        for word in text.split():
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:size - 2]


def _ids(text, index):
    return [index.get(w, 1) for w in text.split()]  # 0 padding, 1 unknown


def _lm_dataset(texts, index, sequence_length, batch_size, seed=0):
    """The texts' words as one `BpttStream` (Merity et al.'s `batchify` and
    variable-length BPTT around `sequence_length`)."""
    from keras_ctx.data.lm_stream import BpttStream

    stream = np.array([i for text in texts for i in _ids(text, index)], "int32")
    if len(stream) // batch_size < sequence_length:
        raise ValueError(f"The text has {len(stream)} words: fewer than one batch of "
                         f"{batch_size} x {sequence_length}; lower --batch-size.")
    return BpttStream(stream, batch_size, bptt=sequence_length, seed=seed)


def _save(out, writers):
    """Writes {name: writer(path)} into the new directory `out`, each file atomically."""
    import os

    from keras_ctx.files import replacing

    os.makedirs(out, exist_ok=True)
    for name, write in writers.items():
        with replacing(os.path.join(out, name)) as staging:
            write(staging)


def _json_writer(data):
    import json

    def write(path):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)

    return write


def _check_out(out):
    import os

    if os.path.isdir(out) and os.listdir(out):
        raise ValueError(f"{out} is not empty: choose a new --out directory.")


def _lines(path):
    from keras_ctx.files import naming_decode_errors

    with naming_decode_errors(path), open(path, encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def ulmfit_from_files(train, text, out, general_text=None, lm_epochs=1, epochs=None, batch_size=64,
           sequence_length=70, vocabulary_size=60000, seed=0, overrides=None):
    """`keras-ctx ulmfit`: the three ULMFiT stages into the new directory `out`.

    Stage 1 (general-domain LM) runs on `general_text` when given; stage 2
    fine-tunes the LM on the target `text` (one document per line); stage 3
    fine-tunes the classifier on `train` (text<TAB>label) with gradual
    unfreezing, discriminative rates and STLR (Howard & Ruder 2018).
    """
    from keras_ctx import validation
    from keras_ctx.data.labelled import read_labelled_tsv
    from keras_ctx.models.awd_lstm import AwdLstmBackbone

    overrides = dict(overrides or {})
    validation.check_training_args(epochs=epochs, batch_size=batch_size,
                                   sequence_length=sequence_length)
    validation.check_training_args(epochs=lm_epochs)
    _check_out(out)
    from keras_ctx.files import naming_decode_errors

    with naming_decode_errors(train):
        texts, labels = read_labelled_tsv(train)
    target = _lines(text)
    general = _lines(general_text) if general_text else None
    # STLR needs T * cut_frac >= 1: check the classifier's T before any training.
    layers = overrides.get("num_layers", 3)  # AwdLstmBackbone's default
    epochs = epochs or layers + 2  # groups: embeddings, each LSTM, the head
    SlantedTriangular(1.0, epochs * -(-len(texts) // batch_size))
    keras.utils.set_random_seed(seed)
    classes = sorted(set(labels))
    vocabulary = _word_vocabulary((general or []) + target + texts, vocabulary_size)
    index = {w: i + 2 for i, w in enumerate(vocabulary)}
    backbone = AwdLstmBackbone(len(vocabulary) + 2, **overrides)
    lm = backbone
    if general:
        lm = pretrain_language_model(
            backbone, _lm_dataset(general, index, sequence_length, batch_size, seed),
            epochs=lm_epochs, verbose=2)
    lm = fine_tune_language_model(
        lm, _lm_dataset(target, index, sequence_length, batch_size, seed), epochs=lm_epochs,
        verbose=2)
    rows = [_ids(t, index) for t in texts]
    length = max(len(r) for r in rows)
    ids = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    y = np.array([classes.index(label) for label in labels], "int32")
    data = tf.data.Dataset.from_tensor_slices(
        ({"token_ids": ids, "padding_mask": (ids > 0).astype("int32")}, y)).shuffle(
        len(y), seed=seed).batch(batch_size)
    classifier, _ = fine_tune_classifier(lm.backbone, data, len(classes), epochs=epochs,
                                         verbose=2)
    _save(out, {
        "classifier.keras": classifier.save,
        "vocabulary.json": _json_writer({"words": vocabulary, "padding_id": 0,
                                         "unknown_id": 1, "classes": classes}),
    })
    print(f"Saved the ULMFiT classifier ({len(classes)} classes) to {out}.")
    return classifier


def cvt_from_files(train, unlabelled, out, steps=1000, batch_size=64, vocabulary_size=20000,
        learning_rate=0.5, seed=0, overrides=None, warm_up_steps=5000):
    """`keras-ctx cvt`: a CVT tagger from a tagged TSV and unlabelled sentences, into `out`."""
    from keras_ctx import validation

    validation.check_training_args(steps=steps, batch_size=batch_size,
                                   learning_rate=learning_rate)
    validation.check_training_args(steps=warm_up_steps)  # the same positive-integer check
    _check_out(out)
    keras.utils.set_random_seed(seed)
    trainer, vocabulary, tags = train_cvt_tagger(
        train, unlabelled, steps=steps, batch_size=batch_size,
        vocabulary_size=vocabulary_size, learning_rate=learning_rate,
        encoder_config=dict(overrides or {}), seed=seed, warm_up_steps=warm_up_steps,
        verbose=2)
    save_cvt_tagger(trainer, vocabulary, tags, out)
    print(f"Saved the CVT tagger ({len(tags)} tags) to {out}.")
    return trainer


def save_cvt_tagger(trainer, vocabulary, tags, out):
    """Writes what `load_cvt_tagger` reads into `out`, each file atomically."""
    _save(out, {
        "encoder.keras": trainer.encoder.save,
        "tagger.weights.h5": trainer.save_weights,
        "vocabulary.json": _json_writer({"words": vocabulary, "padding_id": 0,
                                         "unknown_id": 1, "tags": tags,
                                         "hidden_size": trainer.hidden_size}),
    })

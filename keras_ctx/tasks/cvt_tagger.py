"""A CVT tagger (Clark et al. 2018) from files: read, train, save, load.

`train_cvt_tagger` reads a CoNLL-style TSV of tagged sentences and a file of
unlabelled sentences and trains `CrossViewTrainer`; `save_cvt_tagger` and
`load_cvt_tagger` write and read the directory `keras-ctx cvt` makes.
"""

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx.common import validation
from keras_ctx.common.files import json_writer, write_files


def read_tagged_tsv(path):
    """CoNLL-style TSV: `token<TAB>tag` per line, a blank line between sentences.

    Returns:
        (sentences as token lists, tag lists).
    """
    from keras_ctx.common.files import naming_decode_errors

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
    from keras_ctx.common.files import naming_decode_errors

    with naming_decode_errors(path), open(path, encoding="utf-8") as handle:
        sentences = [line.split() for line in handle if line.strip()]
    if not sentences:
        raise ValueError(f"{path} has no sentences.")
    return sentences


def tagging_inputs(sentences, vocabulary, sequence_length, max_characters_per_token=50):
    """{"token_ids", "character_ids", "padding_mask"} numpy arrays; unknown words -> id 1.

    Id 0 is padding, 1 the unknown word. `vocabulary`: a
    `keras_ctx.data.cvt.WordVocabulary` (a plain list of words is one of
    normalised words): a word's id is its normalised form's (cvt_text's rule),
    its characters keep their case. With its `sentence_boundaries` each row is
    `<start>` w_1 .. w_n `<end>` (cvt_text's Example), `sequence_length` + 2
    wide. A sentence of more than `sequence_length` words raises (nothing is
    cut).
    """
    from keras_ctx.data.characters import tokens_to_character_ids
    from keras_ctx.data.cvt import BOUNDARY_TOKENS, WordVocabulary

    if not isinstance(vocabulary, WordVocabulary):
        vocabulary = WordVocabulary(vocabulary)
    too_long = [i for i, s in enumerate(sentences) if len(s) > sequence_length]
    if too_long:
        raise ValueError(f"Sentence {too_long[0]} has {len(sentences[too_long[0]])} tokens, "
                         f"more than sequence_length={sequence_length}: raise it.")
    width = sequence_length + (BOUNDARY_TOKENS if vocabulary.sentence_boundaries else 0)
    ids = np.zeros((len(sentences), width), "int32")
    padded = np.full((len(sentences), width), "", object)
    lengths = np.zeros(len(sentences), "int32")
    for row, words in enumerate(sentences):
        row_ids, spellings = vocabulary.encoder_row(words)
        lengths[row] = len(row_ids)
        ids[row, :len(row_ids)] = row_ids
        padded[row, :len(row_ids)] = spellings
    characters = tokens_to_character_ids(tf.constant(padded.astype(str)),
                                         max_characters_per_token)
    return {"token_ids": ids, "character_ids": np.asarray(characters),
            "padding_mask": (np.arange(width) < lengths[:, None]).astype("int32")}


def train_cvt_tagger(labelled_path, unlabelled_path, steps, batch_size=64,
                     vocabulary_size=20000, learning_rate=0.5, encoder_config=None, seed=0,
                     warm_up_steps=5000, **fit_kwargs):
    """CVT on a tagged TSV and an unlabelled text file, trained as cvt_text trains it.

    Data as cvt_text makes it (`keras_ctx.data.cvt`): unlabelled sentences of
    100 words or more skipped; the vocabulary the `vocabulary_size - 2` most
    frequent normalised words (lower-cased, digits as 0; cvt_text's are GloVe's
    uncased words); each sentence wrapped in `<start>` ... `<end>`, which the
    encoder reads and no loss weighs; both streams in batches of one length bin
    each (cvt_text's buckets), padded to the bin's longest sentence.

    Optimizer (`keras_ctx.pretraining.cvt.cvt_optimizer`): momentum SGD (0.9),
    global-norm clipping 1.0, learning rate
    0.5 * min(t, 5000) / 5000 / (1 + 0.005 sqrt(t)) over updates t (each step
    makes a labelled and an unlabelled update), and the weights' moving average
    (0.998) as the final weights. Dropout 0.5 on labelled batches and 0.2 on
    unlabelled ones, label smoothing 0.1 (`CrossViewTrainer`'s defaults).

    Returns:
        (trainer, vocabulary (a `WordVocabulary`), tag names).
    """
    from keras_ctx.models.cvt import CvtEncoder
    from keras_ctx.data.cvt import (
        MAX_SENTENCE_LENGTH,
        WordVocabulary,
        bucketed_batches,
        cvt_dataset,
        unlabelled_sentences,
    )
    from keras_ctx.pretraining.cvt import CrossViewTrainer, cvt_optimizer

    validation.check_args(steps=steps, batch_size=batch_size, vocabulary_size=vocabulary_size,
                          learning_rate=learning_rate, seed=seed, warm_up_steps=warm_up_steps)
    sentences, tags = read_tagged_tsv(labelled_path)
    read = read_sentences(unlabelled_path)
    unlabelled = unlabelled_sentences(read)
    if not unlabelled:
        raise ValueError(f"{unlabelled_path} has no sentence of fewer than "
                         f"{MAX_SENTENCE_LENGTH} words (cvt_text's limit): add shorter ones.")
    if len(unlabelled) < len(read):
        from keras_ctx.common import progress

        progress.say(f"Skipped {len(read) - len(unlabelled):,} of {len(read):,} unlabelled "
                     f"sentences of {MAX_SENTENCE_LENGTH} words or more (cvt_text's limit).")
    tag_names = sorted({t for row in tags for t in row})
    vocabulary = WordVocabulary.of_sentences(sentences + unlabelled, vocabulary_size,
                                             sentence_boundaries=True)
    encoder = CvtEncoder(len(vocabulary) + vocabulary.reserved, **(encoder_config or {}))
    characters = encoder.get_config()["max_characters_per_token"]

    def tagged_rows(rows, width):
        x = tagging_inputs([words for words, _ in rows], vocabulary, width, characters)
        y = np.zeros((len(rows), width), "int32")  # aligned to the words
        for row, (_, labels) in enumerate(rows):
            y[row, :len(labels)] = [tag_names.index(t) for t in labels]
        return x, y

    labelled = bucketed_batches(list(zip(sentences, tags)), [len(s) for s in sentences],
                                tagged_rows, batch_size, seed)
    unlabelled_data = bucketed_batches(
        unlabelled, [len(s) for s in unlabelled],
        lambda rows, width: tagging_inputs(rows, vocabulary, width, characters),
        batch_size, seed)
    trainer = CrossViewTrainer(encoder, len(tag_names), sentence_boundaries=True)
    trainer.compile(cvt_optimizer(learning_rate, warm_up_steps))
    trainer.fit(cvt_dataset(labelled, unlabelled_data), steps_per_epoch=steps, epochs=1,
                **fit_kwargs)
    return trainer, vocabulary, tag_names


# What `load_cvt_tagger` reads from vocabulary.json, with the types and ranges it needs
# (closed: every field the writer writes; normalized_words, cvt_text's word rule
# (WordVocabulary), and sentence_boundaries, its <start>/<end>, are absent in taggers
# saved before them).
VOCABULARY_SCHEMA = {"words": (validation.ListOf(str), None, True),
                     "tags": (validation.ListOf(str), None, True),
                     "hidden_size": (int, 1, False), "padding_id": (int, 0, False),
                     "unknown_id": (int, 0, False),
                     "normalized_words": (bool, None, False),
                     "sentence_boundaries": (bool, None, False)}


def load_cvt_tagger(run_dir):
    """(trainer, vocabulary, tag names) saved by `keras-ctx cvt` in `run_dir`.

    vocabulary.json is checked (types; its word count against the encoder's
    table, its hidden_size against the tagger's stored weights before the
    tagger is built), and both weight files are loaded checked
    (`keras_ctx.common.keras_files`): a partial or mismatched file is refused
    in one line naming it.
    """
    import os

    from keras_ctx.common import keras_files, validation
    from keras_ctx.common.errors import CheckpointError
    from keras_ctx.pretraining.cvt import CrossViewTrainer

    names = ("vocabulary.json", "encoder.keras", "tagger.weights.h5")
    missing = [n for n in names if not os.path.isfile(os.path.join(run_dir, n))]
    if missing:
        raise ValueError(f"{run_dir} is not a `keras-ctx cvt` run directory (no {missing[0]}): "
                         "pass the --out directory of `keras-ctx cvt`.")
    path, fix = os.path.join(run_dir, "vocabulary.json"), "train the tagger again (keras-ctx cvt)"
    saved = validation.read_fields(path, "a CVT vocabulary", VOCABULARY_SCHEMA, fix)
    if not saved["tags"]:
        raise CheckpointError(f"{path} lists no tags: {fix}.")
    from keras_ctx.data.cvt import WordVocabulary

    boundaries = saved.get("sentence_boundaries", False)
    words = WordVocabulary(saved["words"], saved.get("normalized_words", False), boundaries)
    encoder = keras_files.load_model(os.path.join(run_dir, "encoder.keras"))
    rows = encoder.get_config().get("vocabulary_size")
    if isinstance(rows, int) and len(words) + words.reserved > rows:
        raise CheckpointError(f"{path} lists {len(words)} words but encoder.keras has "
                              f"{rows} rows (words + {words.reserved}): the files come from "
                              f"different runs; {fix}.")
    weights = os.path.join(run_dir, "tagger.weights.h5")
    datasets = keras_files.read_h5_datasets(weights)
    keras_files.check_claimed_sizes(saved, [shape for shape, _ in datasets.values()], path)
    trainer = CrossViewTrainer(encoder, len(saved["tags"]),
                               hidden_size=saved.get("hidden_size", 512),
                               sentence_boundaries=boundaries)
    keras_files.check_weights_fit(trainer, datasets, weights)
    trainer.load_weights(weights)
    return trainer, words, saved["tags"]


def save_cvt_tagger(trainer, vocabulary, tags, out):
    """Writes what `load_cvt_tagger` reads into `out`, each file atomically.

    `vocabulary.json` records whether the trainer reads `<start>`/`<end>`
    (`sentence_boundaries`); a `WordVocabulary` must agree.
    """
    boundaries = trainer.sentence_boundaries
    if getattr(vocabulary, "sentence_boundaries", boundaries) != boundaries:
        raise ValueError(f"The vocabulary's sentence_boundaries={not boundaries} but the "
                         f"trainer's is {boundaries}: save the vocabulary it trained with.")
    write_files(out, {
        "encoder.keras": trainer.encoder.save,
        "tagger.weights.h5": trainer.save_weights,
        "vocabulary.json": json_writer({"words": vocabulary, "padding_id": 0,
                                         "unknown_id": 1, "tags": tags,
                                         "normalized_words": getattr(
                                             vocabulary, "normalized", True),
                                         "sentence_boundaries": boundaries,
                                         "hidden_size": trainer.hidden_size}),
    })

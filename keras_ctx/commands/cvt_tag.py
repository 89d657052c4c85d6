"""`keras-ctx cvt-tag`: tag sentences with a `keras-ctx cvt` tagger."""

import keras
import numpy as np

from keras_ctx.tasks.cvt_tagger import load_cvt_tagger, tagging_inputs


def tag_file(run_dir, input_path, batch_size=64):
    """`keras-ctx cvt-tag`: one `word/TAG word/TAG ...` line per line of `input_path`.

    Lines are whitespace-tokenised sentences; an empty line stays empty.
    Words outside the vocabulary are the unknown word (their characters
    still count).
    """
    from keras_ctx.common import validation
    from keras_ctx.common.errors import DataError
    from keras_ctx.common.files import naming_decode_errors

    validation.check_args(batch_size=batch_size)
    trainer, vocabulary, tags = load_cvt_tagger(run_dir)
    with naming_decode_errors(input_path), open(input_path, encoding="utf-8") as handle:
        sentences = [line.split() for line in handle.read().splitlines()]
    rows = [i for i, words in enumerate(sentences) if words]
    if not rows:
        raise DataError(f"{input_path} has no sentences: write one whitespace-tokenised "
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

"""Contextual vectors of words in texts (`keras-ctx embed`), on the one text path.

Texts become inputs through the family's `TextPreprocessor` (the same ids as
pretraining and `serve_text`); a word's vector is the mean of the pieces that
cover its characters in the whole-text tokenization
(`keras_ctx.preprocessing.word_positions`).
"""

import keras
import numpy as np

from keras_ctx import families, handles
from keras_ctx.preprocessing import TextPreprocessor, character_inputs, word_positions

def text_inputs(family, tokenizer, texts, sequence_length):
    """(inputs, preprocessor or None) for `texts`; rows at least `sequence_length` long.

    Longer texts get longer rows (up to the backbone's own position limit,
    which it checks), never truncation.
    """
    if family.framing is None:
        return character_inputs(texts, sequence_length), None
    probe = TextPreprocessor(tokenizer, sequence_length, family)
    length = max([sequence_length] + [probe.framed_length(t) for t in texts])
    preprocessor = TextPreprocessor(tokenizer, length, family)
    inputs = preprocessor(np.array(texts, dtype=object))
    return {k: np.asarray(v) for k, v in inputs.items()}, preprocessor


def _positions(preprocessor, tokenizer, text, word):
    if preprocessor is None:  # characters: word i sits after <S>
        words = [w.strip(".,!?;:").lower() for w in text.split()]
        if word.lower() not in words:
            raise ValueError(f"{word!r} does not occur in {text!r}.")
        return [words.index(word.lower()) + 1]
    return word_positions(tokenizer, text, word, offset=len(preprocessor.start_ids))


def sequence_outputs(run_dir, texts):
    """(info, backbone, tokenizer, preprocessor, sequence_output) of a run on `texts`."""
    info, backbone, tokenizer = handles.load(run_dir, need_tokenizer=True)
    family = families.get(info["family"])
    inputs, preprocessor = text_inputs(family, tokenizer, list(texts), info["sequence_length"])
    inputs = {k: v for k, v in inputs.items() if k in backbone.input}
    sequence = keras.ops.convert_to_numpy(backbone(inputs)[family.word_vectors])
    return info, backbone, tokenizer, preprocessor, sequence


def word_vectors(run_dir, texts, word):
    """The contextual vector of `word` (mean of its pieces) in each text."""
    _, _, tokenizer, preprocessor, sequence = sequence_outputs(run_dir, texts)
    vectors = []
    for i, text in enumerate(texts):
        positions = _positions(preprocessor, tokenizer, text, word)
        vectors.append(sequence[i, positions].astype("float32").mean(0))
    return np.stack(vectors)


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def show_context(run_dir):
    """Prints the main job's sense table and writes it as a heatmap into the run.

    See `keras_ctx.sense_table` (imported here late: it builds on this module).
    """
    from keras_ctx.sense_table import show_sense_table

    return show_sense_table(run_dir)


def embed(run_dir, texts, word=None, save=None, overwrite=False):
    """Prints (and returns) the vectors of `word` in each text, or every sequence output."""
    if word:
        vectors = word_vectors(run_dir, texts, word)
        for i, text in enumerate(texts):
            first = ", ".join(f"{v:+.4f}" for v in vectors[i][:4])
            print(f"{text!r}: |v| = {np.linalg.norm(vectors[i]):.3f}, first values [{first}]")
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                print(f"cosine({i}, {j}) = {cosine(vectors[i], vectors[j]):+.4f}")
    else:
        info, *_, vectors = sequence_outputs(run_dir, texts)
        print(f"{families.get(info['family']).word_vectors}: shape {vectors.shape}")
    if save:
        from keras_ctx.files import save_npz

        path = save_npz(save, overwrite=overwrite, vectors=vectors, texts=np.array(texts))
        print(f"Saved to {path}.")
    return vectors

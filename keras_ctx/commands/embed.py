"""`keras-ctx embed`: contextual vectors of words in texts, on the one text path.

Texts become inputs through the family's `TextPreprocessor` (the same ids as
pretraining and `serve_text`); a word's vector is the mean of the pieces that
cover its characters in the whole-text tokenization
(`keras_ctx.preprocessing.word_positions`).
"""

import keras
import numpy as np

from keras_ctx import families, handles
from keras_ctx.common.files import save_npz
from keras_ctx.preprocessing import text_inputs, word_positions


def _positions(preprocessor, text, word):
    if preprocessor is None:  # characters: word i sits after <S>
        words = [w.strip(".,!?;:").lower() for w in text.split()]
        if word.lower() not in words:
            raise ValueError(f"{word!r} does not occur in {text!r}.")
        return [words.index(word.lower()) + 1]
    # The preprocessor's tokenizer: the one that read the text (XLM: its language's rules).
    return word_positions(preprocessor.tokenizer, text, word,
                          offset=len(preprocessor.start_ids))


class TextModel:
    """A model handle loaded once for text in: its backbone, tokenizer and family.

    Args:
        handle: a run directory, a checkpoint directory, hf:// or kaggle://
            (`keras_ctx.handles`; a preset name has no tokenizer and is refused).
    """

    def __init__(self, handle):
        self._hold(*handles.load(handle, need_tokenizer=True))

    @classmethod
    def in_memory(cls, info, backbone, tokenizer):
        """The model a command holds already (pretrain's, just saved): nothing is read back.

        `info` holds run.json's `family` and `sequence_length`.
        """
        model = cls.__new__(cls)
        model._hold(info, backbone, tokenizer)
        return model

    def _hold(self, info, backbone, tokenizer):
        self.info, self.backbone, self.tokenizer = info, backbone, tokenizer
        self.family = families.get(info["family"])

    @property
    def languages(self):
        """The model's language codes in id order (XLM's id2lang), or None: it names none."""
        return getattr(self.backbone, "languages", None)

    def sequence_outputs(self, texts, language=None):
        """(preprocessor, the family's word-vector output) for `texts` in `language`
        (`keras_ctx.preprocessing.text_language`: needed for a model of several)."""
        inputs, preprocessor = text_inputs(self.family, self.tokenizer, list(texts),
                                           self.info["sequence_length"], language,
                                           self.languages)
        inputs = {k: v for k, v in inputs.items() if k in self.backbone.input}
        # One compiled forward (Keras' predict: a TF graph, jax.jit, eager torch): on
        # JAX an eager call compiles every operation on its own.
        outputs = self.backbone.predict(inputs, batch_size=len(texts), verbose=0)
        return preprocessor, keras.ops.convert_to_numpy(outputs[self.family.word_vectors])

    def word_vectors(self, texts, word, language=None):
        """The contextual vector of `word` (mean of its pieces) in each text."""
        preprocessor, sequence = self.sequence_outputs(texts, language)
        vectors = []
        for i, text in enumerate(texts):
            positions = _positions(preprocessor, text, word)
            vectors.append(sequence[i, positions].astype("float32").mean(0))
        return np.stack(vectors)


def sequence_outputs(run_dir, texts, language=None):
    """(info, backbone, tokenizer, preprocessor, sequence_output) of a run on `texts`."""
    model = TextModel(run_dir)
    preprocessor, sequence = model.sequence_outputs(texts, language)
    return model.info, model.backbone, model.tokenizer, preprocessor, sequence


def word_vectors(run_dir, texts, word, language=None):
    """The contextual vector of `word` (mean of its pieces) in each text."""
    return TextModel(run_dir).word_vectors(texts, word, language)


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def embed(run_dir, texts, word=None, save=None, overwrite=False, language=None):
    """Prints (and returns) the vectors of `word` in each text, or every sequence output.

    `language`: the texts' language code, for a model of several (XLM: `--language`)."""
    from keras_ctx.common import validation

    validation.check_given(word=word, save=save, language=language)
    if word:
        vectors = word_vectors(run_dir, texts, word, language)
        for i, text in enumerate(texts):
            first = ", ".join(f"{v:+.4f}" for v in vectors[i][:4])
            print(f"{text!r}: |v| = {np.linalg.norm(vectors[i]):.3f}, first values [{first}]")
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                print(f"cosine({i}, {j}) = {cosine(vectors[i], vectors[j]):+.4f}")
    else:
        info, *_, vectors = sequence_outputs(run_dir, texts, language)
        print(f"{families.get(info['family']).word_vectors}: shape {vectors.shape}")
    if save:
        path = save_npz(save, overwrite=overwrite, vectors=vectors, texts=np.array(texts))
        print(f"Saved to {path}.")
    return vectors

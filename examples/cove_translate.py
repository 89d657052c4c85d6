"""CoVe in miniature: train an MT-LSTM on a parallel corpus, then use it as features.

Runs on CPU in well under a minute:

    python examples/cove_translate.py [--glove glove.840B.300d.txt]
    python examples/cove_translate.py --fast     # a smoke run in seconds

1. Data: a synthetic parallel corpus ("translate" = reverse the words and
   upper-case them) written as two aligned text files, read with
   `parallel_text_dataset` and turned into teacher-forcing batches by
   `translation_inputs` in tf.data. Word vectors come from a GloVe text file
   through `glove_matrix` (a small random one is written here unless
   `--glove` names a real file).
2. Training: `TranslationPretrainer` = `CoveBackbone` (2-layer biLSTM over
   the fixed vectors) + CoVe's attentional 2-layer LSTM decoder, under XLA.
3. Use: greedy translation of unseen sentences, then the encoder as a frozen
   `Cove` layer ([GloVe(x); CoVe(x)]) inside a user's functional model.
"""

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data.glove import glove_matrix  # noqa: E402
from keras_ctx.data.parallel import (  # noqa: E402
    TARGET_SPECIALS,
    build_vocabulary,
    parallel_text_dataset,
    translation_inputs,
)
from keras_ctx.models import Cove, CoveBackbone  # noqa: E402
from keras_ctx.pretraining import TranslationPretrainer  # noqa: E402

WORDS = "red green blue cyan pink gold grey teal black white".split()
SOURCE_LENGTH, TARGET_LENGTH, DIM = 6, 7, 16


def write_corpus(directory, count=768, seed=0):
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for _ in range(count):
        words = list(rng.choice(WORDS, size=rng.integers(2, 6)))
        src.append(" ".join(words))
        tgt.append(" ".join(w.upper() for w in reversed(words)))
    paths = os.path.join(directory, "train.src"), os.path.join(directory, "train.tgt")
    for path, lines in zip(paths, (src, tgt)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return paths, src, tgt


def write_random_glove(directory, words, dim):
    path = os.path.join(directory, "glove.txt")
    rng = np.random.default_rng(1)
    with open(path, "w", encoding="utf-8") as f:
        for w in words:
            f.write(w + " " + " ".join(f"{v:.4f}" for v in rng.normal(size=dim)) + "\n")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--glove", help="a GloVe text file (default: random vectors)")
    parser.add_argument("--epochs", type=int, default=8)
    args = scripts.parse_args(parser, argv, fast="96 sentence pairs, 1 epoch")
    if args.fast:
        args.epochs = 1
    keras.utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        (src_path, tgt_path), src, tgt = write_corpus(tmp, 96 if args.fast else 768)
        source_vocabulary = build_vocabulary(src)
        target_vocabulary = build_vocabulary(tgt, specials=TARGET_SPECIALS)
        glove_path = args.glove or write_random_glove(tmp, WORDS, DIM)
        vectors, found = glove_matrix(glove_path, source_vocabulary)
        print(f"GloVe: {found}/{len(source_vocabulary)} source words found, dim {vectors.shape[1]}")

        ds = parallel_text_dataset(src_path, tgt_path).shuffle(1024, seed=0)
        ds = ds.batch(32, drop_remainder=True).map(
            lambda s, t: translation_inputs(
                s, t, source_vocabulary, target_vocabulary, SOURCE_LENGTH, TARGET_LENGTH
            )
        )
        encoder = CoveBackbone(
            len(source_vocabulary), embedding_size=vectors.shape[1], hidden_size=32,
            embeddings=vectors, lstm_implementation="loop",
        )
        model = TranslationPretrainer(
            encoder, len(target_vocabulary), target_embedding_dim=16, decoder_units=64
        )
        model.compile(optimizer=keras.optimizers.Adam(0.01), jit_compile=True)
        history = model.fit(scripts.counted(ds), epochs=args.epochs, shuffle=False, verbose=0)
        print("token accuracy by epoch:", np.round(history.history["accuracy"], 3))

    unseen = ["white gold red", "teal cyan black pink"]
    ids = np.zeros((len(unseen), SOURCE_LENGTH), "int32")
    for i, sentence in enumerate(unseen):
        for j, word in enumerate(sentence.split()):
            ids[i, j] = source_vocabulary.index(word)
    for sentence, out in zip(unseen, model.greedy_translate(ids, TARGET_LENGTH)):
        words = [target_vocabulary[k] for k in out if k]
        print(f"{sentence!r} -> {' '.join(words)!r}")

    # The encoder as a frozen feature layer: [GloVe(x); CoVe(x)].
    token_ids = keras.Input((None,), dtype="int32")
    features = Cove(encoder)(token_ids)
    pooled = keras.layers.GlobalAveragePooling1D()(features)
    user_model = keras.Model(token_ids, keras.layers.Dense(2)(pooled))
    print("Cove features:", tuple(features.shape), "trainable weights in the user model:",
          len(user_model.trainable_weights))
    return history.history["accuracy"][-1]


if __name__ == "__main__":
    main()

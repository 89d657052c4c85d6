"""ELMo in miniature: train a biLM, then use its frozen features downstream.

Runs on CPU in well under a minute:

    python examples/elmo_features.py
    python examples/elmo_features.py --fast     # a smoke run in seconds

1. Text: a tiny synthetic language with an ambiguous word. Each sentence
   has a topic (two word cycles) and the word "bank", whose sense is given
   only by its context.
2. Pretraining: `bilm_inputs` turns sentences into ELMo character ids
   (<S>/</S>, 50 per token) and vocabulary ids in tf.data; `BiLMPretrainer`
   trains a tiny `ElmoBackbone` (forward + backward LSTMs with projection,
   shared char-CNN and softmax) with a sampled softmax under XLA.
3. Downstream: a user's functional model classifies the sense of "bank" from
   frozen `Elmo` features (ScalarMix of the biLM layers, task weights
   learned), against the same model on random context-free word vectors.
4. Strings in: `ElmoCharacterIds` in front of `Elmo` for raw-text inference.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import scripts  # noqa: E402
from keras_ctx.data.characters import ElmoCharacterIds  # noqa: E402
from keras_ctx.models import Elmo, ElmoBackbone  # noqa: E402
from keras_ctx.pretraining import BiLMPretrainer  # noqa: E402
from keras_ctx.data.vocabulary import bilm_inputs, make_vocabulary  # noqa: E402

TOPICS = (["river", "water", "fish", "boat"], ["money", "loan", "cash", "debt"])
SEQUENCE_LENGTH, BATCH_SIZE = 8, 16


def sentences(count, seed):
    """(sentences, sense of "bank", position of "bank" incl. <S>)."""
    rng = np.random.default_rng(seed)
    out, senses, positions = [], [], []
    for _ in range(count):
        sense = int(rng.integers(2))
        start, length = rng.integers(4), int(rng.integers(2, 5))
        words = [TOPICS[sense][(start + i) % 4] for i in range(length)]
        position = int(rng.integers(1, length + 1))
        words.insert(position, "bank")
        out.append(" ".join(words))
        senses.append(sense)
        positions.append(position + 1)
    return out, np.array(senses), np.array(positions)


class AtPosition(keras.layers.Layer):
    """Each example's vector at its word's position; the sequence's padding mask ends here
    (a Lambda would warn that it drops the mask ELMo's vectors carry)."""

    def call(self, inputs, mask=None):
        vectors, position = inputs
        return keras.ops.take_along_axis(vectors, position[:, None, None], axis=1)[:, 0]

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0][0], input_shape[0][-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = scripts.parse_args(parser, argv, fast="1 epoch each")
    epochs = (1, 1) if args.fast else (15, 30)  # biLM, downstream
    keras.utils.set_random_seed(0)
    vocabulary = make_vocabulary(TOPICS[0] + TOPICS[1] + ["bank"])

    def dataset(count, seed):
        ds = tf.data.Dataset.from_tensor_slices(sentences(count, seed)[0])
        ds = ds.batch(BATCH_SIZE, drop_remainder=True)
        return ds.map(lambda s: bilm_inputs(s, vocabulary, SEQUENCE_LENGTH))

    backbone = ElmoBackbone(
        projection_dim=16, lstm_units=32, filters=[[1, 8], [2, 8], [3, 8]],
        num_highway_layers=1,
    )
    pretrainer = BiLMPretrainer(backbone, len(vocabulary), num_sampled=6)
    pretrainer.compile(optimizer=keras.optimizers.Adam(0.01), jit_compile=True)
    before = pretrainer.evaluate(dataset(64, 1), verbose=0, return_dict=True)
    pretrainer.fit(dataset(64 if args.fast else 256, 0), epochs=epochs[0], shuffle=False,
                   verbose=0)
    after = pretrainer.evaluate(dataset(64, 1), verbose=0, return_dict=True)
    print(f"biLM perplexity (full softmax): {before['perplexity']:.2f} -> "
          f"{after['perplexity']:.2f} (forward {after['forward_perplexity']:.2f}, "
          f"backward {after['backward_perplexity']:.2f})")

    # Downstream: the sense of "bank", from frozen ELMo features.
    text, senses, positions = sentences(256, 2)
    x = bilm_inputs(tf.constant(text), vocabulary, SEQUENCE_LENGTH)
    features = {"ids": x["character_ids"].numpy(), "position": positions}
    word_ids = x["token_ids"].numpy()

    def classifier(featurizer, ids_input):
        position = keras.Input((), dtype="int32", name="position")
        vectors = featurizer(ids_input)
        picked = AtPosition(name="at_position")([vectors, position])
        probability = keras.layers.Dense(1, activation="sigmoid")(picked)
        model = keras.Model([ids_input, position], probability)
        model.compile(keras.optimizers.Adam(0.05), "binary_crossentropy", metrics=["accuracy"])
        return model

    elmo = Elmo(backbone, name="elmo")  # frozen biLM; ScalarMix weights are trained
    elmo_model = classifier(elmo, keras.Input((None, 50), dtype="int32", name="ids"))
    random_vectors = keras.layers.Embedding(len(vocabulary), 32, trainable=False)
    random_model = classifier(random_vectors, keras.Input((None,), dtype="int32", name="ids"))
    half = len(senses) // 2
    results = {}
    for name, model, inputs in (
        ("ELMo", elmo_model, [features["ids"], positions]),
        ("random word vectors", random_model, [word_ids, positions]),
    ):
        model.fit([i[:half] for i in inputs], senses[:half], epochs=epochs[1], batch_size=32,
                  verbose=0)
        results[name] = model.evaluate([i[half:] for i in inputs], senses[half:], verbose=0)[1]
        print(f"sense of 'bank' from {name}: accuracy {results[name]:.2f}")
    weights = keras.ops.convert_to_numpy(keras.ops.softmax(elmo.scalar_mix.scalar_parameters))
    print("learned ScalarMix weights (token layer, biLSTM 1, biLSTM 2):", np.round(weights, 2))

    # Raw strings in: preprocessing layer + the same frozen Elmo layer.
    strings = keras.Input((), dtype="string")
    featurizer = keras.Model(strings, elmo(ElmoCharacterIds(SEQUENCE_LENGTH)(strings)))
    vectors = featurizer(tf.constant(["river bank water", "money bank loan"]))
    bank = vectors[:, 2].numpy()  # <S> river bank
    print("cosine(bank as river side, bank as money):",
          float(bank[0] @ bank[1] / np.linalg.norm(bank[0]) / np.linalg.norm(bank[1])))
    return after, results


if __name__ == "__main__":
    main()

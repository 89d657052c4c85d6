"""Training throughput: ELECTRA (generator + discriminator) vs BERT MLM at the same size.

ELECTRA-small's discriminator (12 layers, H=256, 4 heads, FFN 1024, E=128)
with its 1/4-size generator (Clark et al. 2020, Table 6), against a BERT
encoder of the discriminator's shape trained with MLM only (no NSP, RoBERTa's
objective), both under XLA on the same masked random batches. Prints steps/s
and tokens/s (median over repeats); results are not recorded.

    python -m benchmarks.electra [--batch 128 --length 128 --layers 12 --steps 20]
    python -m benchmarks.electra --layers 2 --batch 8 --steps 3 --repeats 1   # CPU check
"""

import argparse
import time

import keras
import numpy as np
import tensorflow as tf

from benchmarks import common
from keras_ctx.data.masking import MLMMasker
from keras_ctx.models import BertBackbone, ElectraBackbone, electra_generator
from keras_ctx.pretraining import ElectraPretrainer, RobertaPretrainer

SPECIALS = (0, 1, 2, 3, 4)  # pad, unk, cls, sep, mask


def masked_batches(batch, length, vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(len(SPECIALS), vocabulary_size, (batch, length)).astype("int32")
    ids[:, 0], ids[:, -1] = 2, 3
    data = tf.data.Dataset.from_tensors({"token_ids": ids,
                                         "padding_mask": np.ones_like(ids),
                                         "segment_ids": np.zeros_like(ids)}).repeat()
    masker = MLMMasker(vocabulary_size, 4, SPECIALS, dynamic=True, seed=seed)
    return masker.apply(data).prefetch(tf.data.AUTOTUNE)


def models(args):
    config = dict(vocabulary_size=args.vocabulary_size, num_layers=args.layers,
                  num_heads=args.hidden // 64, hidden_size=args.hidden,
                  intermediate_size=4 * args.hidden, max_sequence_length=max(512, args.length))
    discriminator = ElectraBackbone(embedding_size=args.embedding_size, **config)
    electra = ElectraPretrainer(electra_generator(discriminator, args.generator_fraction),
                                discriminator)
    bert = RobertaPretrainer(BertBackbone(**config))
    return {
        f"ELECTRA (gen 1/{round(1 / args.generator_fraction)}) + disc": electra,
        "BERT MLM (same size)": bert,
    }


def steps_per_second(model, data, steps, repeats):
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), jit_compile=True)
    model.fit(data, steps_per_epoch=2, epochs=1, verbose=0)  # compile
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
        rates.append(steps / (time.perf_counter() - start))
    return float(np.median(rates))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--embedding-size", type=int, default=128)
    parser.add_argument("--generator-fraction", type=float, default=0.25)
    parser.add_argument("--vocabulary-size", type=int, default=30522)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    data = masked_batches(args.batch, args.length, args.vocabulary_size)
    rows = []
    for name, model in models(args).items():
        rate = steps_per_second(model, data, args.steps, args.repeats)
        params = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        rows.append((name, f"{params / 1e6:.1f}M", f"{rate:.2f}",
                     f"{rate * args.batch * args.length:,.0f}"))
    print(f"batch {args.batch} x {args.length} tokens, {args.layers} layers, H={args.hidden}; "
          f"{common.machine()}")
    print(common.table(("objective", "trainable params", "steps/s", "tokens/s"), rows))


if __name__ == "__main__":
    main()

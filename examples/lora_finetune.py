"""LoRA and Houlsby adapters on a BERT classifier: train a sliver, keep the backbone file intact.

    python examples/lora_finetune.py [--rank 4]
    python examples/lora_finetune.py --fast     # a smoke run in seconds

LoRA (Hu et al. 2022) on the attention query and value projections by layer
path patterns (Keras' own `enable_lora`), or Houlsby adapters (two per
layer): only those weights and the classifier head train; the frozen weights
stay bit-identical; the LoRA factors / adapter are saved alone as safetensors.
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_ctx import peft as adapters, scripts  # noqa: E402
from keras_ctx.data import synthetic_languages as syn  # noqa: E402
from keras_ctx.models import from_preset  # noqa: E402
from keras_ctx.tasks.heads import SequenceClassifier  # noqa: E402


def run(method, rank, examples=1024, epochs=4):
    keras.utils.set_random_seed(0)
    backbone = from_preset("bert-tiny", vocabulary_size=syn.vocabulary_size(1),
                           max_sequence_length=16)
    if method == "lora":
        adapters.enable_lora(backbone, rank, ["*self_attention/query", "*self_attention/value"])
    else:
        adapters.add_adapter(backbone, "task", "houlsby")
    classifier = SequenceClassifier(backbone, num_classes=2, dropout=0.0)
    head = classifier.get_layer("logits")
    count = adapters.train_only(classifier, adapters=["task"] if method == "houlsby" else (),
                                lora=method == "lora", keep=[head])
    print(f"{method}: {count} trainable of {classifier.count_params()} parameters")
    frozen = [(v, v.numpy().copy()) for v in classifier.weights if not v.trainable]
    classifier.compile(keras.optimizers.Adam(3e-3),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=True)
    words, labels = syn.sentences(examples, seed=0)
    classifier.fit(syn.classification_inputs(syn.to_ids(words, 0)), labels, epochs=epochs,
                   batch_size=32, verbose=2)
    unchanged = all(np.array_equal(v.numpy(), value) for v, value in frozen)
    print(f"{method}: frozen weights bit-identical: {unchanged}")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, f"{method}.safetensors")
        if method == "lora":
            adapters.save_lora(backbone, path)
        else:
            adapters.save_adapter(backbone, "task", path)
        print(f"{method}: saved {os.path.getsize(path)} bytes (the backbone alone holds "
              f"{4 * backbone.count_params()} bytes)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=4)
    args = scripts.parse_args(parser, argv, fast="64 sentences, 1 epoch")
    for method in ("lora", "houlsby"):
        if args.fast:
            run(method, args.rank, examples=64, epochs=1)
        else:
            run(method, args.rank)


if __name__ == "__main__":
    main()

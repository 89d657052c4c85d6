"""MAD-X in miniature: language adapters, a task adapter stacked on them, and the swap.

    python examples/madx_adapters.py [--pretrain-steps 1000] [--steps 400]
    python examples/madx_adapters.py --fast     # a smoke run in seconds

1. A small XLM pretrained with MLM + TLM on two synthetic languages (the
   frozen multilingual base; MAD-X uses XLM-R).
2. Per language, a language adapter (reduction factor 2, with an invertible
   adapter on the embeddings, inverted before the MLM output) trained by MLM
   on that language alone, everything else frozen.
3. A task adapter (reduction factor 16) stacked on language 1's adapter and
   trained with the classifier head on language 1's labels.
4. Zero-shot: swap language 2's adapter in under the same task adapter.
The adapters are saved alone (safetensors) and loaded into a fresh base.
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_ctx import peft as adapters, scripts  # noqa: E402
from keras_ctx.data import synthetic_languages as syn  # noqa: E402
from keras_ctx.models import XLMBackbone  # noqa: E402
from keras_ctx.tasks.heads import SequenceClassifier  # noqa: E402

import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xlm_tlm import monolingual_streams, parallel_pairs  # noqa: E402  (the same data)

CONFIG = dict(vocabulary_size=syn.vocabulary_size(2), num_languages=2, num_layers=2,
              num_heads=2, hidden_size=64, intermediate_size=256, max_sequence_length=24,
              dropout=0.0)


def fit_mlm(pretrainer, examples, steps, learning_rate):
    pretrainer.compile(optimizer=keras.optimizers.Adam(learning_rate), jit_compile=True)
    pretrainer.fit(syn.mlm_batches(examples, syn.vocabulary_size(2)), steps_per_epoch=steps,
                   epochs=1, shuffle=False, verbose=2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-steps", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=400)
    args = scripts.parse_args(parser, argv, fast="2 steps per stage")
    if args.fast:
        args.pretrain_steps = args.steps = 2
    keras.utils.set_random_seed(0)
    base = XLMBackbone(**CONFIG)
    mlm = monolingual_streams(64 if args.fast else 1024)
    tlm = parallel_pairs(128 if args.fast else 2048)
    from keras_ctx.pretraining import MaskedLMPretrainer

    fit_mlm(MaskedLMPretrainer(base), {k: np.concatenate([mlm[k], tlm[k]]) for k in mlm},
            args.pretrain_steps, 2e-3)
    base_weights = base.get_weights()  # the backbone file MAD-X never changes

    for language in (0, 1):
        name = f"lang{language}"
        adapters.add_adapter(base, name, "madx_language", activate=False)
        adapters.set_active_adapters(base, [name])
        pretrainer = adapters.AdapterMaskedLMPretrainer(base)
        adapters.train_only(pretrainer, adapters=[name])
        mine = mlm["language_ids"][:, 0] == language
        fit_mlm(pretrainer, {k: v[mine] for k, v in mlm.items()}, args.steps, 1e-3)
        # The adapter and the fresh MLM head's own weights (a checkpoint's head stays frozen).
        trained = sum(int(np.prod(v.shape)) for v in pretrainer.trainable_weights)
        print(f"{name}: {trained} trainable parameters of {pretrainer.count_params()}")

    adapters.add_adapter(base, "task", "madx_task", activate=False)
    adapters.set_active_adapters(base, ["lang0", "task"])
    classifier = SequenceClassifier(base, num_classes=2, pooling="first", dropout=0.0)
    count = adapters.train_only(classifier, adapters=["task"],
                                keep=[classifier.get_layer("logits")])
    print(f"task: {count} trainable parameters of {classifier.count_params()}")
    classifier.compile(keras.optimizers.Adam(1e-3),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=True)
    words, labels = syn.sentences(64 if args.fast else 1024, seed=2)
    classifier.fit(syn.xlm_inputs(syn.to_ids(words, 0), 0, 24), labels, batch_size=32,
                   epochs=max(1, args.steps * 32 // 1024), verbose=2)
    test, test_labels = syn.sentences(64 if args.fast else 400, seed=3)

    def accuracy(language):
        logits = classifier.predict(syn.xlm_inputs(syn.to_ids(test, language), language, 24),
                                    verbose=0)
        return float((logits.argmax(-1) == test_labels).mean())

    print(f"language 1 (trained): {accuracy(0):.3f}")
    print(f"language 2 through language 1's adapter: {accuracy(1):.3f}")
    adapters.set_active_adapters(base, ["lang1", "task"])
    print(f"language 2 with its own adapter swapped in (zero-shot): {accuracy(1):.3f}")

    with tempfile.TemporaryDirectory() as directory:
        for name in ("lang1", "task"):
            adapters.save_adapter(base, name, os.path.join(directory, f"{name}.safetensors"))
        config = base.get_config()
        config.pop("adapters")  # the plain base; the files bring the adapters
        fresh = XLMBackbone.from_config(config)
        fresh.set_weights(base_weights)
        for name in ("lang1", "task"):
            adapters.load_adapter(fresh, os.path.join(directory, f"{name}.safetensors"))
        inputs = syn.xlm_inputs(syn.to_ids(test[:8], 1), 1, 24)
        same = np.allclose(fresh(inputs)["sequence_output"], base(inputs)["sequence_output"],
                           atol=1e-5)
        print("adapters reloaded into a fresh base:", adapters.adapter_names(fresh),
              "same outputs:", same)


if __name__ == "__main__":
    main()

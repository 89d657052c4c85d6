"""BERT, RoBERTa, ALBERT or SpanBERT in miniature: pretrain on a text file, then fine-tune.

Runs on CPU in under a minute:

    python examples/bert_pretrain_finetune.py                       # BERT: MLM + NSP
    python examples/bert_pretrain_finetune.py --model roberta       # dynamic MLM, packing, BPE
    python examples/bert_pretrain_finetune.py --model albert        # MLM + SOP, SentencePiece
    python examples/bert_pretrain_finetune.py --model spanbert      # span masking + SBO
    python examples/bert_pretrain_finetune.py --text my_corpus.txt  # your own text
    python examples/bert_pretrain_finetune.py --fast                # a smoke run in seconds

1. Text: a file in BERT's format (one sentence per line, blank lines between
   documents). Without --text the script writes one itself: short documents
   of sentences about one of two topics (`keras_ctx.data.synthetic_text`).
2. Tokenizer: trained on that text (WordPiece / byte-level BPE / SentencePiece).
3. Pretraining: the family's `keras_ctx.data.pipelines` builder (tokenize,
   pairs or packing, masking, all in tf.data) feeds the family's pretrainer
   under XLA. Both come from the family's entry in `keras_ctx.families`.
4. Fine-tuning: the pretrained backbone classifies a sentence's topic with
   `keras_ctx.tasks.SequenceClassifier` (pooled as the family says), its
   texts framed by `keras_ctx.preprocessing.TextPreprocessor`.
"""

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_ctx import families, scripts  # noqa: E402
from keras_ctx.data import tokenizers  # noqa: E402
from keras_ctx.data import synthetic_text  # noqa: E402
from keras_ctx.data.corpora import documents, text_lines  # noqa: E402
from keras_ctx.models import from_preset  # noqa: E402
from keras_ctx.preprocessing import TextPreprocessor  # noqa: E402
from keras_ctx.tasks import SequenceClassifier  # noqa: E402

SEQUENCE_LENGTH, BATCH_SIZE = 64, 16

# Every family that pretrains on tokenized text (the registry says which); its
# first preset, shrunk to run on a CPU.
MODELS = [name for name in families.names() if families.get(name).inputs == "tokens"
          and families.get(name).dataset is not None]
SMALL = dict(num_layers=2, num_heads=2, hidden_size=64, intermediate_size=256,
             max_sequence_length=SEQUENCE_LENGTH, dropout=0.0, embedding_size=32)


def backbone_for(family, vocabulary_size):
    import inspect

    preset = next(iter(family.presets))
    # Only the sizes this backbone has (ALBERT and ELECTRA factor the embedding, E < H).
    accepted = inspect.signature(family.backbone.__init__).parameters
    small = {k: v for k, v in SMALL.items() if k in accepted}
    return preset, from_preset(preset, vocabulary_size=vocabulary_size, **small)


def fine_tune(backbone, tokenizer, family, steps, count=512):
    texts, labels = synthetic_text.labelled_sentences(count)
    preprocess = TextPreprocessor(tokenizer, SEQUENCE_LENGTH, family,
                                  truncation="longest_first")
    data = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(1).map(
        lambda text, label: ({k: v[0] for k, v in preprocess(text).items()}, label[0]))
    train = data.take(count * 3 // 4).batch(BATCH_SIZE, drop_remainder=True).cache()
    test = data.skip(count * 3 // 4).batch(BATCH_SIZE, drop_remainder=True).cache()
    classifier = SequenceClassifier(backbone, num_classes=2)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-3),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                       metrics=["accuracy"], jit_compile=True)
    # shuffle=False: tf.data batches come in the order the pipeline made them.
    classifier.fit(train.repeat(), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    return classifier.evaluate(test, verbose=0, return_dict=True)["accuracy"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="bert")
    parser.add_argument("--text", help="a text file (one sentence per line, blank lines "
                                       "between documents); default: one made here")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--vocabulary-size", type=int, default=300)
    args = scripts.parse_args(parser, argv, fast="40 documents, 3 steps")
    if args.fast:
        args.steps = 3
    keras.utils.set_random_seed(0)
    family = families.get(args.model)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.text
        if path is None:
            path = os.path.join(tmp, "corpus.txt")
            synthetic_text.write_corpus(path, 40 if args.fast else 400)
        tokenizer = family.train_tokenizer(text_lines(path), args.vocabulary_size)
        vocabulary_size = tokenizer.vocabulary_size()
        preset, backbone = backbone_for(family, vocabulary_size)
        tokenizers.check_vocabulary(tokenizer, backbone)

        run = families.Run(preset, BATCH_SIZE, SEQUENCE_LENGTH, vocabulary_size)
        data = family.dataset(documents(path), tokenizer, run)
        pretrainer = family.pretrainer(backbone, tokenizer, run)
        pretrainer.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=True)
        history = pretrainer.fit(data.repeat(), steps_per_epoch=args.steps // 3, epochs=3,
                                 shuffle=False,
                                 verbose=0).history
        print(f"{args.model} pretraining ({vocabulary_size} tokens):")
        for name, values in history.items():
            print(f"  {name:14s} " + " -> ".join(f"{v:.3f}" for v in values))

        # Even --fast fine-tunes long enough to learn the topics (above chance, 0.5).
        accuracy = fine_tune(backbone, tokenizer, family, steps=24 if args.fast else 60,
                             count=160 if args.fast else 512)
        print(f"fine-tuned topic classification, held-out accuracy: {accuracy:.3f}")


if __name__ == "__main__":
    main()

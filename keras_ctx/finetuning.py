"""`keras-ctx finetune`: a sequence classifier on a pretrained run, from a TSV.

Texts become inputs through the family's `TextPreprocessor` (the ids that
pretraining and `serve_text` see); the classifier pools as the family's
registry entry says (`SequenceClassifier(pooling="auto")`).
"""

import os

import keras
import numpy as np

from keras_ctx import families, runs
from keras_ctx.word_vectors import text_inputs


def read_labelled_tsv(path):
    texts, labels = [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            text, sep, label = line.rstrip("\n").rpartition("\t")
            if not sep or not text:
                raise ValueError(f"{path}:{number}: expected text<TAB>label.")
            texts.append(text)
            labels.append(label)
    if not texts:
        raise ValueError(f"{path} has no examples.")
    return texts, labels


def finetune(run_dir, train, out, epochs=3, batch_size=16, learning_rate=5e-5, export=None):
    """Fine-tunes the run's backbone on `train` (text<TAB>label); saves OUT/classifier.keras."""
    from keras_ctx.tasks import SequenceClassifier

    info, backbone, tokenizer = runs.load_run(run_dir)
    family = families.get(info["family"])
    backbone.family = family.name
    texts, labels = read_labelled_tsv(train)
    classes = sorted(set(labels))
    y = np.array([classes.index(label) for label in labels], "int32")
    inputs, _ = text_inputs(family, tokenizer, texts, info["sequence_length"])
    inputs = {k: v for k, v in inputs.items() if k in backbone.input}
    model = SequenceClassifier(backbone, num_classes=len(classes))
    model.compile(keras.optimizers.AdamW(learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(inputs, y, batch_size=batch_size, epochs=epochs, verbose=2)
    os.makedirs(out, exist_ok=True)
    model.save(os.path.join(out, "classifier.keras"))
    print(f"Saved the classifier ({len(classes)} classes: {classes}) to {out}.")
    if export:
        from keras_ctx.export import export_saved_model

        export_saved_model(model, export, overwrite=True,
                           sequence_length=info["sequence_length"])
    return model

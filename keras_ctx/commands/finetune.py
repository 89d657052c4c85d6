"""`keras-ctx finetune`: a sequence classifier on a pretrained run, from a TSV.

Texts become inputs through the family's `TextPreprocessor` (the ids that
pretraining and `serve_text` see); the classifier pools as the family's
registry entry says (`SequenceClassifier(pooling="auto")`).
"""

import math
import os

import keras
import numpy as np

from keras_ctx import families, handles, runs
from keras_ctx.commands import adapter_stack
from keras_ctx.common.progress import say
from keras_ctx.preprocessing import text_inputs


def finetune(run_dir, train, out, epochs=None, batch_size=None, learning_rate=None, export=None,
             overwrite=False, header=None, keep_optimizer_state=False, language=None,
             freeze_token_embeddings=False, task_adapter=False, language_adapter=None):
    """Fine-tunes the run's backbone on `train` (text<TAB>label); saves OUT/classifier.keras.

    `epochs`, `batch_size`, `learning_rate`: None for keras_ctx's 3 epochs of batches of 16
    at 5e-5, or, with `task_adapter`, AdapterHub's 10 epochs of 32 at 1e-4, its rate falling
    linearly to 0 (`adapter_stack.adapter_optimizer`).
    `header`: whether the TSV's first line is a header (None: detect). Nothing
    that exists is replaced unless `overwrite`; every check runs before training.
    `keep_optimizer_state`: save AdamW's two moments per weight too (the file is
    then about three times the model; `keras.saving.load_model` gives a compiled
    classifier whose `fit` goes on from them); by default the weights alone.
    `language`: the texts' language code, for a model of several (XLM: `--language`).
    `freeze_token_embeddings`: the backbone's token table stays as it is (monolingual
    transfer's step 3, `keras_ctx.tasks.monolingual_transfer`; `keras-ctx transfer-swap`
    then swaps another language's in).
    `task_adapter`: train a MAD-X task adapter and the head only, the backbone frozen;
    `language_adapter`: a language adapter file (`keras-ctx adapter-language`) stacked,
    frozen, under it (`keras_ctx.commands.adapter_stack`).
    """
    from keras_ctx.common import files, validation
    from keras_ctx.data.labelled import read_labelled_tsv
    from keras_ctx.export import check_export_target

    validation.check_args(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate)
    validation.check_given(train=train, out=out, export=export, language=language)
    adapter_stack.check_task_flags(task_adapter, language_adapter)
    # Unset: AdapterHub's task-adapter command's for a task adapter, else keras_ctx's own.
    defaults = ((adapter_stack.TASK_EPOCHS, adapter_stack.TASK_BATCH_SIZE,
                 adapter_stack.LEARNING_RATE) if task_adapter else (3, 16, 5e-5))
    epochs, batch_size, learning_rate = (
        default if given is None else given
        for given, default in zip((epochs, batch_size, learning_rate), defaults))
    target = os.path.join(out, runs.CLASSIFIER_FILE)
    if os.path.exists(target) and not overwrite:
        raise runs.RunDirectoryError(f"{target} already exists; pass --overwrite to "
                                     "replace it, or choose another --out.")
    if export:
        check_export_target(export, 1, overwrite)
        check_export_target(_text_copy(export), 1, overwrite)
    validation.check_export_path(export)
    with files.naming_decode_errors(train):
        texts, labels = read_labelled_tsv(train, header=header)
    with runs.writing(out):  # a second finetune (or pretrain, convert) into OUT refuses
        return _finetune(run_dir, out, target, texts, labels, epochs, batch_size,
                         learning_rate, export, overwrite, bool(keep_optimizer_state),
                         language, bool(freeze_token_embeddings),
                         (task_adapter, language_adapter))


def _finetune(run_dir, out, target, texts, labels, epochs, batch_size, learning_rate, export,
              overwrite, keep_optimizer_state, language, freeze_token_embeddings=False,
              adapters=(False, None)):
    from keras_ctx.common import files
    from keras_ctx.tasks import SequenceClassifier

    if os.path.exists(target) and not overwrite:  # again, now that OUT is ours
        raise runs.RunDirectoryError(f"{target} already exists; pass --overwrite to "
                                     "replace it, or choose another --out.")
    say(f"Loading the backbone and tokenizer of {run_dir}...")
    info, backbone, tokenizer = handles.load(run_dir, need_tokenizer=True)
    family = families.get(info["family"])
    backbone.family = family.name
    classes = sorted(set(labels))
    y = np.array([classes.index(label) for label in labels], "int32")
    say(f"Tokenizing {len(texts):,} examples ({len(classes)} classes) to "
        f"{info['sequence_length']} tokens...")
    inputs, preprocessor = text_inputs(family, tokenizer, texts, info["sequence_length"],
                                       language, getattr(backbone, "languages", None))
    inputs = {k: v for k, v in inputs.items() if k in backbone.input}
    model = SequenceClassifier(backbone, num_classes=len(classes))
    if freeze_token_embeddings:
        _freeze_token_embeddings(model, backbone, run_dir)
    stack = adapter_stack.with_task_adapter(model, backbone, adapters[1]) if adapters[0] else None
    # A task adapter trains as AdapterHub's run_glue.py command does: Trainer's optimizer,
    # its rate falling linearly over the run's updates (ceil(n / batch) an epoch).
    optimizer = (adapter_stack.adapter_optimizer(learning_rate,
                                                 epochs * math.ceil(len(texts) / batch_size))
                 if adapters[0] else keras.optimizers.AdamW(learning_rate))
    model.compile(optimizer,
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    say(f"Fine-tuning {model.count_params():,} parameters for {epochs} epoch"
        f"{'s' * (epochs != 1)} (the first compiles the training step)...")
    model.fit(inputs, y, batch_size=batch_size, epochs=epochs, verbose=2)
    say(f"Saving the classifier to {target} ("
        + ("its weights and AdamW's two moments of each: about three times the model's size"
           if keep_optimizer_state else "its weights; --keep-optimizer-state adds AdamW's "
           "moments, for fitting on") + ")...")
    with files.replacing(target, overwrite=overwrite) as staging:
        (model if keep_optimizer_state else _weights_only(model)).save(staging)
    # What `export` and the refusals of `embed` / `finetune` read back.
    runs.save_finetuned_info(out, {"run": handles.canonical(run_dir), "family": family.name,
                                   "sequence_length": info["sequence_length"],
                                   "classes": [str(c) for c in classes]})
    if stack is not None:
        adapter_stack.save_task_adapter(model, out, stack, overwrite)
    print(f"Saved the classifier ({len(classes)} classes: {classes}) to {out}.")
    if export:
        _export(model, export, overwrite, info["sequence_length"], [str(c) for c in classes],
                family, tokenizer, preprocessor)
    return model


def _freeze_token_embeddings(model, backbone, run_dir):
    """Monolingual transfer's step 3: every weight trains but the token table."""
    from keras_ctx.common.errors import ConfigError
    from keras_ctx.tasks import monolingual_transfer

    try:
        monolingual_transfer.freeze_token_embeddings(model, backbone)
    except ValueError:
        raise ConfigError(f"--freeze-token-embeddings: {run_dir}'s backbone has no token "
                          "embedding table; leave the flag out.") from None
    say("Token embeddings frozen (monolingual transfer's step 3).")


def _text_copy(export):
    """Where the text-in copy of an export goes (as `pretrain --export` puts it)."""
    return export.rstrip("/") + "-text"


def _export(model, export, overwrite, sequence_length, class_names, family, tokenizer,
            preprocessor):
    """The classifier as a SavedModel (ids in) and, for a family with a text framing, a
    copy that also takes strings (serve_text; its server needs tensorflow-text's ops)."""
    from keras_ctx.export import export_saved_model
    from keras_ctx.preprocessing import TextPreprocessor

    path = export_saved_model(model, export, overwrite=overwrite,
                              sequence_length=sequence_length, class_names=class_names)
    print(f"Exported the classifier as a SavedModel to {path} (token ids in; "
          f"{len(class_names)} class logits, probabilities and names out; `saved_model_cli "
          f"show --dir {path} --all` lists its signatures).")
    if family.framing is None or not getattr(tokenizer, "in_graph", True):
        return
    say(f"Also exporting a text-in copy (serve_text: strings in, for servers with "
        f"tensorflow-text ops) to {_text_copy(export)}...")
    path = export_saved_model(model, _text_copy(export), overwrite=overwrite,
                              sequence_length=sequence_length, class_names=class_names,
                              preprocessor=TextPreprocessor(
                                  tokenizer, sequence_length, family.name,
                                  language=preprocessor.language,
                                  languages=preprocessor.languages))
    print(f"Exported the text-in copy to {path}: serve_text(['a sentence']) gives the label.")


def _weights_only(model):
    """The classifier without its optimizer: Keras saves a compiled model's optimizer
    variables with it (two per weight for AdamW), and has no flag to leave them out."""
    plain = model.__class__.from_config(model.get_config())
    plain.set_weights(model.get_weights())
    return plain

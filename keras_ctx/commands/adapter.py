"""MAD-X's three stages from the command line (Pfeiffer et al. 2020, Fig. 1).

Over a frozen pretrained multilingual model (mBERT, XLM-R in the paper; here any
keras_ctx encoder whose blocks host adapters):

1. `keras-ctx adapter-language SOURCE --text FILE --language CODE --out DIR`: a language
   adapter and its invertible adapter, trained by masked LM on that language's text
   (`language_adapter`), saved alone (`keras_ctx.peft.save_adapter`);
2. `keras-ctx finetune SOURCE --train TSV --task-adapter --language-adapter FILE`: a task
   adapter stacked on the source language's adapter, only it and the classifier's head
   trained (`keras_ctx.commands.adapter_stack`);
3. `keras-ctx export FINETUNED OUT --language-adapter OTHER`: the target language's adapter
   replaces the source's under the task adapter (`adapter_stack.with_language_adapter`).

The released settings are the defaults: reduction factors 2 (language adapter, 384 units
on a 768-wide model) and 2 (each invertible half; `keras_ctx.layers.adapters.ADAPTER_CONFIGS`),
batches of 64 (Adapter-Hub/Hub @2d14130, adapters/ukp/*-wiki_pfeiffer.yaml: the MAD-X
language adapters, `reduction_factor: 2`, "trained with Masked Language Modelling on ...
Wikipedia Articles for 250k / 100k / 50k steps and a batch size of 64") and a learning
rate of 1e-4 (adapter-hub/adapters docs/training.md @88f18eb, "Train a Language Adapter":
`--learning_rate 1e-4`), with the rest of Hugging Face Trainer's optimizer (no weight decay,
epsilon 1e-8, global-norm clip 1.0, linear decay to 0: `adapter_stack.adapter_optimizer`)
and the model's whole length (512 for mBERT: the scripts' block size). The steps (300) are
keras_ctx's own.
"""

import os

from keras_ctx import families, handles, peft
from keras_ctx.commands.adapter_stack import (LANGUAGE_ADAPTER_FILE, LEARNING_RATE,
                                              adapter_optimizer)
from keras_ctx.common import files, validation
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.progress import say
from keras_ctx.layers.adapters import ADAPTER_CONFIGS

LANGUAGE_INFO_FILE = "language_adapter.json"
SETTINGS_FILE = "adapter_settings.json"  # what a resumed stage 1 must match
# MAD-X's released language adapters: "a batch size of 64" (Adapter-Hub/Hub @2d14130,
# adapters/ukp/*-wiki_pfeiffer.yaml).
LANGUAGE_BATCH_SIZE = 64
LANGUAGE_REDUCTION_FACTOR = ADAPTER_CONFIGS["madx_language"]["reduction_factor"]
# The released scripts' length when the model has no limit of its own: run_language_modeling.py's
# --block_size and run_mlm.py's --max_seq_length default to the tokenizer's maximum, 512 for
# mBERT and XLM-R (adapter-hub/adapter-transformers @6303b5a; AdapterHub's language-adapter
# command, adapter-hub/adapters docs/training.md @88f18eb, sets neither).
RELEASED_SEQUENCE_LENGTH = 512


def _adapter_language(language):
    if not str(language).isidentifier():
        raise ConfigError(f"--language {language!r}: an adapter's name is made of letters, "
                          "digits and _ (e.g. en, zh_Hans).")
    return str(language)


def add_language_adapter(backbone, language, reduction_factor, handle):
    """Stage 1's model: MAD-X's language adapter (and its invertible adapter) in every
    block of `backbone`, the only adapter switched on; refuses a model without adapter
    sites in one line."""
    try:
        peft.add_adapter(backbone, language, "madx_language",
                         reduction_factor=reduction_factor)
    except ValueError as error:
        raise ConfigError(f"{handle} cannot take a MAD-X language adapter: {error}") from None
    peft.set_active_adapters(backbone, [language])


def language_adapter(source, text, language, out, steps=300, batch_size=LANGUAGE_BATCH_SIZE,
                     sequence_length=None, learning_rate=LEARNING_RATE,
                     reduction_factor=LANGUAGE_REDUCTION_FACTOR, checkpoint_every=100,
                     seed=0, resume=True, overwrite=False):
    """Stage 1: trains a language adapter on `text` by masked LM, the model frozen.

    The adapter and its invertible adapter train, with a fresh masked-LM head when the
    checkpoint has none (a checkpoint's head stays frozen: `AdapterMaskedLMPretrainer`);
    every other weight stays as read. Examples are RoBERTa's (packed sentences, dynamic
    masks, no sentence-pair task), as MAD-X trains by MLM alone. Training checkpoints
    into `out` and resumes there (`keras_ctx.training.fit_resumable`); the adapter is
    saved alone to OUT/language_adapter.safetensors (its config and the backbone it was
    made for inside), described by OUT/language_adapter.json.

    Args:
        source: the pretrained model (a run, a checkpoint directory, hf://...).
        text: the language's text (a file, a directory of .txt files or a glob).
        language: the adapter's name (a language code of letters, digits and _).
        steps, batch_size, learning_rate, checkpoint_every, seed: as `keras-ctx pretrain`
            (`batch_size` 64 and `learning_rate` 1e-4: MAD-X's; `steps` keras_ctx's own).
            The rate falls linearly to 0 over `steps` (`adapter_stack.adapter_optimizer`).
        sequence_length: tokens per example (default: the source's position limit, its
            `max_sequence_length`, as the released scripts' block size is the tokenizer's
            maximum; 512 where the model has none).
        reduction_factor: hidden / bottleneck width (2: MAD-X's).
        resume: continue from the last checkpoint in `out`.
        overwrite: replace a language adapter already saved in `out`.

    Returns:
        {"backbone": the backbone with the trained adapter, "path": the adapter file,
         "first_loss": the first step's loss in this process, "last_loss": the last
         chunk's, "step": steps done}.
    """
    from keras_ctx.data import corpora

    validation.check_args(steps=steps, batch_size=batch_size, sequence_length=sequence_length,
                          learning_rate=learning_rate, checkpoint_every=checkpoint_every,
                          seed=seed, reduction_factor=reduction_factor)
    validation.check_given(source=source, text=text, language=language, out=out)
    reduction_factor = validation.positive_int("reduction_factor", reduction_factor)
    language = _adapter_language(language)
    corpora.resolve_files(text)  # a missing file is refused before anything loads
    target = os.path.join(out, LANGUAGE_ADAPTER_FILE)
    if os.path.exists(target) and not overwrite:
        raise ConfigError(f"{target} already exists; pass --overwrite to replace it, or "
                          "choose another --out.")
    with files.writing(out):  # a second command writing OUT refuses
        return _train_language(source, text, language, out, target, steps, batch_size,
                               sequence_length, learning_rate, reduction_factor,
                               checkpoint_every, seed, resume)


def _claim_settings(out, settings, resume):
    """Records stage 1's settings in OUT; a resumed run with other settings is refused."""
    path = os.path.join(out, SETTINGS_FILE)
    if resume and os.path.isfile(path):
        earlier = files.read_json(path, "a language adapter's settings")
        for key in sorted(set(earlier) | set(settings)):
            if earlier.get(key) != settings.get(key):
                raise ConfigError(
                    f"{out} holds a language adapter trained with {key}={earlier.get(key)!r}, "
                    f"and this run has {key}={settings.get(key)!r}: give the same settings "
                    "to resume, or --no-resume to start over.")
    files.write_json(path, settings)


def language_adapter_dataset(documents, tokenizer, batch_size, sequence_length, seed=0):
    """Stage 1's examples (unrepeated): RoBERTa's FULL-SENTENCES rows of `documents`
    (a `keras_ctx.data.corpora.documents` dataset) with dynamic masks, 15% of the tokens
    that may be masked, as the released language-adapter scripts draw them (Hugging Face's
    DataCollatorForLanguageModeling over the non-special tokens), not 15% of the row with
    its separators counted (BERT's budget), which masked more of the text where a row
    holds many documents."""
    from keras_ctx.data.pipelines import roberta_dataset

    return roberta_dataset(documents, tokenizer, batch_size, sequence_length, seed=seed,
                           count_specials=False)


def _check_no_language_ids(family, source):
    """Refuses a model that reads a language id with each token (XLM's): the masked LM
    here feeds none, so every text would read as the model's language 0."""
    if family.framing is not None and family.framing.positions:
        raise ConfigError(f"{source} is a {family.name} model, which reads a language id with "
                          "each token; MAD-X's language adapters train over a model without "
                          "language embeddings (mBERT, XLM-R: Pfeiffer et al. 2020): use one.")


def _train_language(source, text, language, out, target, steps, batch_size, sequence_length,
                    learning_rate, reduction_factor, checkpoint_every, seed, resume):
    import keras

    from keras_ctx.commands.pretrain import TrainingProgress, use_xla
    from keras_ctx.data import corpora
    from keras_ctx.training import fit_resumable

    say(f"Loading {source}...")
    origin = handles.resolve(source, head=True, need_tokenizer=True)
    backbone, tokenizer = origin.backbone, origin.tokenizer
    _check_no_language_ids(families.get(origin.info["family"]), source)
    length = (sequence_length or getattr(backbone, "max_sequence_length", None)
              or RELEASED_SEQUENCE_LENGTH)
    keras.utils.set_random_seed(seed)  # the adapter's first weights, the masks, the data
    add_language_adapter(backbone, language, reduction_factor, source)
    settings = {"source": handles.canonical(source), "language": language,
                "text": [os.path.abspath(f) for f in corpora.resolve_files(text)],
                "reduction_factor": reduction_factor, "sequence_length": length,
                "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed}
    _claim_settings(out, settings, resume)
    pretrainer = peft.AdapterMaskedLMPretrainer(backbone, mlm_head=origin.head)
    trained = peft.train_only(pretrainer, adapters=[language])
    say(f"Training the {language!r} language adapter ({trained:,} parameters; the "
        f"{backbone.count_params() - trained:,} of {source} stay frozen) by masked LM on "
        f"{text}...")
    dataset = language_adapter_dataset(corpora.documents(text), tokenizer, batch_size, length,
                                       seed=seed).repeat()
    pretrainer.compile(optimizer=adapter_optimizer(learning_rate, steps),
                       jit_compile=use_xla("auto"))
    tracker = TrainingProgress(steps)
    result = fit_resumable(pretrainer, dataset, steps, out, checkpoint_every=checkpoint_every,
                           resume=resume, callbacks=[tracker], verbose=2)
    last = result["history"][-1].get("loss") if result["history"] else None
    peft.save_adapter(backbone, language, target, overwrite=True)
    files.write_json(os.path.join(out, LANGUAGE_INFO_FILE), {
        "stage": "language adapter (MAD-X)", "file": LANGUAGE_ADAPTER_FILE,
        "language": language, "made_for": peft.made_for(backbone),
        "config": peft.adapter_sites_of(backbone, language)[0][1].configs[language],
        "steps": result["step"], **{k: v for k, v in settings.items() if k != "language"}})
    print(f"Saved the {language!r} language adapter to {target}"
          + (f" (loss {tracker.first_loss:.3f} at the first step -> {last:.3f})."
             if tracker.first_loss is not None and last is not None else "."))
    return {"backbone": backbone, "path": target, "first_loss": tracker.first_loss,
            "last_loss": last, "step": result["step"]}

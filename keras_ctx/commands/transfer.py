"""`keras-ctx transfer-vocabulary` and `transfer-swap`: monolingual transfer from the CLI.

Monolingual transfer (Artetxe, Ruder & Yogatama 2020, "On the Cross-lingual Transferability
of Monolingual Representations") in four steps, each a command:

    1. keras-ctx pretrain PRESET --corpus L1.txt --out L1          (MLM on L1)
    2. keras-ctx transfer-vocabulary L1 --text L2.txt --out L2     (L2's tokenizer and
       token embeddings, learned by the family's objective with every other weight frozen)
    3. keras-ctx finetune L1 --train task.tsv --out CLS --freeze-token-embeddings
    4. keras-ctx transfer-swap CLS --embeddings L2 --out CLS-L2    (the classifier reading
       L2's ids with L2's embeddings: zero-shot on L2)

Step 2's directory is a run (`embed`, `finetune`, `export` read it) whose body is the
source's bit for bit; it also keeps `TRANSFER_FILE`, which step 4 checks the classifier
against: its frozen token table must be the one step 2's source had, else it was not
fine-tuned from that source with its embeddings frozen.
"""

import os

import keras
import numpy as np

from keras_ctx import families, handles, runs
from keras_ctx.commands.pretrain import fit_saying, optimizer, use_xla
from keras_ctx.common import files, validation
from keras_ctx.common.errors import ConfigError, RunDirectoryError
from keras_ctx.common.progress import say
from keras_ctx.backend import build_from_spec
from keras_ctx.commands.pretrain_from import source_heads
from keras_ctx.pretraining.kept_head import (head_weights, objective_heads, own_weights,
                                             restore_head, restore_heads)
from keras_ctx.pretraining.masked_lm import sequence_width
from keras_ctx.run_files import OUTPUT_HEAD
from keras_ctx.tasks import monolingual_transfer as mono

# Step 2's record beside its run: the source, the fingerprint of the source's token table
# (what a classifier fine-tuned with it frozen still holds) and of the body (the source's).
TRANSFER_FILE = "transfer.json"
TRANSFER_SCHEMA = {"source": (str, None, True), "source_table_sha256": (str, None, True),
                   "body_sha256": (str, None, True)}


def transfer_vocabulary(source, text, out, vocabulary_size=None, steps=300, batch_size=16,
                        sequence_length=None, learning_rate=None, seed=0,
                        checkpoint_every=100, resume=True, xla="auto"):
    """Step 2: L2's tokenizer and token embeddings for `source`'s body, into the run `out`.

    The family's own tokenizer is trained on `text` (L2; `vocabulary_size` entries,
    default the source's: keras_ctx's own choice); a copy of the source's backbone
    with fresh token embeddings of that size then trains on `text` with the family's
    pretraining objective, every weight frozen but the token table and the masked-LM
    output bias (Artetxe et al. 2020: "learning a new embedding matrix with the same
    masked language modeling objective, freezing parameters of all other layers").
    The head's transform continues the source's where its run or checkpoint kept one,
    frozen; without one it starts new and trains (said). Resumable as `pretrain`:
    checkpoints in OUT/checkpoints, the tokenizer kept from the first start.

    Returns the run.json info written to `out`.
    """
    validation.check_args(steps=steps, batch_size=batch_size, sequence_length=sequence_length,
                          vocabulary_size=vocabulary_size, learning_rate=learning_rate,
                          seed=seed, checkpoint_every=checkpoint_every)
    validation.check_given(source=source, text=text, out=out)
    validation.one_of("xla", xla, ("auto", "on", "off"))
    if not os.path.exists(text):
        raise ConfigError(f"--text {text} does not exist; give L2's text (a file, a directory "
                          "or a glob of files, one sentence a line).")
    if os.path.exists(source) and os.path.abspath(source) == os.path.abspath(out):
        raise ConfigError(f"--out {out} is SOURCE itself: step 2 writes a new run beside it.")
    with files.writing(out):
        existing = runs.look(out)
        origin = handles.resolve(source, head=True, need_tokenizer=True)
        family = families.get(origin.info["family"])
        _check_family(family, origin)
        from keras_ctx.data import corpora, fingerprints
        from keras_ctx.data.tokenizers import TOKENIZER_SAMPLE, train_tokenizer
        from keras_ctx.registry import Run

        run = Run(preset=origin.info.get("model") or family.name, batch_size=batch_size,
                  sequence_length=sequence_length or origin.info["sequence_length"],
                  vocabulary_size=vocabulary_size or origin.tokenizer.vocabulary_size(),
                  seed=seed)
        settings = {"model": run.preset, "from": handles.canonical(source),
                    "corpus": os.path.abspath(text), "sequence_length": run.sequence_length,
                    "batch_size": batch_size, "vocabulary_size": run.vocabulary_size,
                    "seed": seed, "learning_rate": learning_rate, "steps": steps,
                    "checkpoint_every": checkpoint_every, "xla": xla}
        keras.utils.set_random_seed(seed)
        claimed = runs.claimed_tokenizer(out, existing) if resume else None
        if claimed is not None:
            say("Reusing the L2 tokenizer this run was started with.")
        tokenizer, sampled = claimed or train_tokenizer(
            family, corpora.sample_sentences(text, seed=seed), run)
        dataset = family.dataset(corpora.documents(text), tokenizer, run).repeat()
        backbone, pretrainer, trainable, head_kept = _l2_model(family, origin, tokenizer,
                                                               run, dataset)
        body = mono.fingerprint(mono.body_weights(origin.backbone))
        record = {"source": handles.canonical(source),
                  "source_table_sha256": mono.table_fingerprint(origin.backbone),
                  "body_sha256": body}
        pretrainer.compile(optimizer=optimizer(learning_rate, steps, family,
                                               getattr(backbone, "hidden_size", 512)),
                           jit_compile=use_xla(xla))
        saved_tokenizer, extra = family.run_files(tokenizer)
        kept = {k: v for k, v in extra.items() if k != TOKENIZER_SAMPLE}
        hashes = []

        def save_tokenizer():
            if claimed is None:
                runs.save_claimed_tokenizer(out, tokenizer, sampled)
            hashes.append(runs.tokenizer_fingerprint(out, tokenizer, kept))
            return hashes[-1]

        runs.claim(out, settings, fresh=not resume,
                   data={"corpus": fingerprints.corpus(text)}, existing=existing,
                   save_tokenizer=save_tokenizer)
        say(f"Step 2 of monolingual transfer: {trainable:,} parameters train (L2's "
            f"{backbone.vocabulary_size:,} token embeddings and the masked-LM output bias"
            f"{'' if head_kept else ', and the heads that start new'}); "
            f"the body's {backbone.count_params() - _table_size(backbone):,} stay the "
            "source's.")
        result = fit_saying(pretrainer, dataset, steps, out, checkpoint_every, resume,
                            existing.step if resume else 0)
        if mono.fingerprint(mono.body_weights(backbone)) != body:
            raise RuntimeError("The body changed while L2's embeddings trained; it must stay "
                               "frozen (a bug: report it).")
        info = {"model": origin.info.get("model"), "family": family.name,
                "sequence_length": run.sequence_length, "corpus": os.path.abspath(text),
                "steps": steps, "seed": seed, **sampled, **kept}
        # Before run.json, which save_run writes last: a finished run always has it.
        files.write_json(os.path.join(out, TRANSFER_FILE), record)
        if result["history"] or not os.path.isfile(os.path.join(out, runs.RUN_FILE)):
            runs.save_run(out, info, backbone, saved_tokenizer, overwrite=True,
                          tokenizer_sha256=hashes[-1], head_weights=head_weights(pretrainer))
        print(f"Saved L2's tokenizer and token embeddings with {source}'s body to {out} "
              f"(step 2); fine-tune {source} with --freeze-token-embeddings (step 3), then "
              f"`keras-ctx transfer-swap CLASSIFIER --embeddings {out}` (step 4).")
    return info


def _check_family(family, origin):
    """Refuses in one line a source whose family has no recipe, no token table or no
    tokenizer-sized vocabulary."""
    try:
        mono.body_weights(origin.backbone)
    except ValueError:
        raise ConfigError(f"{origin.handle} is a {family.name} model, which has no token "
                          "embedding table to learn for L2; monolingual transfer needs "
                          "one (BERT, RoBERTa, ALBERT, ...).") from None
    languages = getattr(origin.backbone, "languages", None) or ()
    if len(languages) > 1:  # its recipe would read L2 as language 0, one of L1's
        raise ConfigError(f"{origin.handle} is a model of {len(languages)} languages "
                          f"({', '.join(languages)}); monolingual transfer starts from a "
                          "model of one language (Artetxe et al. 2020): use one.")
    if family.dataset is None or not family.sized_by_tokenizer:
        raise ConfigError(f"{origin.handle} is a {family.name} model, which `keras-ctx "
                          "transfer-vocabulary` cannot give a new vocabulary: its family "
                          "has no pretraining recipe over a trained tokenizer.")


def _l2_model(family, origin, tokenizer, run, dataset):
    """(L2 backbone, its pretrainer with all but L2's embeddings frozen, the count of what
    trains, whether every head continues the source's)."""
    size = tokenizer.vocabulary_size() + family.extra_tokens
    backbone = mono.resize_vocabulary(origin.backbone, size, seed=run.seed)
    pretrainer = family.pretrainer(backbone, tokenizer, run)
    head = getattr(pretrainer, "mlm_head", None)  # XLM's CLM PredLayer, GPT's table: none
    if head is None:
        raise ConfigError(f"{origin.handle} is a {family.name} model, whose objective has no "
                          "masked-LM head to learn L2's embeddings through; monolingual "
                          "transfer needs one (BERT, RoBERTa, ALBERT, ...).")
    build_from_spec(pretrainer, dataset.element_spec)  # every head, before it is frozen
    kept = source_heads(origin)
    output = kept.pop(OUTPUT_HEAD, None)
    new = []
    if output is not None:
        _restore_transform(head, output, origin.handle)
    else:
        new.append(OUTPUT_HEAD)
    continued, fresh = restore_heads(pretrainer, kept, sequence_width(backbone), origin.handle)
    new += [role for role in fresh if role != OUTPUT_HEAD]
    heads = objective_heads(pretrainer)
    also = [v for role in new for v in own_weights(heads[role]) if v is not head.output_bias]
    if output is not None or continued:
        say(f"The objective's heads continue {origin.handle}'s, frozen, but the masked-LM "
            "output bias, which is L2's (learned).")
    for role in new:
        say(f"{origin.handle} kept no {role.replace('_', ' ')} head: it starts new and "
            "learns with L2's embeddings.")
    return backbone, pretrainer, mono.learn_token_embeddings(pretrainer, also), not new


def _table_size(backbone):
    return int(np.prod(backbone.token_embedding.embeddings.shape))


def _restore_transform(head, kept, source):
    """Assigns the kept head's weights but its vocabulary-sized output bias (L2's, learned)
    to `head` (`restore_head`, which refuses other shapes in one line)."""
    own = head.own_weights
    at = next(i for i, v in enumerate(own) if v is head.output_bias)
    restore_head(head, list(kept[:at]) + list(kept[at + 1:]), None, source,
                 variables=own[:at] + own[at + 1:])


def transfer_swap(classifier_dir, embeddings, out, overwrite=False):
    """Step 4: the classifier of `classifier_dir` with step 2's L2 embeddings swapped in.

    `classifier_dir`: a `keras-ctx finetune --out` directory whose classifier was
    fine-tuned from step 2's source with `--freeze-token-embeddings` (its token table
    is then the source's, bit for bit: checked). `embeddings`: step 2's `--out`.
    Writes OUT/classifier.keras (the fine-tuned body and head, L2's token table) and
    finetune.json naming `embeddings` as its run, so that `keras-ctx export OUT
    --with-text` reads L2's text with L2's tokenizer.
    """
    validation.check_given(classifier_dir=classifier_dir, embeddings=embeddings, out=out)
    target = os.path.join(out, runs.CLASSIFIER_FILE)
    if os.path.exists(target) and not overwrite:
        raise RunDirectoryError(f"{target} already exists; pass --overwrite to replace it, "
                                "or choose another --out.")
    if not (os.path.isdir(classifier_dir) and runs.is_finetuned(classifier_dir)):
        raise ConfigError(f"{classifier_dir} is not a `keras-ctx finetune --out` directory "
                          f"(no {runs.CLASSIFIER_FILE}): give step 3's classifier.")
    record = _transfer_record(embeddings)
    info, classifier = runs.load_finetuned(classifier_dir)
    l2_info, l2_backbone, _ = handles.load(embeddings, need_tokenizer=True)
    if info.get("family") != l2_info["family"]:
        raise ConfigError(f"{classifier_dir} is a {info.get('family')} classifier and "
                          f"{embeddings} holds {l2_info['family']} embeddings: give step 2's "
                          "run of the classifier's source.")
    try:
        table = mono.table_fingerprint(classifier.backbone)
    except ValueError:
        raise ConfigError(f"{classifier_dir}'s backbone has no token embedding table to "
                          "swap; monolingual transfer needs one.") from None
    if mono.fingerprint(mono.body_weights(l2_backbone)) != record["body_sha256"]:
        raise RunDirectoryError(f"{embeddings}'s body is not the one `transfer-vocabulary` "
                                "saved (changed since): run step 2 again.")
    if _body_config(classifier.backbone) != _body_config(l2_backbone) or (
            table != record["source_table_sha256"]):
        raise ConfigError(
            f"{classifier_dir}'s token embeddings are not those of {record['source']}, whose "
            f"body {embeddings} learned L2's embeddings for: fine-tune {record['source']} "
            "with --freeze-token-embeddings (step 3), or run step 2 from the classifier's "
            "source.")
    say(f"Swapping {embeddings}'s {l2_backbone.vocabulary_size:,} token embeddings into "
        f"{classifier_dir}'s classifier...")
    swapped = mono.swap_vocabulary(classifier, l2_backbone)
    with runs.writing(out):
        with files.replacing(target, overwrite=overwrite) as staging:
            swapped.save(staging)
        runs.save_finetuned_info(out, {**info, "run": handles.canonical(embeddings)})
    print(f"Saved the classifier with L2's token embeddings to {out} (step 4): it reads "
          f"text with {embeddings}'s tokenizer (`keras-ctx export {out} EXPORT --with-text`).")
    return swapped


def _transfer_record(embeddings):
    path = os.path.join(embeddings, TRANSFER_FILE)
    if not os.path.isfile(path):
        raise ConfigError(f"{embeddings} is not a `keras-ctx transfer-vocabulary` --out "
                          f"directory (no {TRANSFER_FILE}): give step 2's run.")
    return runs.read_record(path, TRANSFER_SCHEMA, "step 2's transfer.json",
                            f"run `keras-ctx transfer-vocabulary` again into {embeddings}")


def _body_config(backbone):
    config = backbone.get_config()
    return {k: v for k, v in config.items() if k not in ("vocabulary_size", "name")}

"""`keras-ctx export`: a SavedModel for TF Serving from a run, a classifier or any handle."""

import os

from keras_ctx import runs
from keras_ctx.commands.adapter_stack import check_adapter_file, with_language_adapter
from keras_ctx.common.errors import ConfigError
from keras_ctx.preprocessing import TextPreprocessor


def export_run(model_or_run, out, version=1, overwrite=False, sequence_length=None,
               with_text=False, jit_compile=False, language=None, language_adapter=None):
    """Exports a run, a fine-tuned classifier or any model handle (`keras_ctx.handles`);
    `with_text` adds serve_text (needs tensorflow-text ops), `jit_compile` XLA-compiles
    the serving functions, `language` is serve_text's language (XLM: `--language`),
    `language_adapter` a language adapter file that replaces the one a classifier was
    fine-tuned on (MAD-X's zero-shot transfer, `keras_ctx.commands.adapter_stack`)."""
    from keras_ctx import handles
    from keras_ctx.common import validation

    # The command's one check of its arguments, before anything is loaded: 0 is not "not
    # given" (an export at length 0 serves nothing).
    validation.check_args(version=version, sequence_length=sequence_length)
    validation.check_given(out=out, language=language, language_adapter=language_adapter)
    if language_adapter is not None:
        check_adapter_file(language_adapter)
    if language is not None and not with_text:
        raise ConfigError(f"--language {language} is the language of serve_text's strings: "
                          "add --with-text, or leave --language out (the other signatures "
                          "take language ids).")
    if os.path.isdir(model_or_run) and runs.is_finetuned(model_or_run):
        # A `keras-ctx finetune --out` directory: export its classifier; with text, the
        # run it was fine-tuned from gives the tokenizer (finetune.json names it).
        info, backbone = runs.load_finetuned(model_or_run)
        if language_adapter is not None:
            backbone = with_language_adapter(backbone, model_or_run, language_adapter)
        sequence_length = info.get("sequence_length") if sequence_length is None else (
            sequence_length)
        preprocessor = (_finetuned_preprocessor(model_or_run, info, sequence_length, language)
                        if with_text else None)
        # finetune.json's class names; a directory written before it records none.
        return _saved_model(backbone, out, version, overwrite, sequence_length, preprocessor,
                            info.get("classes"), jit_compile)
    if language_adapter is not None:
        raise ConfigError(f"--language-adapter replaces the language adapter of a classifier "
                          f"fine-tuned on one, and {model_or_run} is no `keras-ctx finetune` "
                          "--out directory: give that directory.")
    # A run directory, a checkpoint (local, hf://, kaggle://) or a preset (random
    # weights, said in one line; exported at the given length only).
    resolved = handles.resolve(model_or_run, need_tokenizer=with_text)
    if resolved.has_weights and sequence_length is None:
        sequence_length = resolved.info.get("sequence_length")
    return export_loaded(resolved.backbone, resolved.tokenizer, resolved.info.get("family"), out,
                         version, overwrite, sequence_length, with_text, jit_compile,
                         language)


def export_loaded(backbone, tokenizer, family, out, version, overwrite, sequence_length,
                  with_text, jit_compile=False, language=None):
    """`export_run` of a model already in memory (pretrain's `--export`: the backbone and
    tokenizer it trained and saved; its request checked the arguments): nothing is read
    back."""
    preprocessor = (text_preprocessor(tokenizer, sequence_length, family, language, backbone)
                    if with_text else None)
    return _saved_model(backbone, out, version, overwrite, sequence_length, preprocessor,
                        None, jit_compile)


def _saved_model(backbone, out, version, overwrite, sequence_length, preprocessor,
                 class_names, jit_compile):
    from keras_ctx.export import export_saved_model

    path = export_saved_model(backbone, out, version=version, overwrite=overwrite,
                              sequence_length=sequence_length, preprocessor=preprocessor,
                              jit_compile=jit_compile, class_names=class_names)
    signatures = ["serving_default"] + (["serve_examples"] if sequence_length else []) + (
        ["serve_text"] if preprocessor else [])
    print(f"Exported a SavedModel to {path} (signatures {', '.join(signatures)}"
          + (", XLA-compiled" if jit_compile else "") + ").")
    return path


def _finetuned_preprocessor(directory, info, sequence_length, language=None):
    """The text path of a fine-tuned classifier: the tokenizer (and languages) of the run it
    came from."""
    from keras_ctx import handles

    if not info.get("run") or not info.get("family"):
        raise runs.RunDirectoryError(
            f"{directory} does not name the run it was fine-tuned from (written before "
            "finetune.json did); export it without --with-text, or fine-tune again.")
    run = handles.resolve(info["run"], need_tokenizer=True)
    return text_preprocessor(run.tokenizer, sequence_length, info["family"], language,
                             run.backbone)


def text_preprocessor(tokenizer, sequence_length, family, language, backbone):
    """serve_text's preprocessor: the text in `language` as `backbone` reads it (its
    `languages`); a tokenizer that runs Python is refused, as a SavedModel cannot hold it."""
    if not getattr(tokenizer, "in_graph", True):
        raise ConfigError(
            f"--with-text: {type(tokenizer).__name__} runs Python (tf.py_function), which a "
            "SavedModel cannot hold: its serve_text would fail once loaded. Export without "
            "--with-text and make the ids with keras_ctx.preprocessing.TextPreprocessor.")
    return TextPreprocessor(tokenizer, sequence_length, family, language=language,
                            languages=getattr(backbone, "languages", None))

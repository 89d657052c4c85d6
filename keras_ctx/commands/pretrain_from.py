"""`keras-ctx pretrain PRESET --from SOURCE`: continued pretraining of a published model.

Domain-adaptive pretraining (Gururangan et al. 2020, "Don't Stop Pretraining") goes on
training a released checkpoint with its own objective on the user's text. SOURCE is
anything `keras_ctx.handles.resolve` reads (a local checkpoint, hf://, kaggle://, a run
directory). The run keeps SOURCE's architecture (its config, not the preset's: only the
data settings of `--set` apply), its tokenizer (never retrained, so every id keeps its
embedding row) and its weights; the objective's head continues the checkpoint's where it
has one (`resolve(head=True)`: BERT's, RoBERTa's, ALBERT's and ELECTRA's masked-LM heads,
XLM's PredLayer; GPT's is its tied table), else it starts new, and the run says which.
"""

from keras_ctx import runs
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.progress import say
from keras_ctx.pretraining.kept_head import objective_head, restore_head
from keras_ctx.pretraining.masked_lm import load_head_weights, sequence_width


def resolve_source(source, preset, overrides, vocabulary_size, data):
    """The checkpoint `--from SOURCE` names (a `handles.Resolved`, its masked-LM head
    included), checked against the run's other arguments; ConfigError in one line."""
    from keras_ctx import handles

    if data is not None:
        raise ConfigError("--from continues its checkpoint's tokenizer, and --data was "
                          "prepared with another one: drop one of them.")
    if vocabulary_size is not None:
        raise ConfigError("--vocabulary-size: --from keeps its checkpoint's tokenizer and "
                          "vocabulary; drop it.")
    if overrides:
        raise ConfigError(f"--set {sorted(overrides)[0]}: --from keeps its checkpoint's "
                          "architecture (its config, not the preset's); drop it.")
    origin = handles.resolve(source, head=True, need_tokenizer=True)
    family = preset.family.name
    if origin.info["family"] != family:
        raise ConfigError(f"--from {source} is a {origin.info['family']} model, "
                          f"{preset.name} a {family} one: pretrain a preset of its family "
                          f"(`keras-ctx presets` lists them).")
    return origin


def continued_model(origin, preset, tokenizer, run):
    """(backbone, pretrainer) that go on from `origin`: its backbone under the preset's
    objective, the head continued where the checkpoint has it."""
    family, backbone = preset.family, origin.backbone
    config = backbone.get_config()
    for key, value in family.recipe_config(run).items():  # the recipe's sizes must be its
        if config.get(key) is not None and config[key] != value:
            raise ConfigError(f"--from {origin.handle} has {key}={config[key]!r}, and this "
                              f"run's recipe needs {value!r} (its --languages / sizes): give "
                              "the checkpoint's.")
    say(f"Continuing {origin.handle}: its {backbone.count_params():,} parameters and its "
        "tokenizer (not retrained).")
    pretrainer = family.pretrainer(backbone, tokenizer, run)
    head = objective_head(pretrainer)
    if head is None:
        return backbone, pretrainer  # the backbone's own output layer (GPT's tied table)
    kept = runs.load_head_weights(origin.directory) if origin.kind == "run" else None
    if kept is not None:
        restore_head(head, kept, sequence_width(backbone), origin.handle)
        say(f"The objective's head continues {origin.handle}'s.")
        return backbone, pretrainer
    if origin.head is None:
        say(f"{origin.handle} has no output head for {preset.name}'s objective: it starts "
            "new.")
        return backbone, pretrainer
    load_head_weights(head, origin.head, (None, None, sequence_width(backbone)))
    say(f"The objective's head continues {origin.handle}'s.")
    return backbone, pretrainer

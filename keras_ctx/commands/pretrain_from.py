"""`keras-ctx pretrain PRESET --from SOURCE`: continued pretraining of a published model.

Domain-adaptive pretraining (Gururangan et al. 2020, "Don't Stop Pretraining") goes on
training a released checkpoint with its own objective on the user's text. SOURCE is
anything `keras_ctx.handles.resolve` reads (a local checkpoint, hf://, kaggle://, a run
directory). The run keeps SOURCE's architecture (its config, not the preset's: only the
data settings of `--set` apply), its tokenizer (never retrained, so every id keeps its
embedding row) and its weights, the pooler included; every head of the objective continues
SOURCE's where SOURCE holds it, and the run says which continue and which start new:

    a run directory             the heads it kept (`runs.HEAD_FILE`, by role; a run saved
                                with one head kept its output head)
    a Hugging Face checkpoint   its family's head layouts (`convert.heads.pretraining_heads`):
                                the masked-LM head (BERT, RoBERTa, ALBERT, ELECTRA's generator,
                                XLM's PredLayer; GPT's output is its tied table), BERT's NSP
                                (BertForPreTraining), ALBERT's SOP (AlbertForPreTraining),
                                ELECTRA's discriminator head (ElectraForPreTraining)
    a google-research TF one    the same heads, renamed (`TFLayout.heads`)

ELECTRA's published discriminators hold no generator: the run's generator and its MLM head
start new (the generator sharing the discriminator's embeddings), the discriminator and its
head continue; a run of ELECTRA's keeps its generator (`runs.HEAD_FILE`'s "generator"), so
`--from RUN` continues all four.
"""

from keras_ctx import run_files
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.progress import say
from keras_ctx.convert.heads import checkpoint_heads
from keras_ctx.pretraining.kept_head import objective_heads, restore_heads, role_name
from keras_ctx.pretraining.masked_lm import sequence_width


def resolve_source(source, preset, overrides, vocabulary_size, data):
    """The checkpoint `--from SOURCE` names (a `handles.Resolved`), checked against the run's other arguments; ConfigError in one line."""
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
    objective, each of the objective's heads continued where the source holds it."""
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
    if not objective_heads(pretrainer):
        return backbone, pretrainer  # the backbone's own output layer (GPT's tied table)
    continued, new = restore_heads(pretrainer, source_heads(origin), sequence_width(backbone),
                                   origin.handle)
    if continued:
        say(f"The objective's {', '.join(map(role_name, continued))} "
            f"continue{'' if len(continued) > 1 else 's'} {origin.handle}'s.")
    for role in new:
        say(f"{origin.handle} has no {role_name(role)} for {preset.name}'s objective: it "
            "starts new.")
    return backbone, pretrainer


def source_heads(origin):
    """{role: arrays} of the objective heads `origin` holds: a run's kept heads, a
    checkpoint's (Hugging Face, google-research TF) head layouts; {} for a preset."""
    if origin.kind == "run":
        return run_files.load_heads(origin.directory)
    if origin.kind == "checkpoint":
        return checkpoint_heads(origin.directory, origin.backbone,
                                origin.info.get("source_format"))
    return {}



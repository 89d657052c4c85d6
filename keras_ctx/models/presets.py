"""Named sizes of every backbone family: `from_preset(name)`, `list_presets()`.

Presets are data: each family's module under `keras_ctx.families` names its
presets and registers them with the family in `keras_ctx.registry`, so every
preset carries its family. `build(name)` makes a randomly initialised backbone
of a preset; `from_preset(handle)` also takes checkpoints (local, hf://,
kaggle://) through `keras_ctx.handles`, the one resolver of model handles (below
the models: it reads them through the registry).
"""

import dataclasses
import inspect
import os
from typing import Optional

from keras_ctx import handles, registry


@dataclasses.dataclass(frozen=True)
class Preset:
    """One named configuration of a family's backbone, with its `Family` (the registry's)."""

    name: str
    family: object
    backbone_cls: type
    config: dict
    description: str = ""

    @property
    def parameter_count(self):
        return count_parameters(self.backbone_cls, self.config)

    @property
    def pretraining(self):
        """How the preset's authors pretrained it (`Pretraining`), or None if unrecorded."""
        return _PRETRAINING.get(self.name)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a paper's pretraining run: what changes from `start_step` on.

    Args:
        name: what the stage trains.
        start_step: its first update in the paper's run.
        sequence_length: its sequence length, where the stage changes it.
        source: where the boundary comes from (a number of keras_ctx's own says so).
        start_share: the boundary as a share of the run, where the paper gives it
            so (BERT: 90% of the steps at 128); a run of other length starts the
            stage at that share of its own steps.
        runs: what runs the stage: "" for `keras-ctx pretrain`'s recipe, else
            the inputs or command it needs (ERNIE's `--entities FILE`).
        needs: the run input (`Run.inputs` name) that makes `keras-ctx pretrain`
            run the stage ("entities": ERNIE's lexicon); "" for none.
    """

    name: str
    start_step: int
    sequence_length: Optional[int] = None
    source: str = ""
    start_share: Optional[float] = None
    runs: str = ""
    needs: str = ""

    def runs_with(self, given):
        """Whether `keras-ctx pretrain` runs the stage, given the run's inputs `given`
        (names of the inputs the run has)."""
        return not self.runs or bool(self.needs) and self.needs in given

    def first_step(self, steps):
        """The stage's first update in a run of `steps` updates: its share of them, or
        the paper's step where the paper gives a step."""
        if self.start_share is not None:
            return int(round(self.start_share * steps))
        return self.start_step


@dataclasses.dataclass(frozen=True)
class Pretraining:
    """A preset's pretraining settings as its authors published them for that size.

    Each family.py registers one per preset (`register_pretraining`); None
    marks a setting its authors did not publish for that size. `source` names
    the paper section / table or released config file (with its commit) the
    numbers come from; docs/pretraining-defaults.md is the table a test holds
    these to.

    Args:
        learning_rate: peak learning rate.
        batch_size: sequences per update; batch_tokens: tokens per update, where the
            authors give that instead (GPT-3).
        sequence_length: tokens per sequence (the first stage's, see `stages`).
        steps: updates in all; warmup_steps: of them, warm-up.
        mask_rate: share of tokens masked / corrupted (MLM, ELECTRA's
            generator, T5's noise density, BART's infilling).
        mask_token_rate, random_token_rate: of the masked, the share replaced by
            the mask token / by a random token.
        generator_fraction: ELECTRA's generator width as a share of the
            discriminator's.
        max_span: the longest n-gram / span in words (ALBERT, SpanBERT, XLNet);
            mean_span: T5's mean noise span, BART's Poisson lambda.
        stages: the run's `Stage`s in order (one: the whole run).
        source: where the numbers come from.
    """

    learning_rate: Optional[float] = None
    batch_size: Optional[int] = None
    batch_tokens: Optional[int] = None
    sequence_length: Optional[int] = None
    steps: Optional[int] = None
    warmup_steps: Optional[int] = None
    mask_rate: Optional[float] = None
    mask_token_rate: Optional[float] = None
    random_token_rate: Optional[float] = None
    generator_fraction: Optional[float] = None
    max_span: Optional[int] = None
    mean_span: Optional[float] = None
    stages: tuple = ()
    source: str = ""


def stage_plan(name, steps):
    """[(Stage, its first step in a run of `steps` updates)] of preset `name`'s stages.

    A stage whose boundary the paper gives as a share of its run starts at that
    share of `steps`; one given in steps keeps its step. Stages a run of
    `steps` never reaches are left out.
    """
    starts = ((stage, stage.first_step(steps)) for stage in pretraining(name).stages)
    return [(stage, start) for stage, start in starts if start < steps]


def describe_stages(name, steps, given=(), lengths=(), length_from="--sequence-length"):
    """One line naming preset `name`'s pretraining stages in a run of `steps` updates,
    when each starts and the source of each boundary (what `keras-ctx pretrain` says);
    a stage the run does not reach, or does not run, is named as such with why.

    Args:
        given: the names of the run's inputs (`Stage.needs`: ERNIE's entities).
        lengths: ((first step, sequence length), ...) the run trains at (() unknown): a
            stage of its own length that the run trains at another is named so, with
            `length_from`, the flag that fixed the run's one length.
    """
    stages = pretraining(name).stages
    if not stages:
        return f"{name}: no pretraining stages recorded."
    parts = []
    for number, stage in enumerate(stages, 1):
        start = stage.first_step(steps)
        part = f"{number}. {stage.name} from step {start}"
        if stage.sequence_length:
            part += f" at length {stage.sequence_length}"
        part += f" ({stage.source})" if stage.source else ""
        if start >= steps:
            part += f" [not reached in {steps} steps]"
        elif not stage.runs_with(given):
            part += (f" [not run: it needs {stage.runs}]" if stage.needs
                     else f" [not in this run: {stage.runs}]")
        elif stage.sequence_length and lengths:
            length = [length for first, length in lengths if first <= start][-1]
            if length != stage.sequence_length and number > 1 and len(lengths) == 1:
                part += (f" [not run: this run trains at one length, {length} "
                         f"({length_from}); without {length_from} it runs]")
            elif length != stage.sequence_length:
                part += f" [at length {length} in this run ({length_from})]"
        parts.append(part)
    return f"{name} pretrains in {len(stages)} stage{'s' * (len(stages) > 1)}: " + "; ".join(
        parts) + "."


FIELDS = tuple(f.name for f in dataclasses.fields(Pretraining)
               if f.name not in ("stages", "source"))
_PRETRAINING = {}


def register_pretraining(table):
    """Records {preset name: `Pretraining`} (each family.py, once); a preset twice raises."""
    for name, settings in table.items():
        if name in _PRETRAINING:
            raise ValueError(f"Pretraining settings of {name!r} are registered twice.")
        if not isinstance(settings, Pretraining):
            raise TypeError(f"{name!r}: expected a Pretraining, got {type(settings).__name__}.")
        _PRETRAINING[name] = settings
    return table


def pretraining(name, required=True):
    """The `Pretraining` of preset `name` (its size's published settings).

    Unknown presets, and presets without recorded settings, raise; with
    `required=False` they give None.
    """
    if name not in _PRETRAINING:
        if not required:
            return None
        get_preset(name)  # an unknown preset raises the registry's error
        raise ValueError(f"No pretraining settings are recorded for preset {name!r}.")
    return _PRETRAINING[name]


def preset_names():
    """Every preset's name, sorted."""
    return registry.preset_names()


def get_preset(name):
    """The `Preset` of `name`, with a clear error if unknown (the one registry lookup)."""
    family = registry.of_preset(name)
    config, description = family.presets[name]
    return Preset(name, family, family.backbone, dict(config), description)


def preset(handle):
    """The `Preset` a preset name names; a `Preset` is returned as given.

    What a command that builds from an architecture (`keras-ctx pretrain`,
    `prepare`) resolves its model name to, once; it passes the `Preset` down
    instead of the name. Any other handle raises, listing the presets.
    """
    return handle if isinstance(handle, Preset) else get_preset(os.fspath(handle))


def preset_config(name):
    """(backbone class, config dict) of a preset, with a clear error if unknown."""
    preset = get_preset(name)
    return preset.backbone_cls, dict(preset.config)


def preset_family(name):
    """The family name a preset belongs to."""
    return get_preset(name).family.name


def from_preset(handle, **overrides):
    """The backbone a handle names, with its `.tokenizer`.

    Args:
        handle: a preset name (random weights, said in one log line), a local
            checkpoint or run directory, `hf://ORG/NAME[@REVISION]` or
            `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]`
            (`keras_ctx.handles`).
        **overrides: backbone config values to change (unknown keys raise).

    Returns:
        The backbone.
    """
    return handles.from_preset(handle, **overrides)


def build(preset, **overrides):
    """A randomly initialised backbone of a preset (a `Preset` or its name); `overrides`
    change its config."""
    if isinstance(preset, Preset):
        return handles.build_preset(preset.name, overrides, preset.family)
    return handles.build_preset(preset, overrides)


def list_presets(family=None):
    """[(name, backbone class name, parameter count, description)].

    `family` keeps the presets whose family name or backbone class name
    contains it (case-insensitive): "gpt" lists GPT and GPT-2.
    """
    rows = []
    for name in preset_names():
        preset = get_preset(name)
        if family and family.lower() not in (
                preset.family.name + " " + preset.backbone_cls.__name__).lower():
            continue
        rows.append((name, preset.backbone_cls.__name__, preset.parameter_count,
                     preset.description))
    return rows


def count_parameters(backbone_cls, config):
    """Parameter count of a config: closed form when the family has one, else built.

    Families define `analytic_parameter_count(**config)` so that listing
    presets never allocates gpt2-xl; their tests check it against a build.
    """
    analytic = getattr(backbone_cls, "analytic_parameter_count", None)
    if analytic is not None:
        parameters = inspect.signature(analytic).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            config = {k: v for k, v in config.items() if k in parameters}
        return int(analytic(**config))
    model = backbone_cls(**config)
    count = model.count_params()
    del model
    return count


"""Every preset's pretraining settings equal its size's published ones (issue 54).

docs/pretraining-defaults.md is the table written from the papers and released
configs (each row names its source); the family modules' `register_pretraining`
records must equal it, and the data the recipes build must follow them.
"""

import os
from fractions import Fraction

import numpy as np
import pytest

import keras_ctx  # noqa: F401  (registers the families)
from keras_ctx import registry
from keras_ctx.models import presets

pytestmark = pytest.mark.backend_neutral(
    "the presets' settings against the published table, and tf.data recipes")

TABLE = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs",
                     "pretraining-defaults.md")
COLUMNS = ("learning_rate", "batch_size", "batch_tokens", "sequence_length", "steps",
           "warmup_steps", "mask_rate", "mask_token_rate", "random_token_rate",
           "generator_fraction", "max_span", "mean_span")


def _number(text):
    text = text.strip()
    if text == "-":
        return None
    if "/" in text:
        return float(Fraction(text))
    return float(text)


def _table():
    rows = {}
    with open(TABLE, encoding="utf-8") as f:
        text = f.read()
    first = text[text.index("| preset |"):].split("\n\n")[0]  # the page's first table
    lines = [line for line in first.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip().strip("|").split("|")]
    assert header[0] == "preset" and len(header) == len(COLUMNS) + 2, header
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert cells[0] not in rows, f"{cells[0]} twice in the table"
        rows[cells[0]] = dict(zip(COLUMNS, map(_number, cells[1:-1])), source=cells[-1])
    return rows


def test_every_preset_has_its_published_settings():
    table = _table()
    assert sorted(table) == registry.preset_names()
    for name, expected in table.items():
        settings = presets.pretraining(name)
        for field in COLUMNS:
            value = getattr(settings, field)
            assert (value is None) == (expected[field] is None), (name, field, value)
            if value is not None:
                assert value == pytest.approx(expected[field], rel=1e-6), (name, field)
        assert settings.source, name


def test_sizes_that_differ_from_their_base():
    # Clark et al. 2020, Table 6; configure_pretraining.py @8a46635.
    large, base = presets.pretraining("electra-large"), presets.pretraining("electra-base")
    assert (large.mask_rate, base.mask_rate) == (0.25, 0.15)
    assert presets.pretraining("electra-small").generator_fraction == 0.25
    assert base.generator_fraction == pytest.approx(1 / 3)
    # Liu et al. 2019, Table 9.
    assert presets.pretraining("roberta-large").learning_rate == 4e-4
    assert presets.pretraining("roberta-base").learning_rate == 6e-4
    assert presets.get_preset("electra-large").pretraining is large


def test_electra_generators_follow_the_table():
    from keras_ctx.models.electra.backbone import ELECTRA_GENERATOR_FRACTIONS

    for name, fraction in ELECTRA_GENERATOR_FRACTIONS.items():
        assert presets.pretraining(name).generator_fraction == pytest.approx(fraction)


def test_unknown_or_unrecorded_presets():
    with pytest.raises(ValueError, match="Unknown preset"):
        presets.pretraining("no-such-preset")
    assert presets.pretraining("no-such-preset", required=False) is None
    with pytest.raises(ValueError, match="twice"):
        presets.register_pretraining({"bert-base": presets.pretraining("bert-base")})


def _masked_share(preset, sequence_length=128, family="electra"):
    """Masked positions / real tokens over `family`'s recipe batches for `preset`."""
    import tensorflow as tf

    from keras_ctx.data import synthetic_text

    documents = synthetic_text.documents(120, seed=0)
    sentences = [s for d in documents for s in d]
    tokenizer = registry.get(family).train_tokenizer(sentences, 400)  # the family's own kind
    data = tf.data.Dataset.from_generator(
        lambda: iter(documents), output_signature=tf.TensorSpec([None], tf.string))
    run = registry.Run(preset, 8, sequence_length, tokenizer.vocabulary_size(), seed=0)
    masked = real = 0.0
    for batch in registry.get(family).dataset(data, tokenizer, run).take(10):
        masked += float(np.sum(batch["mask_weights"]))
        real += float(np.sum(batch["padding_mask"]))
    return masked / real


# One preset a masked-LM family: the share `keras-ctx pretrain <preset>`'s own recipe
# masks (its Family.dataset, the path the command runs) equals the preset's record.
MLM_PRESETS = ("bert-base", "bert-base-multilingual-cased", "albert-base", "roberta-base",
               "spanbert-base", "ernie-1.0-base", "electra-base")


@pytest.mark.slow  # a tokenizer and ten batches per family (about 40 s on 2 cores)
@pytest.mark.parametrize("preset", MLM_PRESETS)
def test_each_mlm_familys_recipe_masks_its_records_share(preset):
    assert _masked_share(preset, family=registry.of_preset(preset).name) == pytest.approx(
        presets.pretraining(preset).mask_rate, abs=0.01)


def test_electra_recipe_masks_each_sizes_share():
    # configure_pretraining.py @8a46635: mask_prob 0.25 for large, 0.15 otherwise, of
    # every real token ([CLS]/[SEP] counted, never masked): round(rate * L) per row.
    assert _masked_share("electra-large") == pytest.approx(0.25, abs=0.01)
    assert _masked_share("electra-small") == pytest.approx(0.15, abs=0.01)
    family = registry.get("electra")
    assert family.prepared.sized(presets.pretraining("electra-large")) == {"mask_rate": 0.25}


def test_stages_and_their_boundaries():
    # Devlin et al. 2019, A.2: 90% of the steps at length 128, the rest at 512.
    plan = presets.stage_plan("bert-base", 1000)
    assert [(stage.sequence_length, start) for stage, start in plan] == [(128, 0), (512, 900)]
    line = presets.describe_stages("bert-base", 1000)
    assert "from step 900 at length 512" in line and "A.2" in line
    assert "not run" not in line  # `keras-ctx pretrain` runs both stages in one run
    one = presets.describe_stages("bert-base", 1000, lengths=((0, 128),))
    assert "from step 900 at length 512" in one and "[not run: this run trains at one " \
        "length, 128 (--sequence-length); without --sequence-length it runs]" in one
    # ERNIE: the paper orders the stages; the steps are keras_ctx's own and say so.
    from keras_ctx.data.pipelines import ERNIE_STAGE_STEPS

    ernie = presets.stage_plan("ernie-1.0-base", 3 * ERNIE_STAGE_STEPS)
    assert [start for _, start in ernie] == [0, ERNIE_STAGE_STEPS, 2 * ERNIE_STAGE_STEPS]
    assert all("keras_ctx's own" in stage.source for stage, _ in ernie[1:])
    assert len(presets.stage_plan("ernie-1.0-base", ERNIE_STAGE_STEPS)) == 1
    assert presets.describe_stages("electra-small", 300).startswith(
        "electra-small pretrains in 1 stage: 1. generator MLM")
    for name in registry.preset_names():  # every recipe names at least its one stage
        family = registry.of_preset(name)
        if family.dataset is not None:
            assert presets.stage_plan(name, 10), name

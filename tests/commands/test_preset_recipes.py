"""Every registered preset pretrains with its own paper's objective (issue 35).

Each family declares its paper's objective (`Family.objective`: the Pretrainer
class and the batch keys that tell it apart) beside its registration; the
recipe of every one of its presets must build that class and those batches.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import families
from keras_ctx.commands import pretrain
from keras_ctx.models import from_preset
from keras_ctx.models.presets import preset_names, pretraining

# A preset whose first stage names what else runs it has no recipe.
RECIPE_PRESETS = [p for p in preset_names() if families.of_preset(p).dataset is not None
                  and not pretraining(p).stages[0].runs
                  and not getattr(families.of_preset(p).dataset, "needs", "")]  # CoVe's inputs


def _expected(preset):
    """(objective class, batch keys) the preset's family declares."""
    family = families.of_preset(preset)
    assert family.objective, f"{family.name}: declare its paper's Family.objective"
    # {preset: pair} where the presets' objectives differ (XLM's MLM and CLM models)
    return family.objective[preset] if isinstance(family.objective, dict) else family.objective


def _overrides(preset):
    return dict(families.of_preset(preset).tiny)


@pytest.fixture(scope="module")
def documents():
    lines = [f"the bank of the river {i} is green. money in the bank {i} is safe."
             for i in range(24)]
    return tf.data.Dataset.from_tensor_slices([[line, line + " again"] for line in lines])


def _keys(batch):
    """Every feature name in a batch (a dict, or an (x, y[, w]) tuple of dicts)."""
    parts = batch if isinstance(batch, tuple) else (batch,)
    return {key for part in parts if isinstance(part, dict) for key in part}


# The families whose presets could be filed wrongly among BERT-shaped ones run by
# default; the rest (many presets each, slower builds) with -m slow.
FAST_FAMILIES = {"bert", "mbert", "spanbert", "roberta", "albert", "electra", "ernie"}


@pytest.mark.parametrize("family", [
    pytest.param(n, marks=() if n in FAST_FAMILIES else pytest.mark.slow)
    for n in sorted({families.of_preset(p).name for p in RECIPE_PRESETS})])
def test_every_preset_has_its_papers_objective(family, documents):
    # One tokenizer per family (training one per preset is slow); each preset
    # then builds its own backbone, objective and first batch.
    family = families.get(family)
    tokenizer = family.train_tokenizer(documents.unbatch(), 200)
    presets = [p for p in RECIPE_PRESETS if families.of_preset(p) is family]
    batches = {}
    for preset in presets:
        objective, keys = _expected(preset)
        run = families.Run(preset, batch_size=2, sequence_length=32, vocabulary_size=200)
        overrides = _overrides(preset)
        if family.sized_by_tokenizer:
            overrides["vocabulary_size"] = tokenizer.vocabulary_size() + family.extra_tokens
        backbone = from_preset(preset, **{**family.recipe_config(run), **overrides})
        pretrainer = family.pretrainer(backbone, tokenizer, run)
        assert type(pretrainer) is objective, (preset, type(pretrainer).__name__)
        if objective not in batches:  # the same data for each preset of one objective
            batches[objective] = _keys(next(iter(family.dataset(documents, tokenizer, run))))
        batch = batches[objective]
        assert set(keys) <= batch, (preset, sorted(batch))
        # NSP only where the paper has it (RoBERTa, SpanBERT, ELECTRA dropped it).
        assert ("next_sentence_labels" in batch) == ("next_sentence_labels" in keys), preset


@pytest.mark.parametrize("preset", [pytest.param(
    p, marks=() if p == "bert-base-multilingual-cased" else pytest.mark.slow)
    for p in RECIPE_PRESETS])
def test_every_preset_recipe_trains_one_step(preset, documents):
    objective = _expected(preset)[0]
    run = families.Run(preset, batch_size=2, sequence_length=32, vocabulary_size=200)
    _, pretrainer, dataset, _, _ = pretrain.build(preset, documents, run, _overrides(preset))
    assert type(pretrainer) is objective
    # Keras' "auto": a graph on TensorFlow's CPU, one jit on JAX (JAX run eagerly
    # dispatches every op of the step one by one: 43 s instead of ~10 s on 2 cores).
    pretrainer.compile(optimizer="adam")
    # numpy, as fit hands any backend's step (JAX's jit takes no tf.Tensor)
    logs = pretrainer.train_on_batch(next(dataset.as_numpy_iterator()), return_dict=True)
    assert logs and all(np.isfinite(float(v)) for v in logs.values()), logs

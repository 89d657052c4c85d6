"""Every registered preset pretrains with its own paper's objective (issue 35).

The expected objective of each preset is written here from the papers, not
read from the registry, so a preset filed under the wrong family (mBERT under
SpanBERT once ran span masking + SBO) fails.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import families, pretraining
from keras_ctx.commands import pretrain
from keras_ctx.models import from_preset
from keras_ctx.models.presets import preset_names
from tests.test_recipes import DECODER, ENCODER

# (preset name prefix, objective class, batch keys the objective reads that
# tell it apart). Longest prefix wins.
OBJECTIVES = [
    ("bert-", pretraining.BertPretrainer, {"next_sentence_labels"}),  # Devlin et al. 2019
    # mBERT (google-research/bert multilingual.md): BERT's MLM + NSP.
    ("bert-base-multilingual-", pretraining.BertPretrainer, {"next_sentence_labels"}),
    ("roberta-", pretraining.RobertaPretrainer, set()),  # MLM only, no NSP (Liu et al.)
    ("spanbert-", pretraining.SpanBertPretrainer, set()),  # spans + SBO (Joshi et al.)
    ("albert-", pretraining.AlbertPretrainer, {"sentence_order_labels"}),  # MLM + SOP
    ("electra-", pretraining.ElectraPretrainer, set()),  # replaced token detection
    ("ernie-", pretraining.BertPretrainer, {"next_sentence_labels"}),  # knowledge MLM + NSP
    ("xlnet-", pretraining.XLNetPretrainer, set()),  # permutation LM
    ("gpt", pretraining.CausalLMPretrainer, set()),  # GPT, GPT-2, GPT-3, GPT-Neo
    ("t5", pretraining.Seq2SeqPretrainer, set()),  # span corruption (Raffel et al.)
    ("mt5-", pretraining.Seq2SeqPretrainer, set()),
    ("bart-", pretraining.Seq2SeqPretrainer, set()),  # denoising (Lewis et al.)
    ("elmo-", pretraining.BiLMPretrainer, set()),  # bidirectional LM (Peters et al.)
]
NO_NSP = {"roberta-", "spanbert-", "electra-"}
OVERRIDES = {
    "albert-": ENCODER + ["embedding_size=16"], "electra-": ENCODER + ["embedding_size=16"],
    "elmo-": ["projection_dim=16", "lstm_units=32", "num_layers=1"],
    "gpt3-": DECODER + ["max_sequence_length=32"], "gpt-neo-": DECODER,
}
RECIPE_PRESETS = [p for p in preset_names() if families.of_preset(p).dataset is not None]


def _expected(preset):
    matches = [row for row in OBJECTIVES if preset.startswith(row[0])]
    assert matches, f"{preset}: add its paper's objective to OBJECTIVES"
    return max(matches, key=lambda row: len(row[0]))


def _overrides(preset):
    prefix = max((p for p in OVERRIDES if preset.startswith(p)), key=len, default=None)
    return pretrain.parse_overrides(OVERRIDES.get(prefix, ENCODER))


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
    batch = None
    for preset in presets:
        prefix, objective, keys = _expected(preset)
        run = families.Run(preset, batch_size=2, sequence_length=32, vocabulary_size=200)
        overrides = _overrides(preset)
        if family.sized_by_tokenizer:
            overrides["vocabulary_size"] = tokenizer.vocabulary_size() + family.extra_tokens
        backbone = from_preset(preset, **{**family.recipe_config(run), **overrides})
        pretrainer = family.pretrainer(backbone, tokenizer, run)
        assert type(pretrainer) is objective, (preset, type(pretrainer).__name__)
        if batch is None:  # the dataset is the family's, the same for each preset
            batch = _keys(next(iter(family.dataset(documents, tokenizer, run))))
        assert keys <= batch, (preset, sorted(batch))
        if prefix in NO_NSP:
            assert "next_sentence_labels" not in batch, preset


@pytest.mark.parametrize("preset", [pytest.param(
    p, marks=() if p == "bert-base-multilingual-cased" else pytest.mark.slow)
    for p in RECIPE_PRESETS])
def test_every_preset_recipe_trains_one_step(preset, documents):
    objective = _expected(preset)[1]
    run = families.Run(preset, batch_size=2, sequence_length=32, vocabulary_size=200)
    _, pretrainer, dataset, _, _ = pretrain.build(preset, documents, run, _overrides(preset))
    assert type(pretrainer) is objective
    pretrainer.compile(optimizer="adam", jit_compile=False)
    logs = pretrainer.train_on_batch(next(iter(dataset)), return_dict=True)
    assert logs and all(np.isfinite(float(v)) for v in logs.values()), logs

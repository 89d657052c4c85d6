"""`keras-ctx pretrain --preset xlm-clm-*` trains XLM's CLM (Lample & Conneau 2019, Sec.
3.2; XLM's --clm_steps 'en,fr'): next-token prediction on each language's stream,
languages sampled as MLM's (alpha 0.5), through CausalLMPretrainer with XLM's PredLayer
(keras_ctx/models/xlm/family.py, keras_ctx/data/xlm_recipe.py)."""


import numpy as np
import pytest

from keras_ctx import registry
from keras_ctx.data import tokenizers
from keras_ctx.data import xlm_recipe as recipe
from keras_ctx.models import from_preset, presets
from keras_ctx.pretraining import CausalLMPretrainer
from tests.cli_helpers import XLM_TINY as TINY, cli_output, first_and_last_loss, one_line_error

CLM = "xlm-clm-enfr-1024"


def _tokenizer(*paths):
    return tokenizers.train_xlm_bpe([line for path in paths for line in open(path)], 200)


def test_a_clm_preset_reads_each_languages_stream_unmasked(corpora, capsys):
    en, fr, _ = corpora
    tokenizer = _tokenizer(en, fr)
    family = registry.of_preset(CLM)
    languages, parallel = recipe.check_inputs([en, fr], "en,fr", ())
    run = registry.Run(CLM, 4, 32, 200, inputs=(
        ("languages", languages), ("parallel", parallel), ("corpora", (en, fr))))
    batches = list(family.dataset(None, tokenizer, run).take(12).as_numpy_iterator())
    said = capsys.readouterr().out
    assert "XLM stage CLM on en, fr" in said and "alpha 0.5 (Sec. 3.1)" in said, said
    assert "--clm_steps 'en,fr'" in said and "masked" not in said, said
    eos, chat = tokenizers.special_token_ids(tokenizer)["sep"], tokenizer.token_to_id(
        "chat</w>")
    seen = set()
    for batch in batches:
        # XLM's stream input as it is: no mask, no targets; the model shifts the ids.
        assert set(batch) == {"token_ids", "padding_mask", "position_ids", "language_ids"}
        assert batch["padding_mask"].all() and (batch["position_ids"] == np.arange(32)).all()
        language = np.unique(batch["language_ids"])
        assert len(language) == 1  # one language a batch (XLM's)
        assert (batch["token_ids"] == eos).any()  # each sentence opened by </s>
        seen.add((int(language[0]), bool((batch["token_ids"] == chat).any())))
    assert {language for language, _ in seen} == {0, 1}  # both streams drawn
    assert (1, True) in seen and (0, True) not in seen  # French text under French's id
    # The pretrainer the recipe builds: causal LM with XLM's PredLayer over a causal XLM.
    backbone = from_preset(CLM, **dict(family.tiny, vocabulary_size=tokenizer.vocabulary_size(),
                                       **family.recipe_config(run)))
    pretrainer = family.pretrainer(backbone, tokenizer, run)
    assert type(pretrainer) is CausalLMPretrainer and pretrainer.output_bias
    assert backbone.causal and not pretrainer.lm_head.transform


def test_the_clm_stage_is_named_and_run_by_the_recipe():
    line = presets.describe_stages(CLM, 1000)
    assert "1. CLM on each --languages stream (alpha 0.5) from step 0" in line, line
    assert "Sec. 3.1-3.2" in line and "not in this run" not in line, line
    assert presets.pretraining(CLM).learning_rate == 1e-4  # as the MLM rows (see its source)
    assert "keras_ctx's own" in presets.pretraining(CLM).source


def test_parallel_pairs_with_a_clm_preset_are_refused_before_anything_is_written(
        corpora, tmp_path):
    en, fr, pairs = corpora
    code, output = cli_output(["pretrain", CLM, "--corpus", en, "--corpus", fr,
                               "--languages", "en,fr", "--parallel", f"en-fr={pairs}",
                               "--out", str(tmp_path / "run"), *TINY, "--steps", "2"])
    assert code != 0 and f"--parallel: {CLM} is a CLM model" in one_line_error(output)
    assert "Building" not in output and not (tmp_path / "run").exists()
    with pytest.raises(Exception, match="TLM on pairs is an MLM objective"):
        run = registry.Run(CLM, 4, 32, 200, inputs=(
            ("languages", ("en", "fr")), ("parallel", (("en", "fr", pairs),)),
            ("corpora", (en, fr))))
        registry.of_preset(CLM).dataset(None, _tokenizer(en), run)


def test_the_objective_and_the_backbones_attention_must_agree(corpora, tmp_path):
    en = corpora[0]
    for preset, causal in ((CLM, "False"), ("xlm-mlm-enfr-1024", "True")):
        code, output = cli_output(["pretrain", preset, "--corpus", en, "--set",
                                   f"causal={causal}", "--out", str(tmp_path / preset), *TINY,
                                   "--steps", "2"])
        assert code != 0 and f"--set causal={causal}: {preset} pretrains with" in (
            one_line_error(output)), output[-800:]
        assert not (tmp_path / preset).exists()



@pytest.mark.slow  # ~40 s: two tiny runs, each compiling its step (TensorFlow, 2 busy cores)
def test_the_cli_trains_clm_on_two_languages_and_resumes(corpora, tmp_path):
    en, fr, _ = corpora
    out = str(tmp_path / "run")
    command = ["pretrain", CLM, "--corpus", en, "--corpus", fr, "--languages", "en,fr",
               "--out", out, "--checkpoint-every", "10", "--learning-rate", "3e-3", *TINY]
    code, output = cli_output(command + ["--steps", "40"])
    assert code == 0, output[-2000:]
    assert f"{CLM} pretrains in 1 stage: 1. CLM on each --languages stream" in output
    assert "XLM stage CLM on en, fr" in output and "masked" not in output
    first, last = first_and_last_loss(output)
    assert last < 0.8 * first, output[-1000:]  # ~log(V) at the start, learnt streams after
    code, output = cli_output(command + ["--steps", "50"])  # resumes from step 40
    assert code == 0 and "Steps 41-50 of 50" in output, output[-2000:]
    assert "XLM stage CLM on en, fr" in output

"""`keras-ctx pretrain` runs every family's recipe end to end (tiny sizes, two steps)."""

import numpy as np
import pytest

from keras_ctx import families, runs
from keras_ctx.commands import pretrain
from keras_ctx.commands.embed import word_vectors
from keras_ctx.cli import main
from tests.cli_helpers import write_corpus
from tests.sense_table_off import sense_table_off
from tests.tiny_recipes import ENCODER, FAMILIES

DECODER = ["num_layers=1", "num_heads=2", "hidden_size=32", "intermediate_size=64"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    write_corpus(path, documents=40)
    return str(path)


# These run with -m slow (15-25 s each): RoBERTa's, SpanBERT's and ELECTRA's
# recipes are BERT's pipeline with other masks, BART's T5's decoder path, GPT's,
# GPT-3's and GPT-Neo's GPT-2's; every objective's step runs in
# tests/pretraining/test_matrix.py and every family's objective class in
# tests/commands/test_preset_recipes.py by default.
SLOW = {"roberta-base", "bart-base", "electra-small", "spanbert-base", "gpt", "gpt3-small",
        "gpt-neo-125m", "xlm-mlm-en-2048",
        # BERT's, ELMo's and T5's recipes pretrain by default in tests/cli/test_cli_matrix.py
        # (its run then takes every command), with this test's checks of the run.
        "bert-tiny", "elmo-small", "t5-small"}


@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW else p
                                    for p in sorted(FAMILIES)])
def test_pretrain_recipe_trains_saves_and_embeds(preset, corpus, tmp_path):
    overrides = [arg for item in FAMILIES[preset] for arg in ("--set", item)]
    out = str(tmp_path / "run")
    with sense_table_off():  # the run's word vectors are read below
        code = main(["pretrain", preset, "--corpus", corpus, "--steps", "2",
                     "--checkpoint-every", "2", "--vocabulary-size", "300",
                     "--sequence-length", "32", "--batch-size", "4", *overrides, "--out", out])
    assert code == 0
    info, backbone, tokenizer = runs.load_run(out)
    family = families.of_preset(preset)
    assert info["family"] == family.name
    assert (tokenizer is None) == (family.inputs == "characters")
    if family.inputs == "encoder_decoder":
        return  # encoder-decoders: no single-word context vectors
    vectors = word_vectors(out, ["the bank river", "a bank loan"], "bank")
    assert vectors.shape[0] == 2 and np.all(np.isfinite(vectors))
    assert not np.allclose(vectors[0], vectors[1])  # the context changes the vector


def test_cove_needs_a_parallel_corpus(corpus, tmp_path, capsys):
    assert main(["pretrain", "cove-base", "--corpus", corpus, "--out", str(tmp_path)]) == 2
    assert "parallel corpus" in capsys.readouterr().err


def test_xlnet_recipe_keeps_a_memory_of_three_quarters_of_the_sequence(corpus):
    from keras_ctx.data import corpora

    # The released pretraining: --seq_len=512 --mem_len=384 (zihangdai/xlnet README).
    run = families.Run("xlnet-base", batch_size=4, sequence_length=32, vocabulary_size=300)
    tiny = pretrain.parse_overrides(ENCODER)
    backbone, pretrainer = pretrain.build("xlnet-base", corpora.documents(corpus), run, tiny)[:2]
    assert backbone.mem_len == 24 and pretrainer.carry_memory
    released = families.Run("xlnet-base", batch_size=1, sequence_length=512,
                            vocabulary_size=300)
    assert families.get("xlnet").recipe_config(released) == {"mem_len": 384}
    explicit = pretrain.parse_overrides(ENCODER + ["mem_len=0"])  # --set wins
    backbone = pretrain.build("xlnet-base", corpora.documents(corpus), run, explicit)[0]
    assert backbone.mem_len == 0


def test_pretrain_looks_its_model_name_up_once_and_passes_the_preset_down(
        corpus, tmp_path, monkeypatch):
    # Before: the name went down as a string and was looked up again by build,
    # _model and models.presets.build (5 registry lookups for one command).
    from keras_ctx import registry

    lookups = []

    def counted(name, real=registry.of_preset):
        lookups.append(name)
        return real(name)

    monkeypatch.setattr(registry, "of_preset", counted)
    monkeypatch.setattr(families, "of_preset", counted)
    built = []

    def stop(model, *args, **kwargs):  # the step is not what this test is about
        built.append(model)
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain, "fit_resumable", stop)
    with pytest.raises(KeyboardInterrupt):
        pretrain.pretrain("bert-tiny", str(tmp_path / "run"), corpus=corpus, steps=2,
                          batch_size=4, sequence_length=32, vocabulary_size=300,
                          overrides=pretrain.parse_overrides(ENCODER), show_contexts=False)
    assert lookups == ["bert-tiny"]
    assert built[0].backbone.family == "bert" and built[0].backbone.num_layers == 1

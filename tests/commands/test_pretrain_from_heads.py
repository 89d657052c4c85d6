"""`pretrain --from` and `convert` keep every head a pretraining checkpoint holds
(keras_ctx/commands/pretrain_from.py, keras_ctx/convert/heads.py): BERT's and ERNIE's NSP
(BertForPreTraining's / ErnieForPreTraining's cls.seq_relationship), ALBERT's SOP (AlbertForPreTraining's
sop_classifier), ELECTRA's discriminator head (ElectraForPreTraining's
discriminator_predictions) beside the masked-LM head; a run keeps them all
(runs.HEAD_FILE, by role) and a run saved with one head still continues it.

Ground truth: transformers' *ForPreTraining built tiny from a config, its weights redrawn
N(0, 0.3) (its own init, zero biases and 0.02 weights, gives ln 2 for any two-class head),
saved with save_pretrained; the continued pretrainer's losses on one batch are transformers'
losses on that batch. The google-research TF layouts: the heads' variables as written.
"""

import os
import shutil

import numpy as np
import pytest
from keras import ops

from keras_ctx import run_files
from keras_ctx.commands.pretrain_checks import PretrainRequest
from keras_ctx.commands.pretrain_from import continued_model
from keras_ctx.convert.formats import convert
from keras_ctx.pretraining.kept_head import head_weights

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
SIZES = dict(num_hidden_layers=2, num_attention_heads=2, hidden_size=16, intermediate_size=32,
             max_position_embeddings=32, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)


# These tests run a model's ops eagerly (losses, ELECTRA's initialisers): on JAX each op
# compiles on its own (9-65 s a test). The heads' arrays they check are the same on every
# backend; JAX's restore of kept heads is checked by test_tf_checkpoint_heads.py.
EAGER_ON_JAX = pytest.mark.runs_on("tensorflow", "torch", reason="eager ops: each compiles "
                                   "on its own on JAX (9-65 s a test)")


def _wordpiece_files(directory):
    with open(os.path.join(directory, "vocab.txt"), "w") as handle:
        handle.write("\n".join(WORDS) + "\n")
    return len(WORDS)


def _sentencepiece_files(directory):
    """ALBERT's spiece.model, trained on a few lines of WORDS; its vocabulary size."""
    from keras_ctx.convert.huggingface_tokenizers import save_tokenizer_files
    from keras_ctx.data import tokenizers

    lines = [" ".join(WORDS[5 + (i * 7 + j) % 35] for j in range(6)) for i in range(60)]
    tokenizer = tokenizers.train_albert_sentencepiece(lines, 40)
    save_tokenizer_files(tokenizer, directory)
    return tokenizer.vocabulary_size()


# (transformers config and model classes, config fields, tokenizer files, the preset that
# continues it).
MODELS = {"bert": ("BertConfig", "BertForPreTraining", {}, _wordpiece_files, "bert-tiny"),
          "albert": ("AlbertConfig", "AlbertForPreTraining",
                     dict(embedding_size=8, classifier_dropout_prob=0.0), _sentencepiece_files,
                     "albert-base"),
          "electra": ("ElectraConfig", "ElectraForPreTraining", dict(embedding_size=8),
                      _wordpiece_files, "electra-small"),
          "ernie": ("ErnieConfig", "ErnieForPreTraining", {}, _wordpiece_files,
                    "ernie-1.0-base")}


def _write_pretraining_checkpoint(directory, family, model_class=None):
    """A tiny *ForPreTraining (or `model_class`) of `family`, saved as transformers saves
    it, with its tokenizer files; returns its torch model."""
    import torch
    import transformers

    config_class, pretraining_class, fields, tokenizer_files, _ = MODELS[family]
    model_class = model_class or pretraining_class
    os.makedirs(directory, exist_ok=True)
    vocabulary_size = tokenizer_files(directory)
    config = getattr(transformers, config_class)(vocab_size=vocabulary_size, **SIZES, **fields)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    model.save_pretrained(directory)
    return model


@pytest.fixture(scope="module")
def pretraining_checkpoints(tmp_path_factory):
    """{family: (directory, transformers' model)}, written once for the module."""
    root = tmp_path_factory.mktemp("published")
    return {family: (str(root / family),
                     _write_pretraining_checkpoint(str(root / family), family))
            for family in MODELS}


def _heads_batch(vocabulary_size):
    """A masked pair batch: two rows of 12 ids, the second padded, one unused mask slot."""
    rng = np.random.default_rng(5)
    ids = rng.integers(5, vocabulary_size, (2, 12)).astype("int32")
    ids[:, 0], ids[1, 9:] = 2, 0
    padding_mask = (ids != 0).astype("int32")
    segment_ids = (np.arange(12)[None, :] >= 6).astype("int32") * padding_mask
    return {"token_ids": ids, "padding_mask": padding_mask, "segment_ids": segment_ids,
            "mask_positions": np.array([[3, 5, 8], [2, 4, 7]], "int32"),
            "mask_ids": rng.integers(5, vocabulary_size, (2, 3)).astype("int32"),
            "mask_weights": np.array([[1, 1, 1], [1, 1, 0]], "float32"),
            "next_sentence_labels": np.array([0, 1], "int32"),
            "sentence_order_labels": np.array([1, 0], "int32")}


def _continued(family, source, tmp_path):
    request = PretrainRequest.checked(MODELS[family][4], str(tmp_path / "run"), corpus="builtin",
                                      source=source, steps=1, batch_size=2, sequence_length=12)
    return continued_model(request.origin, request.preset, request.origin.tokenizer,
                           request.run)


def _masked_lm_labels(batch):
    """transformers' `labels` of a masked batch: the masked ids at their positions, -100
    elsewhere."""
    import torch

    labels = torch.full(batch["token_ids"].shape, -100, dtype=torch.long)
    for row, (positions, targets, weights) in enumerate(zip(
            batch["mask_positions"], batch["mask_ids"], batch["mask_weights"])):
        for position, target, weight in zip(positions, targets, weights):
            if weight:
                labels[row, position] = int(target)
    return labels


def _transformers_pair_losses(model, batch, label_key):
    """(masked LM loss, pair loss) of transformers' BertForPreTraining /
    AlbertForPreTraining on `batch`, its own total loss split by its pair logits."""
    import torch

    ids = torch.tensor(batch["token_ids"]).long()
    labels = _masked_lm_labels(batch)
    pair_labels = torch.tensor(batch[label_key]).long()
    pair_argument = {"next_sentence_labels": "next_sentence_label",
                     "sentence_order_labels": "sentence_order_label"}[label_key]
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.tensor(batch["padding_mask"]).long(),
                    token_type_ids=torch.tensor(batch["segment_ids"]).long(), labels=labels,
                    **{pair_argument: pair_labels})
    logits = out.seq_relationship_logits if hasattr(out, "seq_relationship_logits") \
        else out.sop_logits
    pair = float(torch.nn.functional.cross_entropy(logits, pair_labels))
    return float(out.loss) - pair, pair


@EAGER_ON_JAX
@pytest.mark.parametrize("family, objective, label_key", [
    ("bert", "nsp", "next_sentence_labels"), ("albert", "sop", "sentence_order_labels"),
    ("ernie", "nsp", "next_sentence_labels")])
def test_the_pair_head_continues_the_checkpoints(pretraining_checkpoints, family, objective, label_key,
                                                  tmp_path, capsys):
    directory, model = pretraining_checkpoints[family]
    backbone, pretrainer = _continued(family, directory, tmp_path)
    said = capsys.readouterr().out
    assert f"The objective's output head, pair head continue {directory}'s." in said, said
    batch = _heads_batch(model.config.vocab_size)
    losses = pretrainer.compute_losses(batch, training=False)
    mlm, pair = _transformers_pair_losses(model, batch, label_key)
    assert float(losses[objective]) == pytest.approx(pair, rel=1e-4)
    assert float(losses["mlm"]) == pytest.approx(mlm, rel=1e-4)


@EAGER_ON_JAX
def test_electras_discriminator_head_continues_and_its_generator_starts_new(
        pretraining_checkpoints, tmp_path, capsys):
    import torch

    directory, model = pretraining_checkpoints["electra"]
    _, pretrainer = _continued("electra", directory, tmp_path)
    said = capsys.readouterr().out
    assert f"The objective's replaced token head continues {directory}'s." in said, said
    assert f"{directory} has no output head for electra-small's objective" in said, said
    assert f"{directory} has no generator for electra-small's objective" in said, said
    batch = _heads_batch(model.config.vocab_size)
    outputs = pretrainer(batch, training=False)
    ours = float(pretrainer.losses_from_outputs(batch, outputs)["rtd"])
    with torch.no_grad():
        want = model(input_ids=torch.tensor(ops.convert_to_numpy(outputs["token_ids"])).long(),
                     attention_mask=torch.tensor(batch["padding_mask"]).long(),
                     token_type_ids=torch.tensor(batch["segment_ids"]).long(),
                     labels=torch.tensor(ops.convert_to_numpy(outputs["labels"])).long()).loss
    assert ours == pytest.approx(float(want), rel=1e-4)


@EAGER_ON_JAX
def test_an_electra_run_keeps_its_generator_beside_both_heads(pretraining_checkpoints,
                                                               tmp_path, capsys):
    directory, model = pretraining_checkpoints["electra"]
    backbone, pretrainer = _continued("electra", directory, tmp_path)
    rng = np.random.default_rng(9)
    trained = {role: [rng.normal(0, 0.3, np.shape(a)).astype("float32") for a in arrays]
               for role, arrays in head_weights(pretrainer).items()}
    assert sorted(trained) == ["generator", "output", "replaced_token"]
    # The generator's own weights: not the embeddings it reads from the discriminator.
    table = tuple(backbone.token_embedding.embeddings.shape)
    assert table not in [np.shape(a) for a in trained["generator"]]
    run = str(tmp_path / "electra-run")
    run_files.save_run(run, {"model": directory, "family": "electra", "sequence_length": 12},
                       backbone, backbone.tokenizer, head_weights=trained)
    capsys.readouterr()
    _, again = _continued("electra", run, tmp_path / "again")
    said = capsys.readouterr().out
    assert (f"The objective's output head, replaced token head, generator continue {run}'s."
            in said), said
    for role, arrays in head_weights(again).items():
        for got, want in zip(arrays, trained[role], strict=True):
            np.testing.assert_array_equal(got, want, err_msg=role)
    assert again.generator.token_embedding.embeddings is \
        again.discriminator.token_embedding.embeddings


@EAGER_ON_JAX
def test_an_albert_masked_lm_without_a_pooler_continues_its_head(tmp_path, capsys):
    """transformers' AlbertForMaskedLM saves no pooler (add_pooling_layer=False): it
    converts (was refused: no albert.pooler.weight), its MLM head continues, and the
    pooler SOP reads and the SOP head start new, said."""
    import torch

    directory = str(tmp_path / "albert-mlm")
    model = _write_pretraining_checkpoint(directory, "albert", "AlbertForMaskedLM")
    with pytest.warns(UserWarning, match="no 'pooler.weight'"):
        _, pretrainer = _continued("albert", directory, tmp_path)
    said = capsys.readouterr().out
    assert f"The objective's output head continues {directory}'s." in said, said
    assert f"{directory} has no pair head for albert-base's objective" in said, said
    batch = _heads_batch(model.config.vocab_size)
    with torch.no_grad():
        want = model(input_ids=torch.tensor(batch["token_ids"]).long(),
                     attention_mask=torch.tensor(batch["padding_mask"]).long(),
                     token_type_ids=torch.tensor(batch["segment_ids"]).long(),
                     labels=_masked_lm_labels(batch)).loss
    losses = pretrainer.compute_losses(batch, training=False)
    assert float(losses["mlm"]) == pytest.approx(float(want), rel=1e-4)


@pytest.fixture(scope="module")
def converted_bert_run(pretraining_checkpoints, tmp_path_factory):
    """The BertForPreTraining checkpoint converted into a run (`keras-ctx convert`'s)."""
    run = str(tmp_path_factory.mktemp("converted") / "bert")
    convert(pretraining_checkpoints["bert"][0], run)
    return run


@EAGER_ON_JAX
def test_a_converted_run_keeps_both_heads_and_continues_them(
        pretraining_checkpoints, converted_bert_run, tmp_path):
    _, model = pretraining_checkpoints["bert"]
    kept = run_files.load_heads(converted_bert_run)
    assert sorted(kept) == ["output", "pair"]
    np.testing.assert_array_equal(kept["pair"][0],
                                  model.cls.seq_relationship.weight.detach().numpy().T)
    batch = _heads_batch(model.config.vocab_size)
    mlm, pair = _transformers_pair_losses(model, batch, "next_sentence_labels")
    _, pretrainer = _continued("bert", converted_bert_run, tmp_path)
    losses = pretrainer.compute_losses(batch, training=False)
    assert float(losses["nsp"]) == pytest.approx(pair, rel=1e-4)
    assert float(losses["mlm"]) == pytest.approx(mlm, rel=1e-4)


@EAGER_ON_JAX
def test_a_run_saved_with_one_head_continues_it_and_starts_the_other(
        pretraining_checkpoints, converted_bert_run, tmp_path, capsys):
    _, model = pretraining_checkpoints["bert"]
    run = shutil.copytree(converted_bert_run, tmp_path / "one-head")
    # A run saved before the roles kept its output head alone, as arr_0, arr_1, ...
    output = run_files.load_heads(str(run))["output"]
    with open(run / run_files.HEAD_FILE, "wb") as handle:
        np.savez(handle, *output)
    _, pretrainer = _continued("bert", str(run), tmp_path)
    said = capsys.readouterr().out
    assert f"The objective's output head continues {run}'s." in said, said
    assert f"{run} has no pair head for bert-tiny's objective: it starts new." in said, said
    batch = _heads_batch(model.config.vocab_size)
    mlm, pair = _transformers_pair_losses(model, batch, "next_sentence_labels")
    losses = pretrainer.compute_losses(batch, training=False)
    assert float(losses["mlm"]) == pytest.approx(mlm, rel=1e-4)
    assert abs(float(losses["nsp"]) - pair) > 1e-3  # a new pair head


def test_a_head_file_with_another_role_or_a_gap_is_refused(tmp_path):
    path = tmp_path / run_files.HEAD_FILE
    for arrays in ({"pooler.0": np.zeros(2)}, {"pair.0": np.zeros(2), "pair.2": np.zeros(2)}):
        with open(path, "wb") as handle:
            np.savez(handle, **arrays)
        with pytest.raises(run_files.RunDirectoryError, match="is corrupt"):
            run_files.load_heads(str(tmp_path))
    with pytest.raises(ValueError, match="role 'pooler'"):
        run_files.save_run(str(tmp_path / "run"), {}, None, head_weights={"pooler": []})


@pytest.mark.slow  # ~20 s: a one-step CLI run compiling BERT's step
def test_the_first_cli_loss_is_transformers_mlm_and_nsp_loss_on_that_batch(
        pretraining_checkpoints, tmp_path):
    from keras_ctx.data import corpora
    from tests.cli_helpers import cli_output, first_and_last_loss

    directory, model = pretraining_checkpoints["bert"]
    out = str(tmp_path / "run")
    code, output = cli_output(["pretrain", "bert-tiny", "--from", directory, "--corpus",
                               "builtin", "--out", out, "--steps", "1", "--batch-size", "4",
                               "--sequence-length", "16", "--learning-rate", "1e-3"])
    assert code == 0, output[-2000:]
    first, _ = first_and_last_loss(output)
    request = PretrainRequest.checked("bert-tiny", out, corpus="builtin", source=directory,
                                      steps=1, batch_size=4, sequence_length=16)
    batch = next(iter(request.family.dataset(corpora.documents("builtin"),
                                             request.origin.tokenizer, request.run)))
    batch = {key: ops.convert_to_numpy(value) for key, value in batch.items()}
    mlm, pair = _transformers_pair_losses(model, batch, "next_sentence_labels")
    assert first == pytest.approx(mlm + pair, abs=6e-4)
    assert sorted(run_files.load_heads(out)) == ["output", "pair"]  # both kept, trained

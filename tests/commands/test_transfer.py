"""Monolingual transfer from the command line (keras_ctx.commands.transfer, finetune's
--freeze-token-embeddings): each step's frozen weights bit for bit, step 2's MLM loss against
its untrained start, step 4's classifier against one built by hand with the Python API of
keras_ctx.tasks.monolingual_transfer, and the refusals.

The default tests make steps 2 and 3's directories by hand (no training: seconds); the slow
one runs the four steps through `keras-ctx` (about a minute on a loaded 2-core machine)."""

import contextlib
import io
import os

import keras
import numpy as np
import pytest

from keras_ctx import runs
from keras_ctx.commands.transfer import TRANSFER_FILE, transfer_swap, transfer_vocabulary
from keras_ctx.common.errors import ConfigError
from keras_ctx.data import corpora
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.pretraining.kept_head import head_weights
from keras_ctx.tasks import SequenceClassifier
from keras_ctx.tasks import monolingual_transfer as mono
from tests.cli_helpers import VOCAB, run_cli, tiny_backbone

L2_WORDS = ("le chat assis sur un tapis et chien couru au parc pendant oiseaux chantaient "
            "dans vieux arbres").split()
TASK = [("the film was good .", "pos"), ("it was a good film .", "pos"),
        ("the film was bad .", "neg"), ("it was a bad film .", "neg")] * 4


def _source_run(directory):
    """A tiny BERT run that kept its masked-LM head (transform drawn away from its init)."""
    import keras_hub

    backbone = tiny_backbone(seed=0)
    pretrainer = BertPretrainer(backbone)
    pretrainer.mlm_head.build((None, None, backbone.hidden_size))
    rng = np.random.default_rng(1)
    for variable in pretrainer.mlm_head.own_weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32") * 0.1)
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=VOCAB, lowercase=True)
    runs.save_run(str(directory), {"model": "bert-tiny", "family": "bert",
                                   "sequence_length": 16}, backbone, tokenizer,
                  head_weights=head_weights(pretrainer))
    return backbone, [v.numpy() for v in pretrainer.mlm_head.own_weights]


def _quiet(function, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return function(*args, **kwargs)



# ------------------------------------------------------------ steps 2 and 3 made by hand

L2_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *L2_WORDS,
            *(f"##{c}" for c in "abcdefghijklmnopqrstu")]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(paths, source backbone): a source run, step 2's run (L2's table, another size, and
    the source's body) and a step-3 classifier (body moved as fine-tuning moves it, token
    table the source's) written with the Python API, and one whose table moved too."""
    import keras_hub

    from keras_ctx.common import files

    root = tmp_path_factory.mktemp("made")
    paths = {name: str(root / name) for name in ("l1", "l2", "frozen", "unfrozen")}
    source = _source_run(paths["l1"])[0]
    l2 = mono.resize_vocabulary(source, len(L2_VOCAB), seed=3)
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=L2_VOCAB, lowercase=True)
    runs.save_run(paths["l2"], {"model": "bert-tiny", "family": "bert",
                                "sequence_length": 16}, l2, tokenizer)
    files.write_json(os.path.join(paths["l2"], TRANSFER_FILE), {
        "source": paths["l1"], "source_table_sha256": mono.table_fingerprint(source),
        "body_sha256": mono.fingerprint(mono.body_weights(l2))})
    rng = np.random.default_rng(5)
    for name, moved in (("frozen", mono.body_weights), ("unfrozen", lambda b: b.weights)):
        backbone = mono.resize_vocabulary(source, source.vocabulary_size,
                                          rows=range(source.vocabulary_size))
        for variable in moved(backbone):
            variable.assign(variable + rng.normal(size=variable.shape).astype("float32")
                            * 0.05)
        classifier = SequenceClassifier(backbone, num_classes=2)
        classifier.get_layer("logits").set_weights(
            [rng.normal(size=w.shape).astype("float32") for w in
             classifier.get_layer("logits").get_weights()])
        os.makedirs(paths[name])
        classifier.save(os.path.join(paths[name], runs.CLASSIFIER_FILE))
        runs.save_finetuned_info(paths[name], {"run": paths["l1"], "family": "bert",
                                               "sequence_length": 16,
                                               "classes": ["neg", "pos"]})
    return paths, source


def _random_id_inputs(vocabulary_size, seed=0):
    ids = np.random.default_rng(seed).integers(5, vocabulary_size, size=(6, 12)).astype(
        "int32")
    return {"token_ids": ids, "padding_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids)}


def _logits(model, inputs):
    return keras.ops.convert_to_numpy(model(inputs))


def check_swap_equals_hand_built(classifier_dir, l2_dir, out):
    """Step 4 through `transfer_swap` against the Python API of monolingual_transfer:
    the L1 classifier's backbone resized to L2's vocabulary, L2's table swapped in, the
    classifier's head copied. Returns (L1 classifier, the swapped one as saved)."""
    swapped = _quiet(transfer_swap, classifier_dir, l2_dir, out)
    info, loaded = runs.load_finetuned(out)
    assert [v.path for v in swapped.weights] == [v.path for v in loaded.weights]
    l1_info, l1 = runs.load_finetuned(classifier_dir)
    assert info == {**l1_info, "run": os.path.abspath(l2_dir)}
    _, l2, _ = runs.load_run(l2_dir)
    backbone = mono.resize_vocabulary(l1.backbone, l2.vocabulary_size)
    mono.swap_token_embeddings(backbone, l2.token_embedding.embeddings)
    hand = SequenceClassifier(backbone, num_classes=len(l1_info["classes"]))
    hand.get_layer("logits").set_weights(l1.get_layer("logits").get_weights())
    inputs = _random_id_inputs(l2.vocabulary_size)
    np.testing.assert_allclose(_logits(loaded, inputs), _logits(hand, inputs), rtol=1e-5,
                               atol=1e-6)
    # The body is the classifier's fine-tuned one (not step 2's), the table L2's.
    for mine, theirs in zip(mono.body_weights(loaded.backbone), mono.body_weights(l1.backbone)):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    np.testing.assert_array_equal(loaded.backbone.token_embedding.embeddings.numpy(),
                                  l2.token_embedding.embeddings.numpy())
    low = _random_id_inputs(min(l1.backbone.vocabulary_size, l2.vocabulary_size), seed=1)
    assert np.abs(_logits(loaded, low) - _logits(l1, low)).max() > 1e-3
    return l1, loaded


def test_step_4_equals_the_classifier_built_by_hand(made, tmp_path):
    paths, _ = made
    check_swap_equals_hand_built(paths["frozen"], paths["l2"], str(tmp_path / "out"))


def test_step_4_refusals(made, tmp_path, capsys):
    paths, _ = made
    out = str(tmp_path / "out")
    with pytest.raises(ConfigError, match="are not those of .*--freeze-token-embeddings"):
        transfer_swap(paths["unfrozen"], paths["l2"], out)
    with pytest.raises(ConfigError, match="not a `keras-ctx transfer-vocabulary` --out"):
        transfer_swap(paths["frozen"], paths["l1"], out)
    with pytest.raises(ConfigError, match="not a `keras-ctx finetune --out` directory"):
        transfer_swap(paths["l2"], paths["l2"], out)
    assert not os.path.exists(out)
    code, said = run_cli(capsys, "transfer-swap", paths["unfrozen"], "--embeddings",
                         paths["l2"], "--out", out)
    lines = [line for line in said.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--freeze-token-embeddings" in lines[0], said


def test_step_2_refusals(made, tmp_path, monkeypatch):
    from keras_ctx import handles

    paths, _ = made
    with pytest.raises(ConfigError, match="--out .* is SOURCE itself"):
        transfer_vocabulary(paths["l1"], __file__, paths["l1"])
    with pytest.raises(ConfigError, match="--text .* does not exist"):
        transfer_vocabulary(paths["l1"], str(tmp_path / "none.txt"), str(tmp_path / "o"))
    with pytest.raises(ConfigError, match="--vocabulary-size must be at least"):
        transfer_vocabulary(paths["l1"], __file__, str(tmp_path / "o"), vocabulary_size=3)
    # A model without a token table (ELMo reads characters; the slow test loads a real one).
    monkeypatch.setattr(handles, "resolve", lambda handle, **_: handles.Resolved(
        handle, "run", keras.layers.Dense(2), None,
        {"family": "elmo", "model": "elmo-small", "sequence_length": 8}))
    with pytest.raises(ConfigError, match="elmo model, which has no token embedding table"):
        transfer_vocabulary(paths["l1"], __file__, str(tmp_path / "o"))
    assert not os.path.exists(tmp_path / "o")


# --------------------------------------------------------- the four steps, from the CLI


def _mlm_loss(backbone, head, tokenizer, text):
    """The masked-LM loss of `backbone` under a head of these arrays on four of BERT's
    pretraining batches of `text` (the same masks each call)."""
    from keras_ctx import families
    from keras_ctx.registry import Run

    keras.utils.set_random_seed(7)
    pretrainer = BertPretrainer(backbone)
    pretrainer.mlm_head.build((None, None, backbone.hidden_size))
    for variable, value in zip(pretrainer.mlm_head.own_weights, head):
        variable.assign(value)
    run = Run(preset="bert-tiny", batch_size=8, sequence_length=16,
              vocabulary_size=backbone.vocabulary_size, seed=7)
    data = families.get("bert").dataset(corpora.documents(text), tokenizer, run)
    return float(np.mean([float(pretrainer.compute_losses(batch, training=False)["mlm"])
                          for batch in data.take(4)]))


def _write_texts(root):
    rng = np.random.default_rng(0)
    with open(root / "l2.txt", "w") as text:
        for _ in range(40):
            for _ in range(4):
                words = rng.integers(0, len(L2_WORDS), size=int(rng.integers(5, 9)))
                text.write(" ".join(L2_WORDS[i] for i in words) + " .\n")
            text.write("\n")
    with open(root / "task.tsv", "w") as task:
        task.writelines(f"{text}\t{label}\n" for text, label in TASK)


@pytest.mark.slow
def test_the_four_steps_from_the_command_line(tmp_path, capsys):
    from keras_ctx import families
    from keras_ctx.models import from_preset

    source, head = _source_run(tmp_path / "l1")
    _write_texts(tmp_path)
    l1, l2_dir, text = (str(tmp_path / name) for name in ("l1", "l2", "l2.txt"))
    step_2 = ["transfer-vocabulary", l1, "--text", text, "--out", l2_dir,
              "--vocabulary-size", "64", "--steps", "40", "--batch-size", "8",
              "--learning-rate", "0.02", "--checkpoint-every", "20"]
    code, said = run_cli(capsys, *step_2)
    assert code == 0, said
    # Step 2: L2's own WordPiece; every weight but the token table is the source's, bit
    # for bit; the head's transform the source's kept one, its output bias L2's, learned.
    info, l2, tokenizer = runs.load_run(l2_dir, need_tokenizer=True)
    assert info["family"] == "bert" and l2.vocabulary_size == tokenizer.vocabulary_size()
    assert "parc" in tokenizer.get_vocabulary() and "film" not in tokenizer.get_vocabulary()
    body, source_body = mono.body_weights(l2), mono.body_weights(source)
    assert [v.path for v in body] == [v.path for v in source_body]
    for mine, theirs in zip(body, source_body):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=mine.path)
    kept = runs.load_head_weights(l2_dir)
    (at,) = [i for i, w in enumerate(kept) if np.shape(w) == (l2.vocabulary_size,)]
    for i, (mine, theirs) in enumerate(zip(kept, head)):
        if i != at:
            np.testing.assert_array_equal(mine, theirs)
    assert np.abs(kept[at]).max() > 0
    # Its MLM loss against the same model with untrained L2 embeddings and a zero bias.
    start = mono.resize_vocabulary(source, l2.vocabulary_size, seed=0)
    untrained = _mlm_loss(start, [np.zeros_like(w) if i == at else w
                                  for i, w in enumerate(kept)], tokenizer, text)
    trained = _mlm_loss(l2, kept, tokenizer, text)
    with capsys.disabled():
        print(f"L2 MLM loss: untrained embeddings {untrained:.3f}, after step 2 {trained:.3f}")
    assert trained < untrained - 0.5
    # A rerun of the finished run resumes it: nothing left to train, the run unchanged.
    table = l2.token_embedding.embeddings.numpy()
    code, said = run_cli(capsys, *step_2)
    assert code == 0 and "Nothing left to train" in said, said
    np.testing.assert_array_equal(runs.load_run(l2_dir)[1].token_embedding.embeddings.numpy(),
                                  table)
    # Step 3: the token table stays the source's bit for bit, most of the body moves;
    # without the flag the table moves too.
    for name, flag in (("frozen", ["--freeze-token-embeddings"]), ("unfrozen", [])):
        code, said = run_cli(capsys, "finetune", l1, "--train", str(tmp_path / "task.tsv"),
                             "--out", str(tmp_path / name), "--epochs", "1",
                             "--learning-rate", "0.01", "--batch-size", "8", *flag)
        assert code == 0, said
    _, frozen = runs.load_finetuned(str(tmp_path / "frozen"))
    _, unfrozen = runs.load_finetuned(str(tmp_path / "unfrozen"))
    l1_table = source.token_embedding.embeddings.numpy()
    np.testing.assert_array_equal(frozen.backbone.token_embedding.embeddings.numpy(), l1_table)
    assert not np.array_equal(unfrozen.backbone.token_embedding.embeddings.numpy(), l1_table)
    moved = [not np.array_equal(a.numpy(), b.numpy()) for a, b in
             zip(mono.body_weights(frozen.backbone), source_body)]
    assert sum(moved) > len(moved) // 2
    # Step 4: the classifier built by hand; the one fine-tuned without the flag refused.
    check_swap_equals_hand_built(str(tmp_path / "frozen"), l2_dir, str(tmp_path / "l2-cls"))
    code, said = run_cli(capsys, "transfer-swap", str(tmp_path / "unfrozen"), "--embeddings",
                         l2_dir, "--out", str(tmp_path / "x"))
    assert code == 2 and "--freeze-token-embeddings" in said, said
    # ELMo (characters in) has no token table to learn.
    elmo = from_preset("elmo-small", **families.get("elmo").tiny)
    runs.save_run(str(tmp_path / "elmo"), {"model": "elmo-small", "family": "elmo",
                                           "sequence_length": 8}, elmo)
    code, said = run_cli(capsys, "transfer-vocabulary", str(tmp_path / "elmo"), "--text",
                         text, "--out", str(tmp_path / "y"))
    assert code == 2 and "elmo model, which has no token embedding table" in said, said

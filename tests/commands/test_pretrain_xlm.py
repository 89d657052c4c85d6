"""`keras-ctx pretrain` runs XLM's paper stages (issue 54): MLM on each language's stream
(`--languages` names each `--corpus` file's language), TLM on `--parallel` pairs,
alternated as XLM's `--mlm_steps 'en,fr,en-fr'` (keras_ctx/data/xlm_recipe.py)."""

import hashlib
import json

import numpy as np
import pytest

from keras_ctx import registry
from keras_ctx.data import corpora as corpus_files
from keras_ctx.data import token_counts, tokenizers
from keras_ctx.data import xlm_recipe as recipe
from tests.cli_helpers import XLM_TINY, cli_output, first_and_last_loss, one_line_error



def test_the_batches_alternate_mlm_on_each_language_and_tlm_on_the_pairs(corpora):
    en, fr, pairs = corpora
    lines = [line for path in (en, fr) for line in open(path).read().split("\n") if line]
    tokenizer = tokenizers.train_xlm_bpe(lines, 200)
    # --languages fr,en: XLM numbers languages in sorted order, en 0 and fr 1.
    languages, parallel = recipe.check_inputs([fr, en], "fr,en", [f"en-fr={pairs}"])
    run = registry.Run("xlm-mlm-enfr-1024", 4, 32, 200, inputs=(
        ("languages", languages), ("parallel", parallel), ("corpora", (fr, en))))
    assert recipe.recipe_config(run) == {"num_languages": 2}
    batches = list(recipe.xlm_dataset(None, tokenizer, run).take(30).as_numpy_iterator())
    rows = range(4)
    for step, batch in enumerate(batches):
        ids, positions = batch["language_ids"], batch["position_ids"]
        if step % 3 < 2:  # MLM: one language per batch (XLM's), positions running
            assert len(np.unique(ids)) == 1, step
            assert (positions == np.arange(32)).all() and batch["padding_mask"].all()
        else:  # TLM: each row holds both languages, positions restart at the target
            assert all(set(ids[r][batch["padding_mask"][r] > 0]) == {0, 1} for r in rows)
            assert all((positions[r] == 0).sum() >= 2 for r in rows), step
        assert (batch["mask_weights"].sum(1) > 0).any(), step  # masked (xlm_masker)
    mlm = {int(b["language_ids"][0, 0]) for i, b in enumerate(batches) if i % 3 < 2}
    assert mlm == {0, 1}  # both languages' streams were drawn
    # Each stream's text is its language's: "chat" (French only) is read under id 1 only.
    chat, seen = tokenizer.token_to_id("chat</w>"), set()
    for batch in batches[0::3] + batches[1::3]:
        text = batch["token_ids"].copy()  # the uncorrupted ids: the targets put back
        for row in rows:
            used = batch["mask_weights"][row] > 0
            text[row, batch["mask_positions"][row][used]] = batch["mask_ids"][row][used]
        seen.add(((text == chat).any(), int(batch["language_ids"][0, 0])))
    assert (True, 1) in seen and (True, 0) not in seen, seen


# The first 12 batches of --languages fr,en (MLM), and of --parallel en-fr too (MLM and
# TLM), as the recipe made them when it read each corpus and pair file into memory
# (main 6101898): streaming changes no batch.
IN_MEMORY_BATCHES = {
    (): "c8dd7673adb7997098e4ec855fd5277ca8b5330aa7ab47f9576d3c1e0a7e322a",
    ("en-fr",): "6f21c828572030890cc8c990336b602e710b892de8605c2bb99927934c740d83"}


@pytest.mark.parametrize("pairs", [(), ("en-fr",)])
def test_each_corpus_streams_through_tf_data_with_the_in_memory_batches(corpora, pairs,
                                                                        monkeypatch):
    en, fr, tsv = corpora
    lines = [line for path in (en, fr) for line in open(path).read().split("\n") if line]
    tokenizer = tokenizers.train_xlm_bpe(lines, 200)

    def read_whole(source):
        raise AssertionError(f"{source} was read into Python, not streamed")

    monkeypatch.setattr(corpus_files, "iter_documents", read_whole)
    languages, parallel = recipe.check_inputs([fr, en], "fr,en",
                                              [f"{p}={tsv}" for p in pairs])
    run = registry.Run("xlm-mlm-enfr-1024", 4, 32, 200, inputs=(
        ("languages", languages), ("parallel", parallel), ("corpora", (fr, en))))
    digest = hashlib.sha256()
    for batch in recipe.xlm_dataset(None, tokenizer, run).take(12).as_numpy_iterator():
        for key in sorted(batch):
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(batch[key]).tobytes())
    assert digest.hexdigest() == IN_MEMORY_BATCHES[pairs]


@pytest.mark.parametrize("arguments, says", [
    (["--languages", "en,fr"], "give one --corpus per language"),
    (["--languages", "en,xx1"], "not a language code"),
    (["--languages", "en", "--parallel", "en-de=PAIRS"], "'de' is not one of --languages"),
    (["--parallel", "en-fr=PAIRS"], "--parallel needs --languages"),
    (["--languages", "en", "--parallel", "en-fr"], "--parallel takes SOURCE-TARGET=FILE"),
])
def test_bad_inputs_are_refused_in_one_line(arguments, says, corpora, tmp_path):
    arguments = [a.replace("PAIRS", corpora[2]) for a in arguments]
    code, output = cli_output(["pretrain", "xlm-mlm-enfr-1024", "--corpus", corpora[0],
                               "--out", str(tmp_path / "run"), *arguments])
    assert code != 0 and says in one_line_error(output), output[-500:]


def test_a_malformed_pair_line_and_another_family_are_refused(corpora, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("the cat .\tle chat .\nthe dog . le chien .\n")
    code, output = cli_output(["pretrain", "xlm-mlm-enfr-1024", "--corpus", corpora[0],
                               "--corpus", corpora[1], "--languages", "en,fr",
                               "--parallel", f"en-fr={bad}", "--out", str(tmp_path / "run")])
    assert code != 0 and f"{bad}:2: a parallel line" in one_line_error(output)
    code, output = cli_output(["pretrain", "bert-tiny", "--corpus", corpora[0], "--languages",
                               "en", "--out", str(tmp_path / "bert")])
    assert code != 0 and "the bert recipe reads one --corpus" in one_line_error(output)



@pytest.mark.slow  # ~13 s: three tiny runs (TensorFlow, 2 shared cores)
def test_the_cli_trains_xlm_on_two_languages_and_pairs_and_resumes(corpora, tmp_path):
    en, fr = corpora[0], str(tmp_path / "fr.txt")
    pairs, out = tmp_path / "en-fr.tsv", str(tmp_path / "run")
    pairs.write_text(open(corpora[2]).read())
    # French elision, which Moses splits after the apostrophe for fr ("l'", "homme") and
    # before it for en ("l", "'homme"): the run learns its BPE with each corpus' rules.
    with open(fr, "w") as handle:
        handle.write(open(corpora[1]).read() + "l'homme et l'oiseau .\n" * 8)
    command = ["pretrain", "xlm-mlm-enfr-1024", "--corpus", en, "--corpus", fr,
               "--languages", "en,fr", "--parallel", f"en-fr={pairs}", "--out", out,
               "--checkpoint-every", "6", *XLM_TINY]
    code, output = cli_output(command + ["--steps", "12"])
    assert code == 0, output[-2000:]
    assert "XLM stage MLM on en, fr" in output and "alpha 0.5 (Sec. 3.1)" in output
    assert "XLM stage TLM on en-fr: 120 of 120 pairs" in output
    assert "--mlm_steps 'en,fr,en-fr'" in output
    first, last = first_and_last_loss(output)
    assert last < first, output[-1000:]
    learnt = tokenizers.load_tokenizer(f"{out}/{tokenizers.TOKENIZER_DIR}").vocabulary
    assert "l'</w>" in learnt and "'homme</w>" not in learnt
    code, output = cli_output(command + ["--steps", "18"])  # resumes from step 12
    assert code == 0 and "Steps 13-18 of 18" in output, output[-2000:]
    assert "Read the fr corpus' token counts" in output  # not counted again
    unpaired = [a for a in command if a not in ("--parallel", f"en-fr={pairs}")]
    code, output = cli_output(unpaired + ["--steps", "24"])  # MLM only: other text
    assert code != 0 and f"removed {pairs}" in one_line_error(output)
    with open(pairs, "a") as handle:  # the pairs are the run's data: another file is refused
        handle.write("the cat .\tle chat .\n")
    code, output = cli_output(command + ["--steps", "24"])
    assert code != 0 and f"changed {pairs}" in one_line_error(output), output[-500:]


def test_a_resumed_run_reads_each_languages_counts_back_and_recounts_a_changed_one(
        corpora, tmp_path, monkeypatch, capsys):
    # The sentence counts weigh the languages (XLM's set_sampling_probs) and the token counts
    # the masker: a resumed run reads both back (token_counts.kept_in) instead of reading its
    # corpora again; a changed corpus alone is counted again, and the log says why.
    en, fr = (tmp_path / "en.txt", tmp_path / "fr.txt")
    en.write_text(open(corpora[0]).read())
    fr.write_text(open(corpora[1]).read())
    lines = [line for path in (en, fr) for line in path.read_text().split("\n") if line]
    tokenizer = tokenizers.train_xlm_bpe(lines, 200)
    languages, parallel = recipe.check_inputs([str(en), str(fr)], "en,fr", ())
    run = registry.Run("xlm-mlm-enfr-1024", 4, 32, 200, inputs=(
        ("languages", languages), ("parallel", parallel), ("corpora", (str(en), str(fr)))))
    counted, real = [], token_counts.counted
    monkeypatch.setattr(token_counts, "counted", lambda elements, size, about: (
        counted.append(about[0]), real(elements, size, about))[1])
    out = tmp_path / "run"
    out.mkdir()

    def first_batches():
        with token_counts.kept_in(out, {"files": []}):
            data = recipe.xlm_dataset(None, tokenizer, run)
        return [b["token_ids"].tolist() for b in data.take(2).as_numpy_iterator()]

    begun = first_batches()
    assert counted == ["the en corpus'", "the fr corpus'"]
    for name in ("en", "fr"):  # 120 sentences (non-blank lines) in each corpus
        record = json.loads((out / f"token_counts.{name}.json").read_text())
        assert record["elements"] == 120 and sum(record["token_counts"]) > 120
    counted.clear()
    capsys.readouterr()
    assert first_batches() == begun and counted == []  # resumed: nothing counted again
    assert "Read the fr corpus' token counts from" in capsys.readouterr().out
    with open(fr, "a") as handle:
        handle.write("le chat .\n")
    first_batches()
    assert counted == ["the fr corpus'"]
    said = capsys.readouterr().out
    assert (f"token_counts.fr.json are of another corpus: counting again. Since they were "
            f"counted: changed {fr}.") in said, said
    assert json.loads((out / "token_counts.fr.json").read_text())["elements"] == 121

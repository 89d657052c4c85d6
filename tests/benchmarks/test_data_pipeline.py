"""Keeps benchmarks/data_pipeline.py working: its corpus, its memory probe, a tiny run."""

import os
import subprocess
import sys

import pytest

from benchmarks import data_pipeline

pytestmark = pytest.mark.backend_neutral(
    "the benchmark's corpus and memory probe (tf.data and processes)")


def test_corpus_is_the_builtin_one_repeated_to_size(tmp_path, monkeypatch):
    from keras_ctx.data import corpora

    documents = [["First sentence.", "Second one."], ["Another document."]]
    monkeypatch.setattr(corpora, "builtin_documents", lambda: documents)
    path = data_pipeline.make_corpus(str(tmp_path / "c.txt"), 0.01)
    text = "First sentence.\nSecond one.\n\nAnother document.\n\n"
    copies = -(-int(0.01 * (1 << 20)) // len(text))  # whole copies until the size is reached
    assert open(path).read() == text * copies
    assert list(corpora.iter_documents(path)) == documents * copies
    assert data_pipeline.make_corpus(path, 0.005) == path  # big enough: kept
    assert os.path.getsize(path) == len(text) * copies


def test_tree_memory_counts_a_child_process():
    # A child holding 300 MB it has written (resident): the tree's sum includes it.
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; block = bytearray(300 << 20); block[::4096] = b'x' * len(block[::4096]);"
        " print('ready', flush=True); time.sleep(30)")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            pss, rss = data_pipeline.tree_memory(os.getpid())
            alone = data_pipeline.tree_memory(parent.pid)
        finally:
            parent.kill()
        assert pss >= 300 << 20 and rss >= pss
        assert alone[0] < 100 << 20  # a bare interpreter, without the 300 MB child
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow  # a prepare process and a bert-mini step: ~1-2 min on 2 cores
def test_tiny_run_reports_every_column(tmp_path):
    rows, train = data_pipeline.main([
        "--sizes-mb", "0.3", "--sample", "2000", "--vocabulary-size", "400", "--batch", "4",
        "--read-batches", "5", "--train-steps", "1", "--duplicate", "1", "--shard-mb", "0.1",
        "--dir", str(tmp_path)])
    (megabytes, sentences, read_mb, sample, tokenizer_s, minutes, per_core, memory, examples,
     rate, ratio) = rows[0]
    assert int(sentences.replace(",", "")) > 2000 and sample == "2,000"
    assert float(read_mb) > 0 and float(per_core) > 0
    pss, rss = memory.replace(",", "").replace("(", "").replace(")", "").split()
    assert 0 < int(pss) <= int(rss)
    assert int(examples.replace(",", "")) > 100 and train > 0
    assert float(ratio.rstrip("x").replace(",", "")) == pytest.approx(
        float(rate.replace(",", "")) / train, rel=0.05)

"""Keeps benchmarks/train_throughput.py working: a tiny BERT, one timed step."""

import pytest

from benchmarks import train_throughput


def test_train_throughput_tiny_bert_runs_and_reports():
    rows = train_throughput.main([
        "--model", "bert", "--compare", "none", "--layers", "1", "--hidden", "32",
        "--heads", "2", "--batch", "2", "--length", "16", "--xla", "off",
        "--repeats", "1", "--steps", "1",
    ])
    assert len(rows) == 1
    implementation, xla, precision, ms, tokens, gflops, mfu, hfu, rss = rows[0]
    assert (implementation, xla, precision) == ("keras_ctx", "off", "float32")
    assert float(ms) > 0
    assert float(tokens.replace(",", "")) == pytest.approx(2 * 16 / (float(ms) / 1e3), rel=0.05)
    assert 0 < float(hfu.rstrip("%")) < float(mfu.rstrip("%")) < 100  # sparse last layer
    assert float(rss.replace(",", "")) > 100  # MB: the worker's RSS high-water mark


def test_model_flops_formula_bert():
    # 6N + 12LTH per token + 6(H^2 + HV) per selected position, by hand for a
    # one-layer H=4 model: N = 4(16+4) + (4*16+16) + (16*4+4) + 16 = 244.
    spec = {"model": "bert", "layers": 1, "hidden": 4, "heads": 1, "batch": 1, "length": 20}
    P = train_throughput.num_predictions(20)
    assert P == 3
    V = train_throughput.VOCABULARY["bert"]
    expected = 20 * (6 * 244 + 12 * 1 * 20 * 4) + P * 6 * (16 + 4 * V)
    assert train_throughput.model_flops(spec, "keras_ctx") == expected


def test_executed_flops_skip_the_last_layer_at_unselected_rows():
    # H=4, F=16, T=20, P=3: each of the 17 unselected rows skips Q, O and the
    # FFN (6 * (2 * 20 + 64 + 16 + 64 + 4) = 1128) and its attention row
    # (12 * 20 * 4 = 960).
    spec = {"model": "bert", "layers": 1, "hidden": 4, "heads": 1, "batch": 1, "length": 20}
    skipped = 17 * (1128 + 960)
    assert (train_throughput.model_flops(spec, "keras_ctx")
            - train_throughput.executed_flops(spec, "keras_ctx")) == skipped
    assert (train_throughput.executed_flops(spec, "keras-hub")
            == train_throughput.model_flops(spec, "keras-hub"))


def test_generation_benchmark_tiny_gpt2_int8_runs_and_reports():
    from benchmarks import generation

    rows = generation.main([
        "--layers", "1", "--hidden", "32", "--heads", "2", "--vocab", "64", "--prompt", "4",
        "--max-length", "8", "--batches", "2", "--precisions", "int8", "--repeats", "1",
        "--bandwidth-mb", "8",
    ])
    assert [row[:3] for row in rows] == [("int8", 2, "keras_ctx"), ("int8", 2, "keras-hub")]
    for precision, batch, name, speed, mib, bound, share, ratio in rows:
        speed, bound = float(speed.replace(",", "")), float(bound.replace(",", ""))
        assert speed > 0 and bound > 0
        assert float(share.rstrip("%")) == pytest.approx(100 * speed / bound, abs=1)
    # Both quantize the same weights (the tied token embedding too): the same bound.
    assert rows[0][5] == rows[1][5]
    assert rows[1][7] == "1.00x"

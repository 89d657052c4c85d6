"""Keeps benchmarks/train_throughput.py working: a tiny BERT, one timed step."""

import pytest

from benchmarks import train_throughput


@pytest.mark.slow  # ~25 s
@pytest.mark.tensorflow_only("benchmarks/train_throughput.py steps Keras' TensorFlow train "
                             "function on a tf.data iterator")
def test_train_throughput_tiny_bert_runs_and_reports():
    rows = train_throughput.main([
        "--model", "bert", "--compare", "none", "--layers", "1", "--hidden", "32",
        "--heads", "2", "--batch", "2", "--length", "16", "--xla", "off",
        "--repeats", "2", "--steps", "2",
    ])
    assert len(rows) == 1
    implementation, xla, precision, ms, spread, faults, tokens, gflops, mfu, hfu, rss = rows[0]
    assert (implementation, xla, precision) == ("keras_ctx", "off", "float32")
    assert float(ms) > 0
    low, high = (float(v) for v in spread.split("-"))
    assert low <= float(ms) <= high  # the median of the 4 single steps lies within p10-p90
    assert float(faults.replace(",", "")) >= 0
    assert float(tokens.replace(",", "")) == pytest.approx(2 * 16 / (float(ms) / 1e3), rel=0.05)
    # Three significant digits: a tiny model at 0.9% still shows the sparse last layer.
    assert 0 < float(hfu.rstrip("%")) < float(mfu.rstrip("%")) < 100  # sparse last layer
    assert float(rss.replace(",", "")) > 100  # MB: the worker's RSS high-water mark


@pytest.mark.backend_neutral("arithmetic on the configuration")
def test_model_flops_formula_bert():
    # 6N + 12LTH per token + 6(H^2 + HV) per selected position, by hand for a
    # one-layer H=4 model: N = 4(16+4) + (4*16+16) + (16*4+4) + 16 = 244.
    spec = {"model": "bert", "layers": 1, "hidden": 4, "heads": 1, "batch": 1, "length": 20}
    P = train_throughput.num_predictions(20)
    assert P == 3
    V = train_throughput.VOCABULARY["bert"]
    expected = 20 * (6 * 244 + 12 * 1 * 20 * 4) + P * 6 * (16 + 4 * V)
    assert train_throughput.model_flops(spec, "keras_ctx") == expected


@pytest.mark.backend_neutral("arithmetic on the configuration")
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


@pytest.mark.slow  # ~35 s
@pytest.mark.tensorflow_only("the benchmark compares XLA and TF graphs of the loop with "
                             "keras-hub's tf.function")
def test_generation_benchmark_tiny_gpt2_int8_runs_and_reports():
    from benchmarks import generation

    rows = generation.main([
        "--layers", "1", "--hidden", "32", "--heads", "2", "--vocab", "64", "--prompt", "4",
        "--max-length", "8", "--batches", "2", "--precisions", "int8", "--repeats", "1",
        "--bandwidth-mb", "8",
    ])
    # Ours is labelled with its jit_compile choice (default "auto").
    assert [row[:3] for row in rows] == [("int8", 2, "keras_ctx auto"), ("int8", 2, "keras-hub")]
    for precision, batch, name, speed, mib, bound, share, ratio in rows:
        speed, bound = float(speed.replace(",", "")), float(bound.replace(",", ""))
        assert speed > 0 and bound > 0
        assert float(share.rstrip("%")) == pytest.approx(100 * speed / bound, abs=1)
    # Both quantize the same weights (the tied token embedding too): the same bound.
    assert rows[0][5] == rows[1][5]
    assert rows[1][7] == "1.00x"


@pytest.mark.tensorflow_only("benchmarks/backbone.py steps Keras' TensorFlow train function "
                             "on a tf.data iterator")
def test_backbone_benchmark_tiny_bert_reports_both_libraries_and_their_ratio():
    from benchmarks import backbone

    rows = backbone.main(["--models", "bert", "--layers", "1", "--hidden", "32", "--heads", "2",
                          "--batch", "2", "--length", "16", "--xla", "off", "--steps", "3",
                          "--labels", "3"])
    assert [row[:3] for row in rows] == [("bert", "keras_ctx", "off"), ("bert", "keras-hub", "off")]
    for _, _, _, ms, spread, faults, tokens, _ in rows:
        assert float(tokens.replace(",", "")) == pytest.approx(2 * 16 / (float(ms) / 1e3),
                                                               rel=0.05)
        low, high = (float(v) for v in spread.split("-"))
        assert low <= float(ms) <= high  # the median lies within p10-p90
        assert float(faults.replace(",", "")) >= 0
    # keras-hub's step time over ours, per turn: between the extremes of the two medians' ratio.
    ratio = rows[0][-1]
    median, (low, high) = float(ratio.split("x")[0]), ratio[ratio.index("(") + 1:-1].split("-")
    assert float(low) <= median <= float(high)


@pytest.mark.backend_neutral("timing helpers on plain Python functions")
def test_interleave_alternates_the_order_and_counts_page_faults():
    from benchmarks import common

    order = []
    touched = []

    def a():
        order.append("a")

    def b():  # touches 64 MB of fresh memory: thousands of minor page faults
        order.append("b")
        touched.append(bytearray(64 << 20))
        touched[-1][::4096] = b"x" * len(touched[-1][::4096])

    samples = common.interleave({"a": a, "b": b}, 3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert [len(samples[k]) for k in "ab"] == [3, 3]
    assert min(f for _, f in samples["b"]) >= 64 * 256 // 2  # 4 kB pages, >= half faulted
    seconds, spread, faults = common.summary([(0.1, 10), (0.3, 30), (0.2, 20)])
    assert (seconds, faults) == (0.2, 20) and spread == "120.0-280.0"
    assert common.paired_ratio([(1.0, 0), (2.0, 0)], [(1.5, 0), (2.0, 0)])[0] == 1.25


def test_backbone_benchmark_user_model_is_backbone_plus_dense_head():
    from benchmarks import backbone

    for library in ("keras_ctx", "keras-hub"):
        model = backbone.user_model(backbone.backbone("gpt2", library, 1, 16, 2, 8), labels=3)
        assert model.output.shape[-1] == 3 and model.layers[-1].name == "tagger"
        assert set(model.input) == {"token_ids", "padding_mask"}


@pytest.mark.tensorflow_only("times a SavedModel and tf.function calls, XLA on and off")
def test_inference_latency_tiny_bert_times_the_xla_export_too():
    from benchmarks import inference_latency

    rows = inference_latency.main(["--layers", "1", "--hidden", "32", "--heads", "2",
                                   "--batches", "1", "--length", "8", "--repeats", "1",
                                   "--calls", "1", "--no-onnx"])  # ONNX: test_export_onnx.py
    labels = [(row[0], row[1]) for row in rows]
    assert ("keras_ctx SavedModel serving_default", "on") in labels
    assert ("keras_ctx SavedModel serving_default", "off") in labels
    reference = rows[labels.index(("keras_ctx Keras", "on"))]
    assert float(reference[-1]) == 1.0  # latencies are relative to XLA Keras


@pytest.mark.tensorflow_only("the benchmark times TensorFlow's GradientTape step in a "
                             "tf.function, XLA on and off")
def test_lstm_benchmark_tiny_reports_the_projected_cell_with_and_without_xla():
    from benchmarks import lstm

    rows = lstm.main(["--batch", "2", "--length", "4", "--features", "8", "--units", "8",
                      "--projection", "4", "--repeats", "1", "--steps", "1"])
    projected = [row for row in rows if "projection" in row[0]]
    assert sorted(row[1] for row in projected) == ["off", "on"]
    # 3 x 2 x (8*32 + 4*32 + 8*4) FLOPs per token, 8 tokens, over the time.
    name, _, ms, _, gflops = projected[0]
    assert float(gflops) == pytest.approx(3 * 2 * 416 * 8 / (float(ms) / 1e3) / 1e9, rel=0.05)


@pytest.mark.backend_neutral("parses XLA's HLO dump files written here")
def test_profile_step_reads_optimized_hlo_and_groups_thunks(tmp_path):
    from benchmarks import profile_step

    # Two modules: the larger one (the step) names the instructions.
    (tmp_path / "module_0001.small.after_optimizations.txt").write_text(
        '  %dot.1 = f32[2,2]{1,0} add(f32[2,2] %a, f32[2,2] %b)\n')
    (tmp_path / "module_0002.step.after_optimizations.txt").write_text(
        '  %dot.1 = f32[2048,256]{1,0} dot(f32[2048,1024]{1,0} %x, f32[1024,256]{1,0} %w), '
        'lhs_contracting_dims={1}, metadata={op_type="MatMul" op_name="model/ffn/MatMul"}\n'
        '  ROOT %multiply_add_fusion.4 = f32[30522,256]{1,0} fusion(f32[30522,256]{1,0} %p), '
        'kind=kLoop, calls=%fused, metadata={op_type="AddV2" '
        'op_name="adam/Add_3"}\n'
        '  %rng.2 = u32[16,128]{1,0} rng-bit-generator(u64[2]{0} %s), '
        'metadata={op_type="StatelessRandomUniformV2" op_name="model/dropout/random"}\n'
        '  %add_fusion = f32[8]{0} fusion(f32[8]{0} %q), kind=kLoop, calls=%f2\n')
    table = profile_step.hlo_instructions(str(tmp_path))
    assert table["dot.1"] == ("dot", "MatMul", "model/ffn/MatMul")
    assert table["multiply_add_fusion.4"][0] == "fusion"
    assert profile_step.category("dot.1", table) == "matrix products"
    assert profile_step.category("multiply_add_fusion.4", table) == "optimizer (Adam)"
    assert profile_step.category("rng.2", table) == "dropout generator"
    assert profile_step.category("add_fusion", table) == "other elementwise fusions"
    # A thunk XLA named itself (not in the dump): its name gives the opcode.
    assert profile_step.category("transpose.7", table) == "copies / transposes"


@pytest.mark.slow  # ~35 s: two bert-mini models (30,522-row tables) built and stepped
def test_backend_mlm_times_both_libraries_on_this_backend():
    """benchmarks/backend_mlm.py (the table per backend in RESULTS.md; gpu_check.sh runs it
    on torch): both models step, and the table is the medians it prints."""
    from benchmarks import backend_mlm

    median = backend_mlm.main(["--batch", "2", "--length", "16", "--predictions", "2",
                               "--warmup", "1", "--steps", "1", "--rounds", "2"])
    assert sorted(median) == ["keras_ctx", "keras_hub"]
    assert all(ms > 0 for ms in median.values())

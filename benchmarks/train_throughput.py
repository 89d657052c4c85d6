"""Training throughput and model FLOPs utilisation (MFU): keras_ctx vs keras-hub.

    python -m benchmarks.train_throughput --model bert --compare keras-hub
    python -m benchmarks.train_throughput --model gpt2 --xla both --precision both --record

One training step (forward, backward, Adam update, the objective's metrics)
of each implementation is timed on a fixed synthetic batch (random token
ids, fixed masks), so the input pipeline is not measured. Every
configuration (implementation x XLA x precision) runs in its own worker
subprocess (a precision policy is global), compiled once; the parent then
alternates the workers, `--steps` single steps each per turn, `--repeats`
turns (the order reversed every other turn), each step timed on its own with
its minor page faults (`getrusage`). Reported: the median ms/step, its
p10-p90 spread and the median page faults per step. TensorFlow runs with the
caching allocator (benchmarks/__init__.py). Peak memory is the
worker's RSS high-water mark (`resource.getrusage`), TensorFlow runtime
included (about 0.5-0.7 GB of it is the imported libraries).

Model FLOPs per step (training = 3x forward: forward + 2x backward; the
convention of Kaplan et al. 2020 and PaLM, Chowdhery et al. 2022, App. B):

    FLOPs/token = 6 N + 12 L T H  (+ the head)
      N: non-embedding parameters of the encoder (embedding tables, their
         layer norm and the unused pooler excluded);
      12 L T H: attention scores Q K^T and the weighted sum P V, each 2 T H
         FLOPs per token per layer forward, x3 for forward + backward
         (L layers, T sequence length, H hidden size); causal models are
         counted in full, as PaLM does.
    MLM (BERT, ELECTRA generator): + 6 (H^2 + H V) per *selected* position
         (the head's transform and the vocabulary projection run on the
         gathered positions only), i.e. x P / T per token.
    Causal LM (GPT-2): + 6 H V per token (every position predicts).
    XLNet PLM: content stream 6 N + 24 L T H (relative attention adds the
         scores against 2T relative positions, 4 T H per token per layer
         forward); the query stream runs on the P targets only and is counted
         as P / T of a content pass; + 6 H V per target.
    ELMo biLM: 6 N over the LSTMs, highway and projection, + 6 x the char-CNN
         multiply-adds per token, + the sampled softmax, 2 directions x 6 d (S + 1)
         (S = 2048 shared negatives, d = projection size; char CNN filters
         ELMO_SMALL_FILTERS, LSTM units 4 d).
    ELECTRA: generator (hidden H/4, keras_ctx.models.electra_generator) MLM
         as above (its head maps H/4 -> H, then the shared H x V table) +
         discriminator 6 N + 12 L T H + 6 H^2 (its RTD head) per token.

MFU = achieved model FLOP/s / peak, where peak is a 2048 x 2048 matmul
measured on this machine in the same run, alternated with the models
(benchmarks/peak.py; median): float32 for float32 configurations, bfloat16
for mixed_bfloat16 (AMX / tensor cores: a much higher peak).

Options: --model bert|gpt2|xlnet|elmo|electra, --compare keras-hub|none,
--layers --hidden --heads --batch --length, --xla on|off|both,
--precision float32|mixed_bfloat16|both, --repeats, --steps, --record.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import common

DEFAULTS = {"layers": 4, "hidden": 256, "heads": 4, "batch": 16, "length": 128}
VOCABULARY = {"bert": 30522, "gpt2": 50257, "xlnet": 32000, "elmo": 30000, "electra": 30522}
MASK_RATE = 0.15


def num_predictions(length):
    """Selected (masked / target) positions per sequence: 15% of T."""
    return max(1, int(round(MASK_RATE * length)))


def encoder_layer_params(h, f):
    """Non-embedding parameters of one post/pre-LN Transformer layer."""
    return 4 * (h * h + h) + (h * f + f) + (f * h + h) + 4 * h


# === Model FLOPs per step ===

def model_flops(spec, implementation):
    model, L, H, T, B = spec["model"], spec["layers"], spec["hidden"], spec["length"], spec["batch"]
    V, F, P = VOCABULARY[model], 4 * spec["hidden"], num_predictions(spec["length"])
    N = L * encoder_layer_params(H, F)
    tokens = B * T
    if model == "bert":
        return tokens * (6 * N + 12 * L * T * H) + B * P * 6 * (H * H + H * V)
    if model == "gpt2":
        return tokens * (6 * N + 12 * L * T * H + 6 * H * V)
    if model == "xlnet":
        # Relative attention: content-stream scores against 2T positions.
        N_xl = N + L * (H * H + 3 * H)  # position projection + r_w/r_r/r_s biases
        content = tokens * (6 * N_xl + 24 * L * T * H)
        if implementation == "keras-hub":  # content stream + a head on the P targets
            return content + B * P * 6 * H * V
        return content * (1 + P / T) + B * P * 6 * H * V
    if model == "elmo":
        d, units = H, 4 * H
        filters = ELMO_SMALL_FILTERS
        conv_macs = sum(w * 16 * n * (50 - w + 1) for w, n in filters)
        features = sum(n for _, n in filters)
        n_lstm = 2 * L * (4 * units * (d + d) + 4 * units + units * d)
        n_highway = 2 * (features * 2 * features + 2 * features)
        n_proj = features * d + d
        return tokens * (6 * (n_lstm + n_highway + n_proj) + 6 * conv_macs
                         + 2 * 6 * d * (ELMO_SAMPLED + 1))
    if model == "electra":
        gh = int(round(H * 0.25))  # electra_generator: H_g = H / 4, embeddings of width H
        g_n = L * encoder_layer_params(gh, 4 * gh) + H * gh + gh  # + embedding projection
        generator = tokens * (6 * g_n + 12 * L * T * gh) + B * P * 6 * (gh * H + H * V)
        discriminator = tokens * (6 * N + 12 * L * T * H + 6 * (H * H + H))  # + RTD head
        return generator + discriminator
    raise ValueError(model)


def executed_flops(spec, implementation):
    """FLOPs per step the implementation executes (see HFU in the docstring)."""
    flops = model_flops(spec, implementation)
    if implementation != "keras_ctx" or spec["model"] not in ("bert", "electra"):
        return flops
    H, T, B = spec["hidden"], spec["length"], spec["batch"]
    if spec["model"] == "electra":
        H = int(round(H * 0.25))  # only the generator is an MLM
    F, P = 4 * H, num_predictions(T)
    per_row = 6 * (2 * (H * H + H) + 2 * H * F + F + H) + 12 * T * H
    return flops - B * (T - P) * per_row


ELMO_SMALL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]]
ELMO_SAMPLED = 2048
PEAK_SIZES = (2048,)


# === Synthetic batches and models (worker side) ===

def _ids(rng, shape, vocabulary):
    return rng.integers(5, vocabulary, size=shape).astype("int32")


def mlm_batch(spec, rng):
    B, T, V = spec["batch"], spec["length"], VOCABULARY[spec["model"]]
    P = num_predictions(T)
    positions = np.sort(np.stack([rng.choice(np.arange(1, T), P, replace=False)
                                  for _ in range(B)]), axis=1).astype("int32")
    token_ids = _ids(rng, (B, T), V)
    mask_ids = np.take_along_axis(token_ids, positions, axis=1)
    token_ids[np.arange(B)[:, None], positions] = 4  # [MASK]
    return {
        "token_ids": token_ids,
        "segment_ids": (np.arange(T)[None] >= T // 2).astype("int32").repeat(B, 0),
        "padding_mask": np.ones((B, T), "int32"),
        "mask_positions": positions,
        "mask_ids": mask_ids,
        "mask_weights": np.ones((B, P), "float32"),
    }


def build(spec):
    """(keras.Model compiled, train data tuple (x, y, sample_weight))."""
    import keras

    L, H, A, T = spec["layers"], spec["hidden"], spec["heads"], spec["length"]
    model_name, impl = spec["model"], spec["implementation"]
    V = VOCABULARY[model_name]
    rng = np.random.default_rng(0)
    optimizer = keras.optimizers.Adam(1e-4)
    jit = spec["xla"]
    max_length = max(512, T)

    if model_name == "bert":
        batch = mlm_batch(spec, rng)
        if impl == "keras_ctx":
            from keras_ctx.models import BertBackbone
            from keras_ctx.pretraining.masked_lm import MaskedLMPretrainer
            backbone = BertBackbone(V, L, A, H, 4 * H, max_sequence_length=max_length)
            model = MaskedLMPretrainer(backbone, sentence_objective=None)
            model.compile(optimizer=optimizer, jit_compile=jit)
            return model, (batch, None, None)
        import keras_hub
        backbone = keras_hub.models.BertBackbone(V, L, A, H, 4 * H,
                                                 max_sequence_length=max_length)
        model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
        model.compile(optimizer=optimizer, jit_compile=jit)  # default loss + weighted acc
        x = {k: batch[k] for k in ("token_ids", "segment_ids", "padding_mask",
                                   "mask_positions")}
        return model, (x, batch["mask_ids"], batch["mask_weights"])

    if model_name == "gpt2":
        B = spec["batch"]
        x = {"token_ids": _ids(rng, (B, T), V), "padding_mask": np.ones((B, T), "int32")}
        if impl == "keras_ctx":
            from keras_ctx.models import GPTBackbone
            from keras_ctx.pretraining.causal_lm import CausalLMPretrainer
            backbone = GPTBackbone(V, L, A, H, 4 * H, max_sequence_length=max(1024, T))
            model = CausalLMPretrainer(backbone)
            model.compile(optimizer=optimizer, jit_compile=jit)
            return model, (x, None, None)
        import keras_hub
        backbone = keras_hub.models.GPT2Backbone(V, L, A, H, 4 * H,
                                                 max_sequence_length=max(1024, T))
        model = keras_hub.models.GPT2CausalLM(backbone, preprocessor=None)
        model.compile(optimizer=optimizer, jit_compile=jit)
        y = np.concatenate([x["token_ids"][:, 1:], np.zeros((B, 1), "int32")], axis=1)
        weights = np.concatenate([np.ones((B, T - 1), "float32"),
                                  np.zeros((B, 1), "float32")], axis=1)
        return model, (x, y, weights)

    if model_name == "xlnet":
        B, P = spec["batch"], num_predictions(T)
        token_ids = _ids(rng, (B, T), V)
        if impl == "keras_ctx":
            from keras_ctx.data.permutation import sample_permutation
            from keras_ctx.models import XLNetBackbone
            from keras_ctx.pretraining.xlnet import XLNetPretrainer
            features = sample_permutation(token_ids, num_predict=P, k=max(2, T // P),
                                          seed=0)
            x = {"token_ids": token_ids, "padding_mask": np.ones((B, T), "int32"),
                 "segment_ids": np.zeros((B, T), "int32")}
            x.update({k: np.asarray(v) for k, v in features.items()
                      if k != "factorization_order"})
            backbone = XLNetBackbone(V, L, A, H, 4 * H, mem_len=0)
            model = XLNetPretrainer(backbone)
            model.compile(optimizer=optimizer, jit_compile=jit)
            return model, (x, None, None)
        import keras_hub
        batch = mlm_batch(spec, rng)
        backbone = keras_hub.models.XLNetBackbone(V, L, A, H, 4 * H, dropout=0.1)
        inputs = {k: keras.Input((None,), dtype="int32", name=k)
                  for k in ("token_ids", "padding_mask", "segment_ids")}
        positions = keras.Input((P,), dtype="int32", name="mask_positions")
        hidden = backbone(inputs)
        gathered = keras.ops.take_along_axis(hidden, positions[:, :, None], axis=1)
        logits = keras.layers.Dense(V, name="lm_head")(gathered)
        model = keras.Model({**inputs, "mask_positions": positions}, logits)
        model.compile(optimizer=optimizer, jit_compile=jit,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()])
        x = {"token_ids": batch["token_ids"], "padding_mask": batch["padding_mask"],
             "segment_ids": batch["segment_ids"], "mask_positions": batch["mask_positions"]}
        return model, (x, batch["mask_ids"], batch["mask_weights"])

    if model_name == "elmo":
        from keras_ctx.models import ElmoBackbone
        from keras_ctx.pretraining.bilm import BiLMPretrainer
        B = spec["batch"]
        backbone = ElmoBackbone(projection_dim=H, lstm_units=4 * H, num_layers=L,
                                filters=ELMO_SMALL_FILTERS, dropout=0.1)
        model = BiLMPretrainer(backbone, V, num_sampled=ELMO_SAMPLED)
        model.compile(optimizer=optimizer, jit_compile=jit)
        chars = rng.integers(1, 260, size=(B, T, 50)).astype("int32")
        chars[:, :, 10:] = 0
        x = {"character_ids": chars, "token_ids": _ids(rng, (B, T), V)}
        return model, (x, None, None)

    if model_name == "electra":
        from keras_ctx.models.electra.backbone import ElectraBackbone, electra_generator
        from keras_ctx.pretraining.electra import ElectraPretrainer
        batch = mlm_batch(spec, rng)
        discriminator = ElectraBackbone(V, L, A, H, 4 * H, max_sequence_length=max_length)
        generator = electra_generator(discriminator)  # H/4, Clark et al. 2020
        model = ElectraPretrainer(generator, discriminator)
        model.compile(optimizer=optimizer, jit_compile=jit)
        return model, (batch, None, None)
    raise ValueError(f"Unknown model {model_name!r}.")


def worker(spec):
    """Builds one configuration, then times `steps` steps per "run" line on stdin."""
    import keras
    import tensorflow as tf

    if spec["precision"] != "float32":
        keras.mixed_precision.set_global_policy(spec["precision"])
    keras.utils.set_random_seed(0)
    model, (x, y, weights) = build(spec)
    start = time.perf_counter()
    data = (x,) if y is None else ((x, y) if weights is None else (x, y, weights))
    iterator = iter(tf.data.Dataset.from_tensors(data).repeat())
    model.make_train_function()
    train = model.train_function  # what `fit` calls once per step
    np.asarray(tf.nest.flatten(train(iterator))[0])  # build + trace + compile
    compile_seconds = time.perf_counter() - start
    for _ in range(2):
        np.asarray(tf.nest.flatten(train(iterator))[0])

    def report(payload):
        sys.stdout.write("RESULT " + json.dumps(payload) + "\n")
        sys.stdout.flush()

    report({"compile_seconds": compile_seconds})
    for line in sys.stdin:
        command = line.strip()
        if command == "run":
            losses = []

            def step():  # one step, waiting for it
                losses.append(float(np.asarray(tf.nest.flatten(train(iterator))[0])))

            samples = [common.timed_step(step) for _ in range(spec["steps"])]
            report({"samples": samples, "loss": losses[-1]})
        elif command == "quit":
            break
    report({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def peak_worker(dtypes):
    """Matmul peak per dtype, measured again on every "run" (alternated with the models)."""
    from benchmarks import peak

    def report(payload):
        sys.stdout.write("RESULT " + json.dumps(payload) + "\n")
        sys.stdout.flush()

    report({d: peak.measure(d, sizes=PEAK_SIZES, repeats=1) for d in dtypes})  # warm up
    for line in sys.stdin:
        if line.strip() != "run":
            break
        report({d: peak.measure(d, sizes=PEAK_SIZES, repeats=3) for d in dtypes})
    report({"peak_rss_mb": 0})


# === Parent: spawn, alternate, summarise ===

class Worker:
    def __init__(self, arguments):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.log = tempfile.TemporaryFile(mode="w+")  # a pipe could fill and block
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.train_throughput"] + arguments,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            text=True, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )

    def read(self):
        for line in self.process.stdout:
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        self.process.wait()
        self.log.seek(0)
        error = self.log.read()
        raise RuntimeError(f"Worker failed:\n{error[-4000:]}")

    def send(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self):
        result = self.send("quit")
        self.process.wait()
        return result


def implementations(model, compare):
    impls = ["keras_ctx"]
    if compare == "keras-hub" and model in ("bert", "gpt2", "xlnet"):
        impls.append("keras-hub")
    return impls


def run(args):
    xla = {"on": [True], "off": [False], "both": [True, False]}[args.xla]
    precisions = (["float32", "mixed_bfloat16"] if args.precision == "both"
                  else [args.precision])
    impls = implementations(args.model, args.compare)
    base = {"model": args.model, "layers": args.layers, "hidden": args.hidden,
            "heads": args.heads, "batch": args.batch, "length": args.length,
            "steps": args.steps}
    configs = [dict(base, implementation=i, xla=j, precision=p)
               for p in precisions for j in xla for i in impls]
    load_start = common.load_average()

    dtypes = ["float32"] + (["bfloat16"] if "mixed_bfloat16" in precisions else [])
    peak_worker_ = Worker(["--peak-worker", ",".join(dtypes)])
    peak_worker_.read()

    workers, compile_seconds, failures = [], [], {}
    for config in configs:
        w = Worker(["--worker", json.dumps(config)])
        try:
            compile_seconds.append(w.read()["compile_seconds"])
            workers.append((config, w))
        except RuntimeError as error:
            failures[len(failures)] = (config, str(error).splitlines()[-1])
    times = {id(w): [] for _, w in workers}
    peak_runs = []
    for turn in range(args.repeats):
        peak_runs.append(peak_worker_.send("run"))
        # Alternate (A B, B A, ...), so that drift and other jobs hit all alike.
        for _, w in (workers if turn % 2 == 0 else workers[::-1]):
            times[id(w)].extend(w.send("run")["samples"])
    memory = {id(w): w.close()["peak_rss_mb"] for _, w in workers}
    peak_worker_.close()
    peaks = {d: float(np.median([r[d] for r in peak_runs])) for d in dtypes}

    rows = []
    tokens = args.batch * args.length
    for config, w in workers:
        seconds, spread, faults = common.summary(times[id(w)])
        flops = model_flops(config, config["implementation"])
        executed = executed_flops(config, config["implementation"])
        peak = peaks["bfloat16" if config["precision"] == "mixed_bfloat16" else "float32"]
        rows.append((config["implementation"], "on" if config["xla"] else "off",
                     config["precision"], f"{seconds * 1e3:.1f}", spread, f"{faults:,.0f}",
                     f"{tokens / seconds:,.0f}",
                     f"{flops / seconds / 1e9:,.1f}", f"{100 * flops / seconds / peak:.3g}%",
                     f"{100 * executed / seconds / peak:.3g}%", f"{memory[id(w)]:,.0f}"))
    for config, message in failures.values():
        rows.append((config["implementation"], "on" if config["xla"] else "off",
                     config["precision"], "failed", message[:80], "", "", "", "", "", ""))
    header = ["implementation", "XLA", "precision", "ms/step (median)", "p10-p90 ms",
              "page faults/step", "tokens/s (median)",
              "model GFLOP/s", "MFU", "HFU", "peak RSS MB"]
    title = (f"{args.model} training, L{args.layers} H{args.hidden} A{args.heads}, "
             f"batch {args.batch}, length {args.length}")
    notes = (f"Peak (measured matmul): float32 {peaks['float32'] / 1e9:,.0f} GFLOP/s"
             + (f", bfloat16 {peaks['bfloat16'] / 1e9:,.0f} GFLOP/s" if "bfloat16" in peaks
                else "")
             + f"; model FLOPs/step {model_flops(configs[0], 'keras_ctx') / 1e9:,.2f} G, "
             f"executed by keras_ctx {executed_flops(configs[0], 'keras_ctx') / 1e9:,.2f} G; "
             f"median of {args.repeats} turns x {args.steps} single steps, each timed; "
             f"{common.allocator()}; "
             f"load average (1, 5, 15 min) at start {load_start}, at end {common.load_average()}.")
    text = common.table(header, rows) + "\n\n" + notes
    common.report("train_throughput", title, text, args.record)
    return rows


def parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="bert", choices=sorted(VOCABULARY))
    p.add_argument("--compare", default="keras-hub", choices=["keras-hub", "none"])
    for name, value in DEFAULTS.items():
        p.add_argument(f"--{name}", type=int, default=value)
    p.add_argument("--xla", default="both", choices=["on", "off", "both"])
    p.add_argument("--precision", default="float32",
                   choices=["float32", "mixed_bfloat16", "both"])
    p.add_argument("--repeats", type=int, default=30, help="turns over the configurations")
    p.add_argument("--steps", type=int, default=1, help="single steps per configuration a turn")
    p.add_argument("--record", action="store_true")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--peak-worker", help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    if args.peak_worker:
        return peak_worker(args.peak_worker.split(","))
    if args.model == "elmo" and args.layers == DEFAULTS["layers"]:
        args.layers = 2  # every published ELMo has 2 biLSTM layers
    return run(args)


if __name__ == "__main__":
    main()

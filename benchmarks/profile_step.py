"""Where one XLA training step spends its time: keras_ctx vs keras-hub, op by op.

    python -m benchmarks.profile_step [--model bert --steps 10 --threads 1 --record]

The set-up of `benchmarks.backbone` (a user's functional model: backbone ->
Dense head -> Keras' loss, Adam, Keras' own train_step, XLA). Each library
runs in its own process, under TensorFlow's profiler, with XLA's optimized
HLO dumped; the XLA:CPU thunks the profiler records carry their HLO
instruction names, and the dump gives each instruction its opcode and the
TensorFlow op it came from (`metadata op_name`, which holds the Keras layer
path). Thunk times are summed per step and grouped by what they compute
(`category`), so the two libraries' steps can be compared part by part.

With `--threads 1` (the default) thunks run one after another, so their sum
is the step's compute time; "step - thunks" is the unprofiled median step
minus that sum (launching the executable, copying the batch; negative where
the profiler's own cost per thunk outweighs it, as for many small thunks).
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from benchmarks import common

# First match wins: (category, test on (opcode, op_type, op_name, instruction name)).
CATEGORIES = (
    ("optimizer (Adam)", lambda op, t, n, i: "adam" in n.lower() or "/optimizer" in n.lower()
     or "assignvariableop" in t.lower()),
    ("dropout generator", lambda op, t, n, i: "rng" in op or "random" in n.lower()
     or "philox" in n.lower() or "statelessrandom" in t.lower() or "dropout" in n.lower()),
    ("embedding lookup / gradient", lambda op, t, n, i: "embedding" in n.lower()
     or op in ("gather", "scatter")),
    ("matrix products", lambda op, t, n, i: op in ("dot", "convolution")
     or (op == "custom-call" and ("matmul" in i.lower() or "dot" in i.lower()))
     or t in ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum")),
    ("softmax", lambda op, t, n, i: "softmax" in n.lower()),
    ("layer norm", lambda op, t, n, i: "norm" in n.lower()),
    ("gelu / activations", lambda op, t, n, i: "gelu" in n.lower() or "erf" in i.lower()
     or "tanh" in i.lower()),
    ("loss", lambda op, t, n, i: "loss" in n.lower() or "crossentropy" in n.lower()),
    ("copies / transposes", lambda op, t, n, i: op in ("copy", "transpose", "bitcast")
     or "copy" in i or "transpose" in i),
    ("reductions", lambda op, t, n, i: "reduce" in op or "reduce" in i),
)
NOT_THUNKS = ("ThunkExecutor", "Executor", "CpuExecutable", "BlockUntilReady", "Eager",
              "KernelAndDevice", "FunctionRun", "TFE_", "Iterator", "Prefetch", "optional:",
              "ThreadpoolListener", "multi_step", "one_step", "MakeIterator")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = [^=]*? ([a-z][\w\-]*)\(")
_OP_TYPE = re.compile(r'op_type="([^"]*)"')
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def hlo_instructions(dump_dir):
    """{instruction name: (opcode, op_type, op_name)} from XLA's optimized HLO dump of the
    step (the largest module: names repeat across the small ones XLA also compiles)."""
    table = {}
    dumps = glob.glob(os.path.join(dump_dir, "*after_optimizations.txt"))
    for path in sorted(dumps, key=os.path.getsize)[-1:]:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                match = _INSTRUCTION.match(line)
                if not match:
                    continue
                op_type, op_name = _OP_TYPE.search(line), _OP_NAME.search(line)
                table.setdefault(match.group(1), (match.group(2),
                                                  op_type.group(1) if op_type else "",
                                                  op_name.group(1) if op_name else ""))
    return table


def category(instruction, table):
    opcode, op_type, op_name = table.get(instruction, ("", "", ""))
    if not opcode:  # named by XLA's thunk emitter: the opcode is in the name
        opcode = re.sub(r"[._]\d+$", "", instruction)
    for name, test in CATEGORIES:
        if test(opcode, op_type, op_name, instruction):
            return name
    return "other elementwise fusions"


def thunk_times(xplane_path):
    """{event name: total picoseconds} of the XLA thunks on the host plane."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as handle:
        space.ParseFromString(handle.read())
    totals = collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if not name.startswith(NOT_THUNKS):
                    totals[name] += event.duration_ps
    return totals


def child(args):
    """Runs in its own process: build one library's step, profile `args.steps` of them."""
    import tensorflow as tf

    from benchmarks import backbone

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    step = backbone.one_step(*backbone.build(args.model, args.child, True, args))
    for _ in range(3):
        step()
    samples = [common.timed_step(step)[0] for _ in range(args.steps)]
    tf.profiler.experimental.start(os.path.join(args.out, "profile"))
    for _ in range(args.steps):
        step()
    tf.profiler.experimental.stop()
    with open(os.path.join(args.out, "steps.json"), "w", encoding="utf-8") as handle:
        json.dump(samples, handle)


def profile(library, args, directory):
    out = os.path.join(directory, library)
    os.makedirs(out)
    env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_dump_to="
                                      + os.path.join(out, "hlo") + " --xla_dump_hlo_as_text"))
    command = [sys.executable, "-m", "benchmarks.profile_step", "--child", library, "--out", out,
               "--model", args.model, "--steps", str(args.steps),
               "--threads", str(args.threads)]
    for name, value in vars(args).items():
        if name in ("layers", "hidden", "heads", "batch", "length", "labels"):
            command += [f"--{name}", str(value)]
    subprocess.run(command, check=True, env=env)
    table = hlo_instructions(os.path.join(out, "hlo"))
    (xplane,) = glob.glob(os.path.join(out, "profile", "plugins", "profile", "*",
                                       "*.xplane.pb"))
    per_category = collections.Counter()
    per_instruction = collections.Counter()
    for name, picoseconds in thunk_times(xplane).items():
        ms = picoseconds / 1e9 / args.steps
        per_category[category(name, table)] += ms
        per_instruction[(name, category(name, table))] += ms
    with open(os.path.join(out, "steps.json"), encoding="utf-8") as handle:
        steps = sorted(json.load(handle))
    return per_category, per_instruction, steps[len(steps) // 2] * 1e3


def run(args):
    from benchmarks import backbone

    load_start = common.load_average()
    with tempfile.TemporaryDirectory() as directory:
        results = {library: profile(library, args, directory)
                   for library in ("keras_ctx", "keras-hub")}
    ours, hub = results["keras_ctx"], results["keras-hub"]
    rows = []
    names = sorted(set(ours[0]) | set(hub[0]), key=lambda c: -max(ours[0][c], hub[0][c]))
    for name in names:
        rows.append((name, f"{ours[0][name]:.1f}", f"{hub[0][name]:.1f}",
                     f"{hub[0][name] - ours[0][name]:+.1f}"))
    thunks = {lib: sum(r[0].values()) for lib, r in results.items()}
    rows.append(("all thunks", f"{thunks['keras_ctx']:.1f}", f"{thunks['keras-hub']:.1f}",
                 f"{thunks['keras-hub'] - thunks['keras_ctx']:+.1f}"))
    # Negative where the profiler's own cost per thunk (many small ones) exceeds
    # what runs between thunks.
    rows.append(("step - thunks", f"{ours[2] - thunks['keras_ctx']:.1f}",
                 f"{hub[2] - thunks['keras-hub']:.1f}", ""))
    rows.append(("step (median, unprofiled)", f"{ours[2]:.1f}", f"{hub[2]:.1f}",
                 f"{hub[2] / ours[2]:.2f}x"))
    top = [(f"`{name}`", lib, cat, f"{ms:.2f}")
           for lib, result in results.items()
           for (name, cat), ms in result[1].most_common(args.top)]
    title = (f"{args.model} training step by category, L{args.layers} H{args.hidden} "
             f"A{args.heads}, batch {args.batch}, length {args.length}, float32, XLA, "
             f"{args.threads} thread(s)")
    notes = (f"ms per step, summed over {args.steps} profiled steps of each library (each in its "
             f"own process), grouped by the HLO instruction's opcode and the TensorFlow op (Keras "
             f"layer path) it came from. {common.allocator()}. Load average at start "
             f"{load_start}, at end {common.load_average()}. Vocabulary "
             f"{backbone.VOCABULARY[args.model]}.")
    text = (common.table(["category", "keras_ctx ms", "keras-hub ms", "keras-hub - keras_ctx"],
                         rows) + "\n\n" + notes + "\n\nLargest thunks:\n\n"
            + common.table(["thunk", "library", "category", "ms/step"], top))
    common.report("profile_step", title, text, args.record)


def parser():
    from benchmarks import backbone

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="bert", choices=sorted(backbone.VOCABULARY))
    for name, value in backbone.DEFAULTS.items():
        p.add_argument(f"--{name}", type=int, default=value)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=12, help="largest thunks listed per library")
    p.add_argument("--record", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    if args.child:
        return child(args)
    return run(args)


if __name__ == "__main__":
    main()

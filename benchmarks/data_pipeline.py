"""The data pipeline at corpus scale: reading, the tokenizer, `keras-ctx prepare`, the read side.

For each corpus size (the built-in corpus written out again and again into
`--dir`, never into the repository) it measures:

- read MB/s: `corpora.iter_documents` over the file (one core);
- the tokenizer: the seeded sample (`--sample` sentences) plus training,
  timed inside `prepare` (until its "Preparing ..." line);
- preparation MB/s per core: corpus bytes over the shard phase's time,
  divided by the worker processes;
- peak memory of the whole `prepare` process tree (its workers are
  processes), summed over the tree and sampled every 0.2 s from /proc: PSS
  (shared pages split between the processes that map them, so the sum is
  what the tree holds) and, in brackets, RSS (shared pages counted in
  every process: TensorFlow's libraries once per worker);
- read-side examples/s: `PreparedInput.at_step(0)` with the family's read
  side (masks drawn when read), after a warm-up;
- once: the examples/s the `--model` training step consumes on this
  machine, and the cores the read side needs to feed one GPU at `--gpu-rate`
  sequences/s (BERT-base, sequence 128: about 3,000, keras_ctx's estimate
  for an A100 in mixed precision).

    python -m benchmarks.data_pipeline [--sizes-mb 100 1000] [--workers 2] [--record]
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

from benchmarks import common

_CHILD = """
import json, sys, time
from keras_ctx.data.prepare import prepare
if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    say = lambda message: print(f"{time.time():.3f} {message}", flush=True)
    say("start")
    prepare(args.pop("model"), args.pop("corpus"), args.pop("out"), say=say, **args)
"""


def make_corpus(path, megabytes):
    """The built-in corpus written out until the file holds `megabytes` MB (kept if it does)."""
    from keras_ctx.data import corpora

    target = int(megabytes * (1 << 20))
    if os.path.isfile(path) and os.path.getsize(path) >= target:
        return path
    text = "".join("\n".join(d) + "\n\n" for d in corpora.builtin_documents()).encode("utf-8")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".partial", "wb") as handle:
        written = 0
        while written < target:
            handle.write(text)
            written += len(text)
    os.replace(path + ".partial", path)
    return path


def read_rate(path):
    """(MB/s, sentences) of `corpora.iter_documents` over `path`."""
    from keras_ctx.data import corpora

    start, sentences = time.perf_counter(), 0
    for document in corpora.iter_documents(path):
        sentences += len(document)
    return os.path.getsize(path) / (1 << 20) / (time.perf_counter() - start), sentences


def _memory(pid):
    """Proportional set size (PSS, bytes) of one process: its private pages plus its
    share of pages it shares (TensorFlow's libraries, mapped by every worker), so
    that a tree's sum is the memory it really holds; RSS where /proc has no PSS."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    with open(f"/proc/{pid}/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def tree_memory(pid):
    """(PSS, RSS) bytes of `pid` and every descendant, summed (Linux /proc)."""
    children, sizes = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as handle:
                rss = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
        children.setdefault(parent, []).append(int(entry))
        sizes[int(entry)] = rss
    pss = rss = 0
    todo = [pid]
    while todo:
        process = todo.pop()
        if process in sizes:
            rss += sizes[process]
            try:
                pss += _memory(process)
            except OSError:
                pass
        todo.extend(children.get(process, ()))
    return pss, rss


def run_prepare(model, corpus, out, sequence_length, vocabulary_size, workers, sample,
                shard_mb, duplicate=None):
    """Runs `prepare` in a child process: phase times (s), peak tree (PSS, RSS), manifest."""
    args = {"model": model, "corpus": corpus, "out": out, "sequence_length": sequence_length,
            "vocabulary_size": vocabulary_size, "workers": workers,
            "tokenizer_sample": sample, "shard_bytes": int(shard_mb * (1 << 20)),
            "duplicate": duplicate}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(args)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, done = [0, 0], threading.Event()

    def watch():
        while not done.is_set():
            peak[:] = map(max, peak, tree_memory(child.pid))
            done.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    times = {}
    for line in child.stdout:
        stamp, _, message = line.partition(" ")
        for key, prefix in (("start", "start"), ("shards", "Preparing"), ("end", "Prepared")):
            if message.startswith(prefix):
                times[key] = float(stamp)
    error = child.stderr.read()
    done.set()
    watcher.join()
    if child.wait() != 0:
        raise RuntimeError(f"prepare failed:\n{error[-3000:]}")
    from keras_ctx.data import prepare

    return ({"tokenizer": times["shards"] - times["start"],
             "shards": times["end"] - times["shards"]}, peak,
            prepare.load_manifest(out, verify=False))


def _run(model, sequence_length, batch_size):
    from keras_ctx import families

    return families.Run(model, batch_size, sequence_length, 8000, 0)


def read_side_rate(model, data_dir, sequence_length, batch_size, batches):
    """Examples/s of the prepared read side (parse, interleave, shuffle, masks), warmed up."""
    from keras_ctx import families, runs
    from keras_ctx.data import prepare
    from keras_ctx.data.prepared_input import PreparedInput

    run = _run(model, sequence_length, batch_size)
    tokenizer = runs.load_tokenizer(os.path.join(data_dir, runs.TOKENIZER_DIR))
    layout = families.of_preset(model).prepared(tokenizer, run)
    data = PreparedInput(data_dir, prepare.load_manifest(data_dir, verify=False), layout,
                         batch_size, worker=0, workers=1)
    iterator = iter(data.at_step(0))
    for _ in range(max(2, batches // 5)):  # warm-up: fills the shuffle blocks and prefetch
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


def training_rate(model, data_dir, sequence_length, batch_size, steps):
    """Examples/s the `model` pretraining step consumes (batches held in memory)."""
    import keras

    from keras_ctx.commands import pretrain

    run = _run(model, sequence_length, batch_size)
    _, pretrainer, data, _, _ = pretrain.build_prepared(model, data_dir, run)
    pretrainer.compile(optimizer=pretrain.optimizer(1e-4, 1000),
                       jit_compile=pretrain.use_xla("auto"))
    batches = list(data.at_step(0).take(steps + 2))
    for batch in batches[:2]:  # compiles
        pretrainer.train_on_batch(batch)
    start = time.perf_counter()
    for batch in batches[2:]:
        pretrainer.train_on_batch(batch)
    keras.backend.clear_session()
    return steps * batch_size / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes-mb", nargs="+", type=float, default=[100, 1000])
    parser.add_argument("--model", default="bert-mini")
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--vocabulary-size", type=int, default=30_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--sample", type=int, default=None,
                        help="tokenizer sample sentences (default corpora's 1,000,000)")
    parser.add_argument("--shard-mb", type=float, default=32)
    parser.add_argument("--duplicate", type=int, default=None,
                        help="static-mask copies (BERT's dupe_factor; default the family's)")
    parser.add_argument("--read-batches", type=int, default=200)
    parser.add_argument("--train-steps", type=int, default=10)
    parser.add_argument("--gpu-rate", type=float, default=3000.0)
    parser.add_argument("--dir", default="/tmp/keras-ctx-data-benchmark")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    from keras_ctx.data import corpora

    sample = args.sample or corpora.TOKENIZER_SAMPLE_SENTENCES
    rows, loads, train, read_rates = [], [], None, []
    for size in args.sizes_mb:
        corpus = make_corpus(os.path.join(args.dir, f"corpus-{size:g}MB.txt"), size)
        out = os.path.join(args.dir, f"{args.model}-{size:g}MB-{args.sequence_length}")
        if os.path.isdir(out):
            import shutil

            shutil.rmtree(out)
        megabytes = os.path.getsize(corpus) / (1 << 20)
        read_mb, sentences = read_rate(corpus)
        times, peak, manifest = run_prepare(args.model, corpus, out, args.sequence_length,
                                            args.vocabulary_size, args.workers, sample,
                                            args.shard_mb, args.duplicate)
        workers = min(args.workers, len(manifest["shards"]))
        copies = manifest["copies"]
        rate = read_side_rate(args.model, out, args.sequence_length, args.batch,
                              args.read_batches)
        read_rates.append(rate)
        if train is None:
            train = training_rate(args.model, out, args.sequence_length, args.batch,
                                  args.train_steps)
        loads.append(common.load_average())
        rows.append((f"{megabytes:,.0f}", f"{sentences:,}", f"{read_mb:,.1f}",
                     f"{min(sample, sentences):,}", f"{times['tokenizer']:,.0f}",
                     f"{times['shards'] / 60:,.1f}",
                     f"{megabytes / times['shards'] / workers:,.2f}",
                     f"{peak[0] / (1 << 20):,.0f} ({peak[1] / (1 << 20):,.0f})",
                     f"{manifest['examples']:,}", f"{rate:,.0f}",
                     f"{rate / train:,.1f}x"))
        print("row:", " | ".join(rows[-1]), f"| load {loads[-1]}", flush=True)
    header = ("corpus MB", "sentences", "read MB/s (1 core)", "tokenizer sample",
              "sample + tokenizer s", "prepare min", "prepare MB/s per core",
              "peak PSS (RSS) MB, process tree", "examples", "read-side examples/s",
              "vs training step")
    cores = os.cpu_count()
    per_core = max(read_rates) / cores
    notes = (f"\n\n{args.model}, sequence {args.sequence_length}, batch {args.batch}, "
             f"vocabulary {args.vocabulary_size:,}; prepare with {args.workers} worker "
             f"processes, shards of {args.shard_mb:g} MB / copies, {copies} "
             f"static-mask cop{'y' if copies == 1 else 'ies'} of each instance. The "
             f"{args.model} training step consumes {train:,.0f} examples/s here. The read "
             f"side runs on all {cores} cores: {per_core:,.0f} examples/s per core, so "
             f"feeding one GPU at "
             f"{args.gpu_rate:,.0f} sequences/s (BERT-base, sequence 128) takes about "
             f"{args.gpu_rate / per_core:,.1f} cores. Load average (1, 5, 15 min) after "
             f"each size: {'; '.join(loads)}.")
    title = (f"data pipeline, {args.model} at sequence {args.sequence_length}, corpora of "
             f"{', '.join(f'{s:g}' for s in args.sizes_mb)} MB from the built-in one")
    common.report("data_pipeline", title, common.table(header, rows) + notes, args.record)
    return rows, train


if __name__ == "__main__":
    main()

"""Helpers the benchmark scripts share: per-step timing, tables and RESULTS.md records."""

import datetime
import os
import platform
import resource
import time

import numpy as np

RESULTS = os.path.join(os.path.dirname(__file__), "RESULTS.md")


def table(header, rows):
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine():
    """The machine and versions a result was measured with."""
    import keras
    import tensorflow as tf

    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name") and not flags:
                    cpu = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    vector = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
    return (f"{cpu} ({' '.join(vector) or 'no AVX2'}), {os.cpu_count()} cores, "
            f"GPUs: {', '.join(gpus) or 'none'}; oneDNN "
            f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'TensorFlow default')}; {allocator()}; "
            f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
            f"Python {platform.python_version()}")


def allocator():
    """Which host allocator TensorFlow was started with (benchmarks/__init__.py)."""
    if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("true", "1"):
        return "BFC caching allocator (TF_CPU_ALLOCATOR_USE_BFC=true)"
    return "glibc malloc (TF_CPU_ALLOCATOR_USE_BFC unset/false)"


def page_faults():
    """Minor page faults of this process so far (`resource.getrusage` minflt)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed_step(step):
    """(seconds, minor page faults) of one call of `step`, which must block until done."""
    faults, start = page_faults(), time.perf_counter()
    step()
    return time.perf_counter() - start, page_faults() - faults


def interleave(steps, count):
    """Times `count` single steps of each callable in `steps` (a dict), in turns A B A B ...

    Drift and other jobs on the machine then hit every configuration alike.
    The order within a turn alternates too (A B, B A, ...), so that none
    always runs right after another's memory traffic.

    Args:
        steps: {name: callable running one step and blocking until it is done}.
        count: steps per configuration.

    Returns:
        {name: list of (seconds, page faults)} per step, in order.
    """
    names = list(steps)
    samples = {name: [] for name in names}
    for turn in range(count):
        for name in (names if turn % 2 == 0 else names[::-1]):
            samples[name].append(timed_step(steps[name]))
    return samples


def summary(samples):
    """(median seconds, "p10-p90 ms" spread, median page faults) of per-step samples."""
    seconds = np.array([s for s, _ in samples])
    faults = np.array([f for _, f in samples])
    low, high = np.percentile(seconds, [10, 90]) * 1e3
    return float(np.median(seconds)), f"{low:.1f}-{high:.1f}", float(np.median(faults))


def paired_ratio(ours, theirs):
    """Median and p10-p90 of theirs/ours per turn (the two steps timed back to back)."""
    ratios = np.array([b[0] / a[0] for a, b in zip(ours, theirs)])
    low, high = np.percentile(ratios, [10, 90])
    return float(np.median(ratios)), f"{low:.2f}-{high:.2f}"


def load_average():
    """The 1, 5 and 15 minute load averages, as the tables' notes print them."""
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def report(name, title, text, record_it):
    """Prints a result (title, then its table and notes); appends it to RESULTS.md if asked."""
    print(title)
    print(text)
    if record_it:
        record(name, title, text)


def record(name, title, markdown_table):
    """Appends a result section to benchmarks/RESULTS.md."""
    date = datetime.date.today().isoformat()
    with open(RESULTS, "a", encoding="utf-8") as handle:
        handle.write(f"\n## {name}: {title}\n\n{date}; {machine()}\n\n{markdown_table}\n")

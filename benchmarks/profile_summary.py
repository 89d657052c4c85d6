"""Where a traced program spends its time: the ops of a JAX profiler trace, summed by name.

    python -m benchmarks.profile_summary TRACE.xplane.pb [--top 25]

For each timeline of the trace that ran XLA ops (a GPU's "XLA Ops" line, or
XLA:CPU's threads, whose events name their HLO op), prints the busiest op names
with their summed time and share of the line, and each line's total. Reads the
traces `benchmarks/accelerator_mlm.py --profile` writes (on a machine without
the device: it needs only jax).
"""

import argparse
import collections
import sys


def _stats(event):
    return dict(event.stats)


def op_times(path):
    """{(plane, line): Counter(op name -> nanoseconds)} of the lines that ran XLA ops."""
    import jax

    data = jax.profiler.ProfileData.from_file(path)
    times = {}
    for plane in data.planes:
        for line in plane.lines:
            counter = collections.Counter()
            ops_line = line.name == "XLA Ops"
            for event in line.events:
                if ops_line or "hlo_op" in _stats(event):
                    counter[event.name] += event.duration_ns
            if counter:
                times[(plane.name, line.name)] = counter
    return times


def summary(path, top=25):
    """The printable tables of `op_times(path)`."""
    out = []
    for (plane, line), counter in op_times(path).items():
        total = sum(counter.values())
        out.append(f"{plane} / {line}: {total / 1e6:.2f} ms in {len(counter)} ops")
        for name, nanoseconds in counter.most_common(top):
            out.append(f"  {nanoseconds / 1e6:9.3f} ms  {nanoseconds / total:6.1%}  {name}")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    for path in args.traces:
        print(f"== {path}\n{summary(path, args.top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Helpers the benchmark scripts share: tables and RESULTS.md records."""

import datetime
import os
import platform

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

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
    return (f"{cpu}, {os.cpu_count()} cores, GPUs: {', '.join(gpus) or 'none'}; "
            f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
            f"Python {platform.python_version()}")


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

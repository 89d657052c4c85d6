"""Progress lines a person can follow during a long phase of a command.

A pass over data that we drive ourselves (reading a corpus, feeding a
trainer) says how many items went by, how fast, and, when the total is known,
about how long is left; a library call that reports nothing of its own
(keras-hub's WordPiece learner, SentencePiece) gets a line before and a line
after with the time it took.

Library code asks `current()` for the active reporter; it is silent unless a
command turned reporting on with `reporting(say)`, so a Python caller's own
output stays its own.

    >>> with progress.reporting(print):
    ...     tokenizer = tokenizers.train_wordpiece(lines, 8000)
"""

import contextlib
import time


def duration(seconds):
    """12 -> "12 s", 75 -> "1 min 15 s", 7300 -> "2 h 1 min"."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def size(num_bytes):
    """512 -> "512 B", 27362 -> "26.7 KB", 247463936 -> "236.0 MB" (powers of 1024)."""
    value, unit = float(num_bytes), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:,.1f} {unit}"


class Progress:
    """Reports passes and opaque steps through `say(line)`; `say=None` is silent.

    Args:
        say: a function that shows one line (None: report nothing).
        every: seconds between two lines of one pass.
        clock: the time source (tests pass a fake one).
    """

    def __init__(self, say=None, every=5.0, clock=time.monotonic):
        from keras_ctx.common import validation

        self.say = say
        self.every = validation.non_negative_number("every", every)  # NaN: never a line
        self.clock = clock
        self._started = None  # when the step under way began (`start`)

    def count(self, items, what, total=None, weight=None, then=None):
        """Yields `items`, saying every `every` s how many `what` went by.

        Args:
            items: an iterable.
            what: the plural noun the counts are of ("sentences").
            total: how many `what` there are, when known: adds time left.
            weight: item -> how many `what` it holds (default 1 each).
            then: (doing, library): `start` this step once `items` is exhausted
                (a library call that read them goes on without a word).

        A last line gives the count and time taken once `items` is exhausted.
        """
        began = self.clock()
        first = None  # when the first item came: a pass may wait long for it
        done = 0
        for item in items:
            yield item
            done += 1 if weight is None else weight(item)
            now = self.clock()
            if first is None:
                first = last = now
            elif self.say is not None and now - last >= self.every:
                last = now
                rate = done / max(now - first, 1e-9)
                line = f"  {done:,}" + (f"/{total:,}" if total else "") + f" {what}"
                line += f", {rate:,.0f}/s"
                if total:
                    line += f", about {duration(max(total - done, 0) / rate)} left"
                self.say(line + "...")
        if self.say is not None:
            self.say(f"  {done:,} {what} in {duration(self.clock() - began)}.")
        if then is not None:
            self.start(*then)

    def start(self, doing, library):
        """Says `doing` is under way in `library`, which shows no progress of its own."""
        self._started = self.clock()
        if self.say is not None:
            self.say(f"{doing} ({library}; it shows no progress of its own)...")

    def finish(self, done):
        """Says `done` with the time since the last `start`."""
        if self.say is not None:
            took = "" if self._started is None else f" in {duration(self.clock() - self._started)}"
            self.say(f"{done}{took}.")
        self._started = None


_silent = Progress()
_current = _silent


def current():
    """The active reporter: silent unless inside `reporting`."""
    return _current


@contextlib.contextmanager
def reporting(say, every=5.0):
    """Inside this block, `current()` reports through `say` every `every` seconds."""
    global _current
    previous, _current = _current, Progress(say, every)
    try:
        yield _current
    finally:
        _current = previous


def say(message):
    """One progress line of a recipe, shown at once (also when piped)."""
    print(message, flush=True)

"""keras_ctx's exception types and the one-line form every error reaches the user in.

Each type subclasses ValueError, so callers that already catch ValueError
keep working. `one_line(error)` turns any exception into the line the CLI
prints: Keras' "Exception encountered when calling ..." wrapper and its ANSI
colour codes removed, the original message kept.
"""

import re


class KerasCtxError(ValueError):
    """Base of keras_ctx's own errors: the message names the problem and the fix."""


class ConfigError(KerasCtxError):
    """An unknown config key or an out-of-range setting."""


class RunDirectoryError(KerasCtxError):
    """A run directory that is missing pieces, corrupt, or not ours to change."""


class RunLocked(RunDirectoryError):
    """Another live process holds the run directory."""


class CheckpointError(KerasCtxError):
    """A checkpoint or weights file that cannot be read, or does not fit its model."""


class DataError(KerasCtxError):
    """Malformed input data (a TSV, token ids out of range, ...)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WRAPPER = "Exception encountered when calling"
_ASSERTION = "assertion failed: ["
# Lines TensorFlow puts before the message of an error raised inside a graph.
_TF_NOISE = ("Graph execution error", "Detected at node", "<stack traces unavailable>")


def one_line(error):
    """The first meaningful line of an exception's message, without Keras' wrapper."""
    text = _ANSI.sub("", str(error.message if hasattr(error, "message")
                             and isinstance(error.message, str) else error))
    lines = [line.strip() for line in text.splitlines()]
    if any(line.startswith(_WRAPPER) for line in lines):
        inner = []
        for line in lines:
            if line.startswith("Arguments received by"):
                break
            if line and not line.startswith(_WRAPPER):
                inner.append(line)
        lines = inner
    text = "\n".join(lines)
    if _ASSERTION in text:  # a tf.debugging assert: its message, without the tensor dumps
        message = text.split(_ASSERTION, 1)[1].split("] [", 1)[0].rstrip("]").strip()
        return message.replace("\\'", "'")
    lines = [line for line in lines if line and not line.startswith(_TF_NOISE)]
    message = lines[0] if lines else type(error).__name__
    if isinstance(error, KeyError) and len(message) > 1 and message[0] == message[-1] == "'":
        message = message[1:-1]
    return message

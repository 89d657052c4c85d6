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


# tf.function re-raises what its Python code raised as "in user code:", the frames, then
# the original "Type: message" indented by four spaces.
_USER_CODE = "in user code:"
_RAISED = re.compile(r"^    (?P<type>[A-Za-z_][\w.]*): (?P<message>.*)", re.MULTILINE | re.DOTALL)
# Keras, when a layer's call fails while it infers the output shape.
_INFERRING = "Error encountered:"
# tf.data, when a function it runs raises: "{{function_node ...}} Error in user-defined
# function passed to MapDataset:1 transformation with iterator: Iterator::...::Map: <reason>".
_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
_TF_DATA = re.compile(r"Error in user-defined function passed to .*? with iterator: \S+: ")


def _message(error):
    """The text of `error`'s message (a KeyError's argument, not its repr)."""
    if hasattr(error, "message") and isinstance(error.message, str):
        return error.message
    text = str(error)
    if (isinstance(error, KeyError) and not text.lstrip().startswith(_USER_CODE)
            and len(error.args) == 1 and isinstance(error.args[0], str)):
        return error.args[0]  # str() of a KeyError is its argument's repr
    return text


def _raised_inside(text):
    """What tf.function's "in user code:" hides: the original message (with its type where
    Python's own exceptions need it), or None when `text` is not such a message."""
    if not text.lstrip().startswith(_USER_CODE):
        return None
    found = list(_RAISED.finditer(text.split("\n\n", 1)[-1]))
    if not found:
        return None
    kind = found[-1]["type"]
    message = "\n".join(line[4:] if line.startswith("    ") else line
                        for line in found[-1]["message"].splitlines())
    if kind.endswith("KeyError") and message[:1] in "'\"":
        import ast

        try:
            message = ast.literal_eval(message.strip())
        except (ValueError, SyntaxError):
            pass
    return message


def one_line(error):
    """The first meaningful line of an exception's message, without Keras' wrapper.

    What tf.function ("in user code:"), Keras' shape inference ("Error
    encountered:") and tf.data ("Error in user-defined function ...") wrap around
    the message is removed: the line is the reason itself.
    """
    text = _ANSI.sub("", _message(error))
    inner = _raised_inside(text)
    if inner is not None:
        text = _ANSI.sub("", inner)
    lines = [line.strip() for line in text.splitlines()]
    if any(line.startswith(_WRAPPER) for line in lines):
        inner = []
        for line in lines:
            if line.startswith("Arguments received by"):
                break
            if line and not line.startswith(_WRAPPER):
                inner.append(line)
        lines = inner
    if _INFERRING in "\n".join(lines):  # the reason follows Keras' explanation
        after = "\n".join(lines).split(_INFERRING, 1)[1]
        lines = [line.strip().strip('"') for line in after.splitlines()]
    text = "\n".join(lines)
    if _ASSERTION in text:  # a tf.debugging assert: its message, without the tensor dumps
        message = text.split(_ASSERTION, 1)[1].split("] [", 1)[0].rstrip("]").strip()
        return message.replace("\\'", "'")
    lines = [_TF_DATA.sub("", _FUNCTION_NODE.sub("", line)) for line in lines
             if line and not line.startswith(_TF_NOISE)]
    message = lines[0] if lines else type(error).__name__
    if isinstance(error, ModuleNotFoundError) and error.name:  # say what installs it
        from keras_ctx.common.optional import install_hint

        hint = install_hint(error.name.split(".")[0])
        message = f"{message}: {hint}" if hint else message
    if isinstance(error, KeyError) and len(message) > 1 and message[0] == message[-1] == "'":
        message = message[1:-1]
    return message

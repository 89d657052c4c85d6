"""Fine-tuning input formats of the seed papers, as tf.data maps.

    gpt_finetuning_inputs  GPT's traversal-style `<start> s_1 <delim> s_2 <extract>`
                           (Radford et al., 2018, Sec. 3.3)
    add_task_prefix        T5's text-to-text task prefix (Raffel et al., 2020)
"""

from keras_ctx.common.optional import tensorflow as tf


def gpt_finetuning_inputs(segments, sequence_length, start_id, delimiter_id, extract_id,
                          pad_id=0):
    """GPT's traversal-style input: `<start> s_1 <delim> s_2 ... <extract>`, padded.

    A tf.data map for one example; `segments` is a list of 1-D token tensors
    (premise/hypothesis, context/answer, ...). Too long -> an error, not a cut.

    Returns:
        {"token_ids": (sequence_length,), "padding_mask": (sequence_length,)}.
    """
    pieces = [tf.constant([start_id], tf.int32)]
    for i, segment in enumerate(segments):
        if i:
            pieces.append(tf.constant([delimiter_id], tf.int32))
        pieces.append(tf.cast(segment, tf.int32))
    pieces.append(tf.constant([extract_id], tf.int32))
    tokens = tf.concat(pieces, 0)
    size = tf.size(tokens)
    check = tf.debugging.assert_less_equal(
        size, sequence_length,
        message="Joined segments exceed sequence_length: raise it (nothing is truncated).",
    )
    with tf.control_dependencies([check]):
        tokens = tf.pad(tokens, [[0, sequence_length - size]], constant_values=pad_id)
    return {
        "token_ids": tf.ensure_shape(tokens, [sequence_length]),
        "padding_mask": tf.cast(tf.range(sequence_length) < size, tf.int32),
    }


def add_task_prefix(prefix, key="inputs"):
    """A tf.data map putting T5's task prefix before a string input.

    Raffel et al. (2020) cast every task as text-to-text: "translate English
    to German: ...", "summarize: ...", "cola sentence: ...".

    Example:
    >>> ds = ds.map(add_task_prefix("summarize: "))  # {"inputs": str, "targets": str}
    """
    if not isinstance(prefix, str) or not prefix.strip():
        raise ValueError(f"`prefix` must be a non-empty string like 'summarize: ', "
                         f"got {prefix!r}.")

    def apply(example):
        if key not in example:
            raise ValueError(f"The example has no {key!r} field; pass key=<the input field>.")
        example = dict(example)
        example[key] = tf.strings.join([prefix, example[key]])
        return example

    return apply

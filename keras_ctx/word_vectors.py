"""Deprecated alias (kept for one release): `keras_ctx.commands.embed` (`embed`,
`word_vectors`, `sequence_outputs`, `cosine`), `keras_ctx.preprocessing.text_inputs`,
and `show_context` = `keras_ctx.commands.sense_table.show_sense_table`.
"""

from keras_ctx.commands.embed import cosine, embed, sequence_outputs, word_vectors  # noqa: F401
from keras_ctx.commands.sense_table import show_sense_table as show_context  # noqa: F401
from keras_ctx.preprocessing import text_inputs  # noqa: F401

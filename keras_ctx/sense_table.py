"""Deprecated alias (kept for one release): `keras_ctx.commands.sense_table`."""

from keras_ctx.commands.sense_table import (  # noqa: F401
    HEATMAP,
    SENSE_EXAMPLES,
    separation,
    sense_similarities,
    show_sense_table,
    write_heatmap,
)

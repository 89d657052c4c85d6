"""Deprecated alias (kept for one release): `keras_ctx.commands.finetune`."""

from keras_ctx.commands.finetune import finetune  # noqa: F401

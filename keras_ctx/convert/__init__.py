"""Checkpoint importers: Hugging Face safetensors directories (more formats per family)."""

from keras_ctx.convert import bert  # noqa: F401  (registers its converter)
from keras_ctx.convert.huggingface import (
    CheckpointError,
    from_huggingface,
    tokenizer_from_huggingface,
)

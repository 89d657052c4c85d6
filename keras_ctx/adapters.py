"""Moved: parameter-efficient training of backbones lives in `keras_ctx.peft`.

`keras_ctx.adapters` (adding, switching, saving adapters and LoRA on a
backbone) was renamed `keras_ctx.peft`, for what it does, so that it is not
mistaken for the adapter layers in `keras_ctx.layers.adapters`. This alias
stays for one release.
"""

from keras_ctx.peft import *  # noqa: F401,F403
from keras_ctx.peft import __all__  # noqa: F401

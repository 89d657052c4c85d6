"""Checkpoint importers and exporters.

Hugging Face safetensors directories (`from_huggingface`, `to_huggingface`),
original TensorFlow checkpoints (`from_tf_checkpoint`, `to_tf_checkpoint`),
allennlp ELMo (`from_allennlp`, `to_allennlp`) and keras-hub backbones
(`from_keras_hub`, `from_keras_hub_preset`). See docs/checkpoints.md.
"""

# Each family's converters are named by its family.py (registered in
# `keras_ctx.registry`); these modules read that registry and import no model.
from keras_ctx.convert.allennlp import from_allennlp, to_allennlp
from keras_ctx.convert.huggingface import CheckpointError, from_huggingface
from keras_ctx.convert.huggingface_export import to_huggingface
from keras_ctx.convert.huggingface_tokenizers import tokenizer_from_huggingface
from keras_ctx.convert.kerashub import from_keras_hub, from_keras_hub_preset
from keras_ctx.convert.tensorflow import from_tf_checkpoint, to_tf_checkpoint

__all__ = [
    "CheckpointError",
    "from_allennlp",
    "from_huggingface",
    "from_keras_hub",
    "from_keras_hub_preset",
    "from_tf_checkpoint",
    "to_allennlp",
    "to_huggingface",
    "to_tf_checkpoint",
    "tokenizer_from_huggingface",
]

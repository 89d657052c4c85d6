"""Every model family keras_ctx knows, one module each, registered in `keras_ctx.registry`.

A family's module names by reference its backbone class, its presets (data
in `keras_ctx.models`), its tokenizer trainer, pipeline builder, pretrainer
and its converter specs (Hugging Face model_types with their heads, keras-hub
classes, the google-research TF layout), and registers them with one
`register_family(Family(...))`. This package is the only place that lists
families; everything else (the CLI, recipes, preprocessing, tasks,
converters) reads the registry, whose API is re-exported here:

    from keras_ctx import families
    families.get("bert").pooling
    families.of_preset("gpt2").name
    families.register_family(families.Family("toy", ToyBackbone, ...))
"""

from keras_ctx.registry import (  # noqa: F401
    Family,
    Framing,
    HuggingFace,
    KerasHub,
    Run,
    get,
    huggingface,
    keras_hub,
    names,
    of_backbone,
    of_huggingface,
    of_keras_hub,
    of_preset,
    preset_names,
    register_family,
    unregister_family,
    with_tf_checkpoints,
)
from keras_ctx.families.common import (  # noqa: F401
    BART_FRAMING,
    FAIRSEQ_FRAMING,
    GPT_END_OF_TEXT,
    GPT_FRAMING,
    T5_FRAMING,
    T5_SENTINELS,
    WORDPIECE_FRAMING,
    XLNET_FRAMING,
    XLNET_SPECIAL_TOKENS,
)

# Registration order matters where families share a backbone class: a
# BertBackbone without a recorded family is BERT's (`of_backbone`).
from keras_ctx.models.bert import family as bert  # noqa: F401,E402,I001
from keras_ctx.models.albert import family as albert
from keras_ctx.models.spanbert import family as spanbert
from keras_ctx.models.mbert import family as mbert
from keras_ctx.models.roberta import family as roberta
from keras_ctx.models.xlm import family as xlm
from keras_ctx.models.gpt import family as gpt
from keras_ctx.models.xlnet import family as xlnet
from keras_ctx.models.ernie import family as ernie
from keras_ctx.models.electra import family as electra
from keras_ctx.models.awd_lstm import family as awd_lstm
from keras_ctx.models.cove import family as cove
from keras_ctx.models.elmo import family as elmo
from keras_ctx.models.bart import family as bart
from keras_ctx.models.t5 import family as t5

"""Every model family keras_ctx knows, registered in `keras_ctx.registry`.

A family lives in one folder, `keras_ctx/models/<family>/`, whose family.py
names by reference its backbone class, its presets (data in its backbone.py),
its tokenizer trainer, pipeline builder, pretrainer, converter specs (Hugging
Face model_types with their heads, keras-hub classes, the google-research TF
layout; in its convert.py), its test size and its paper's objective, and
registers them with one `register_family(Family(...))`. This package imports
each family.py, one line each: the only list of families; everything else
(the CLI, recipes, preprocessing, tasks, converters) reads the registry, whose
API is re-exported here with what several families share (`families.common`):

    from keras_ctx import families
    families.get("bert").pooling
    families.of_preset("gpt2").name
    families.register_family(families.Family("toy", ToyBackbone, ...))
"""

from keras_ctx.registry import (  # noqa: F401
    AllenNLP,
    Family,
    Framing,
    HuggingFace,
    KerasHub,
    Run,
    allennlp,
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
    TINY_TRANSFORMER,
    WORDPIECE_FRAMING,
    XLNET_FRAMING,
    XLNET_SPECIAL_TOKENS,
)

# The one list of families: one line per family folder (docs/design.md, "A new
# family"); importing its family.py registers it.
from keras_ctx.models.bert import family as bert  # noqa: F401,E402,I001
from keras_ctx.models.roberta import family as roberta  # noqa: F401,E402
from keras_ctx.models.mbert import family as mbert  # noqa: F401,E402
from keras_ctx.models.spanbert import family as spanbert  # noqa: F401,E402
from keras_ctx.models.albert import family as albert  # noqa: F401,E402
from keras_ctx.models.electra import family as electra  # noqa: F401,E402
from keras_ctx.models.ernie import family as ernie  # noqa: F401,E402
from keras_ctx.models.xlnet import family as xlnet  # noqa: F401,E402
from keras_ctx.models.gpt import family as gpt  # noqa: F401,E402
from keras_ctx.models.xlm import family as xlm  # noqa: F401,E402
from keras_ctx.models.t5 import family as t5  # noqa: F401,E402
from keras_ctx.models.bart import family as bart  # noqa: F401,E402
from keras_ctx.models.elmo import family as elmo  # noqa: F401,E402
from keras_ctx.models.cove import family as cove  # noqa: F401,E402
from keras_ctx.models.awd_lstm import family as awd_lstm  # noqa: F401,E402

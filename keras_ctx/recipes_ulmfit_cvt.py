"""Deprecated alias (kept for one release): ULMFiT's stages are `keras_ctx.tasks.ulmfit`,
the CVT tagger's files `keras_ctx.tasks.cvt_tagger`, and the commands
`keras_ctx.commands.ulmfit`, `keras_ctx.commands.cvt` and `keras_ctx.commands.cvt_tag`.
"""

from keras_ctx.commands.cvt import cvt_from_files  # noqa: F401
from keras_ctx.commands.cvt_tag import tag_file  # noqa: F401
from keras_ctx.commands.ulmfit import ulmfit_from_files  # noqa: F401
from keras_ctx.tasks.cvt_tagger import (  # noqa: F401
    load_cvt_tagger,
    read_sentences,
    read_tagged_tsv,
    save_cvt_tagger,
    tagging_inputs,
    train_cvt_tagger,
)
from keras_ctx.tasks.ulmfit import (  # noqa: F401
    CLASSIFIER_RATE,
    LM_FINE_TUNING_RATE,
    ULMFIT_ADAM,
    fine_tune_classifier,
    fine_tune_language_model,
    pretrain_language_model,
    ulmfit,
)

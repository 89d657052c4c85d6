"""Deprecated alias (kept for one release): `keras_ctx.commands`.

`pretrain`, `build`, `build_prepared`, `parse_overrides`, `optimizer`,
`use_xla` and `TrainingProgress` are `keras_ctx.commands.pretrain`'s;
`export_run` is `keras_ctx.commands.export`'s, `convert`
`keras_ctx.commands.convert`'s, `finetune` `keras_ctx.commands.finetune`'s,
`embed` / `word_vectors` `keras_ctx.commands.embed`'s, `train_tokenizer`
`keras_ctx.data.tokenizers`' and `say` `keras_ctx.progress`'. Import them from
there.
"""

from keras_ctx.commands.convert import convert  # noqa: F401
from keras_ctx.commands.embed import embed, word_vectors  # noqa: F401
from keras_ctx.commands.export import export_run  # noqa: F401
from keras_ctx.commands.finetune import finetune  # noqa: F401
from keras_ctx.commands.pretrain import (  # noqa: F401
    TrainingProgress,
    build,
    build_prepared,
    optimizer,
    parse_overrides,
    pretrain,
    use_xla,
)
from keras_ctx.commands.sense_table import show_sense_table as show_context  # noqa: F401
from keras_ctx.data.tokenizers import TOKENIZER_SAMPLE, train_tokenizer  # noqa: F401
from keras_ctx.progress import say  # noqa: F401

"""tf.data pipelines: corpora, tokenizers, segments, masking, permutations, noise."""

from keras_ctx.data import (  # noqa: F401
    characters,
    corpora,
    glove,
    lm_stream,
    masking,
    noise,
    parallel,
    permutation,
    pipelines,
    segments,
    span_masking,
    tokenizers,
)

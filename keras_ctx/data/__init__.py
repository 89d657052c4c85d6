"""tf.data pipelines: corpora, tokenizers, segments, masking, permutations, noise."""

from keras_ctx.data import (  # noqa: F401
    characters,
    corpora,
    glove,
    knowledge_masking,
    layouts,
    lm_stream,
    maskers,
    masking,
    ngram_masking,
    noise,
    parallel,
    permutation,
    pipelines,
    segments,
    span_masking,
    tokenizers,
    xlnet_stream,
)

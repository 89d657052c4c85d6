from keras_ctx.data import masking, pipelines, segments, span_masking, tokenizers  # noqa: E402,F401
from keras_ctx.data import characters, glove, parallel  # noqa: E402,F401

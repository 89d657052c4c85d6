"""Reusable Keras layers: drop them into any Keras 3 model."""

from keras_ctx.backend import compiled_for  # the device a step's XLA rewrites target
from keras_ctx.backend import scan_states  # a loop over time XLA compiles, any backend
from keras_ctx.backend import update_positions  # a static-shape cache write
from keras_ctx.layers.activations import gelu_approximate
from keras_ctx.layers.adapters import AdapterHost, BottleneckAdapter, InvertibleAdapter
from keras_ctx.layers.attention import MultiHeadAttention
from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder, Highway
from keras_ctx.layers.dense import Dense, EinsumDense
from keras_ctx.layers.dropout import Dropout, EmbeddingDropout, LockedDropout
from keras_ctx.layers.embeddings import FactorizedEmbedding, PositionEmbedding, TokenEmbedding
from keras_ctx.layers.gather import gather_positions
from keras_ctx.layers.heads import MaskedLMHead, SentencePairHead, SpanBoundaryHead
from keras_ctx.layers.lstm import LSTMP, WeightDropLSTM
from keras_ctx.layers.normalization import LayerNormalization, RMSNormalization
from keras_ctx.layers.position import (
    RelativePositionBias,
    SinusoidalPositionEncoding,
    relative_position_bucket,
    sinusoidal_encoding,
)
from keras_ctx.layers.relative_attention import (
    TwoStreamRelativeAttention,
    relative_positional_encoding,
    two_stream_masks,
)
from keras_ctx.layers.scalar_mix import ScalarMix
from keras_ctx.layers.transformer import (
    FeedForward,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    TransformerEncoderStack,
)
from keras_ctx.layers.xlnet_block import XLNetBlock

__all__ = [
    "compiled_for", "scan_states", "update_positions", "gelu_approximate", "AdapterHost", "BottleneckAdapter",
    "InvertibleAdapter", "MultiHeadAttention", "CharCNNHighwayEmbedder", "Highway", "Dense",
    "EinsumDense", "Dropout", "EmbeddingDropout", "LockedDropout", "FactorizedEmbedding",
    "PositionEmbedding", "TokenEmbedding", "gather_positions", "MaskedLMHead",
    "SentencePairHead", "SpanBoundaryHead", "LSTMP", "WeightDropLSTM", "LayerNormalization",
    "RMSNormalization", "RelativePositionBias", "SinusoidalPositionEncoding",
    "relative_position_bucket", "sinusoidal_encoding", "TwoStreamRelativeAttention",
    "relative_positional_encoding", "two_stream_masks", "ScalarMix", "FeedForward",
    "TransformerDecoderBlock", "TransformerEncoderBlock", "TransformerEncoderStack",
    "XLNetBlock",
]

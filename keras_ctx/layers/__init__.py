"""Reusable Keras layers: drop them into any Keras 3 model."""

from keras_ctx.backend import scan_states  # a loop over time XLA compiles, any backend
from keras_ctx.backend import update_positions  # a static-shape cache write
from keras_ctx.layers.activations import gelu_approximate
from keras_ctx.layers.adapters import AdapterHost, BottleneckAdapter, InvertibleAdapter
from keras_ctx.layers.attention import MultiHeadAttention
from keras_ctx.layers.char_cnn import CharCNNHighwayEmbedder, Highway
from keras_ctx.layers.dropout import Dropout, EmbeddingDropout, LockedDropout
from keras_ctx.layers.embeddings import FactorizedEmbedding, PositionEmbedding, TokenEmbedding
from keras_ctx.layers.gather import gather_positions
from keras_ctx.layers.heads import MaskedLMHead, SentencePairHead, SpanBoundaryHead
from keras_ctx.layers.lstm import LSTMP, WeightDropLSTM
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
from keras_ctx.layers.saved_names import REMOVED
from keras_ctx.layers.scalar_mix import ScalarMix
from keras_ctx.layers.transformer import (
    FeedForward,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    TransformerEncoderStack,
)
from keras_ctx.layers.xlnet_block import XLNetBlock

__all__ = [
    "scan_states", "update_positions", "gelu_approximate", "AdapterHost", "BottleneckAdapter",
    "InvertibleAdapter", "MultiHeadAttention", "CharCNNHighwayEmbedder", "Highway", "Dropout", "EmbeddingDropout", "LockedDropout", "FactorizedEmbedding",
    "PositionEmbedding", "TokenEmbedding", "gather_positions", "MaskedLMHead",
    "SentencePairHead", "SpanBoundaryHead", "LSTMP", "WeightDropLSTM", "RelativePositionBias", "SinusoidalPositionEncoding",
    "relative_position_bucket", "sinusoidal_encoding", "TwoStreamRelativeAttention",
    "relative_positional_encoding", "two_stream_masks", "ScalarMix", "FeedForward",
    "TransformerDecoderBlock", "TransformerEncoderBlock", "TransformerEncoderStack",
    "XLNetBlock",
]


def __getattr__(name):
    # One line naming the fix for the layers that are Keras' own now (saved_names.py).
    if name in REMOVED:
        raise AttributeError(f"keras_ctx.layers.{name} is gone: {REMOVED[name]}.")
    raise AttributeError(f"module 'keras_ctx.layers' has no attribute {name!r}")

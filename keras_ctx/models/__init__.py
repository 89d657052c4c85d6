"""Backbones (functional keras.Model) of every family, and their presets.

Each family's presets are data in its module; its module under
`keras_ctx.families` registers them (with their family) in `keras_ctx.registry`.
"""

from keras_ctx.models.backbone import Backbone
from keras_ctx.models.presets import from_preset, list_presets  # noqa: F401

from keras_ctx.models import awd_lstm, albert, bart, bert, cove, electra, elmo, gpt, t5, xlnet  # noqa: F401,E402,I001
from keras_ctx.models.albert import AlbertBackbone  # noqa: E402
from keras_ctx.models.awd_lstm import AwdLstmBackbone  # noqa: E402
from keras_ctx.models.bart import BartBackbone  # noqa: E402
from keras_ctx.models.bert.backbone import BertBackbone, RobertaBackbone  # noqa: E402
from keras_ctx.models.cove import Cove, CoveBackbone  # noqa: E402
from keras_ctx.models.cvt import CvtEncoder  # noqa: E402
from keras_ctx.models.electra import ElectraBackbone, electra_generator  # noqa: E402
from keras_ctx.models.elmo import Elmo, ElmoBackbone  # noqa: E402
from keras_ctx.models.gpt import GPTBackbone  # noqa: E402
from keras_ctx.models.t5 import T5Backbone  # noqa: E402
from keras_ctx.models.xlnet import XLNetBackbone  # noqa: E402
from keras_ctx.models.xlm import XLMBackbone  # noqa: E402

__all__ = [
    "Backbone", "from_preset", "list_presets", "awd_lstm", "albert", "bart", "bert", "cove",
    "electra", "elmo", "gpt", "t5", "xlnet", "AlbertBackbone", "AwdLstmBackbone",
    "BartBackbone", "BertBackbone", "RobertaBackbone", "Cove", "CoveBackbone", "CvtEncoder",
    "ElectraBackbone", "electra_generator", "Elmo", "ElmoBackbone", "GPTBackbone",
    "T5Backbone", "XLNetBackbone", "XLMBackbone",
]

"""Backbones (functional keras.Model) of every family, and their presets.

Each family's presets are data in its module; its module under
`keras_ctx.families` registers them (with their family) in `keras_ctx.registry`.
"""

from keras_ctx.models.backbone import Backbone
from keras_ctx.models.presets import from_preset, list_presets  # noqa: F401

from keras_ctx.models import bert  # noqa: F401,E402,I001
from keras_ctx.models.awd_lstm import backbone as awd_lstm
from keras_ctx.models.cove import backbone as cove
from keras_ctx.models.elmo import backbone as elmo
from keras_ctx.models.bart import backbone as bart
from keras_ctx.models.t5 import backbone as t5
from keras_ctx.models.gpt import backbone as gpt
from keras_ctx.models.xlnet import backbone as xlnet
from keras_ctx.models.electra import backbone as electra
from keras_ctx.models.albert import backbone as albert
from keras_ctx.models.albert.backbone import AlbertBackbone  # noqa: E402
from keras_ctx.models.awd_lstm.backbone import AwdLstmBackbone  # noqa: E402
from keras_ctx.models.bart.backbone import BartBackbone  # noqa: E402
from keras_ctx.models.bert.backbone import BertBackbone, RobertaBackbone  # noqa: E402
from keras_ctx.models.cove.backbone import Cove, CoveBackbone  # noqa: E402
from keras_ctx.models.cvt import CvtEncoder  # noqa: E402
from keras_ctx.models.electra.backbone import ElectraBackbone, electra_generator  # noqa: E402
from keras_ctx.models.elmo.backbone import Elmo, ElmoBackbone  # noqa: E402
from keras_ctx.models.gpt.backbone import GPTBackbone  # noqa: E402
from keras_ctx.models.t5.backbone import T5Backbone  # noqa: E402
from keras_ctx.models.xlnet.backbone import XLNetBackbone  # noqa: E402
from keras_ctx.models.xlm.backbone import XLMBackbone  # noqa: E402

__all__ = [
    "Backbone", "from_preset", "list_presets", "awd_lstm", "albert", "bart", "bert", "cove",
    "electra", "elmo", "gpt", "t5", "xlnet", "AlbertBackbone", "AwdLstmBackbone",
    "BartBackbone", "BertBackbone", "RobertaBackbone", "Cove", "CoveBackbone", "CvtEncoder",
    "ElectraBackbone", "electra_generator", "Elmo", "ElmoBackbone", "GPTBackbone",
    "T5Backbone", "XLNetBackbone", "XLMBackbone",
]

"""Backbones (functional keras.Model) of every family, and their presets.

Each family is one folder, `keras_ctx.models.<family>`: backbone.py (the model and
its presets' data), family.py (its registry entry, registered when
`keras_ctx.families` imports it) and convert*.py (its checkpoint maps). This
package imports the folders' models only.
"""

from keras_ctx.models.backbone import Backbone
from keras_ctx.models.presets import from_preset, list_presets  # noqa: F401

from keras_ctx.models import awd_lstm, albert, bart, bert, cove, electra, elmo, gpt, t5, xlnet  # noqa: F401,E402,I001
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

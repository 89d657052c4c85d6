"""GPT, GPT-2, GPT-3 and GPT-Neo: one GPTBackbone class, four families told apart by
its architecture (`matches`), all causal LM over token chunks."""

import functools

from keras_ctx import optimizers
from keras_ctx.models.gpt import convert_gpt2
from keras_ctx.models.gpt import convert_gpt_neo
from keras_ctx.data import pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import GPT_END_OF_TEXT, GPT_FRAMING, LAST, chunks, pipeline
from keras_ctx.families.common import pretrainer
from keras_ctx.models.gpt import backbone as gpt
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import CausalLMPretrainer
from keras_ctx.registry import Family, register_family


def _causal_read(tokenizer, run):
    return pipelines.causal_lm_example


def _banded(backbone):
    return "local" in getattr(backbone, "attention_types", ())


_CAUSAL_STAGE = (Stage("causal LM", 0, source="Radford et al. 2018, Sec. 3.1"),)
# GPT (Radford et al. 2018, Sec. 4.1): batch 64 of 512 tokens, Adam at 2.5e-4 after
# 2000 warm-up steps. GPT-2 (Radford et al. 2019, Sec. 2.3): batch 512 of 1024 tokens;
# each size's rate "manually tuned", not published. GPT-3 (Brown et al. 2020, Table
# 2.1): each size's rate and batch in tokens, 2048-token context. GPT-Neo's settings
# are EleutherAI's configs, not recorded here.
GPT_PRETRAINING = register_pretraining({
    "gpt": Pretraining(learning_rate=2.5e-4, batch_size=64, sequence_length=512,
                       warmup_steps=2000, stages=_CAUSAL_STAGE,
                       source="Radford et al. 2018, Sec. 4.1"),
    **{name: Pretraining(batch_size=512, sequence_length=1024, stages=_CAUSAL_STAGE,
                         source="Radford et al. 2019, Sec. 2.3")
       for name in gpt.GPT2_PRESETS},
    # GPT-3's warm-up is 375M tokens (Appendix B) while its batch grows from 32k tokens:
    # no step count, so none is recorded.
    **{name: Pretraining(learning_rate=rate, batch_tokens=tokens, sequence_length=2048,
                         stages=_CAUSAL_STAGE,
                         source="Brown et al. 2020, Table 2.1; Sec. 2.1 (n_ctx 2048)")
       for name, rate, tokens in (
           ("gpt3-small", 6.0e-4, 500_000), ("gpt3-medium", 3.0e-4, 500_000),
           ("gpt3-large", 2.5e-4, 500_000), ("gpt3-xl", 2.0e-4, 1_000_000),
           ("gpt3-2.7b", 1.6e-4, 1_000_000), ("gpt3-6.7b", 1.2e-4, 2_000_000),
           ("gpt3-13b", 1.0e-4, 2_000_000), ("gpt3-175b", 0.6e-4, 3_200_000))},
    **{name: Pretraining(stages=_CAUSAL_STAGE, source="not published in a paper; "
                         "EleutherAI/gpt-neo configs not recorded here")
       for name in gpt.GPT_NEO_PRESETS},
})

# What the four share: causal LM over chunks joined by <|endoftext|>.
_CAUSAL = dict(pooling=LAST,
               dataset=pipeline(pipelines.causal_lm_dataset, end_token=GPT_END_OF_TEXT),
               prepared=chunks(_causal_read, end_token=GPT_END_OF_TEXT),
               pretrainer=pretrainer(CausalLMPretrainer),
               objective=(CausalLMPretrainer, ()))
_BYTE_LEVEL_BPE = functools.partial(tokenizers.train_byte_level_bpe,
                                    special_tokens=(GPT_END_OF_TEXT,))

# GPT (Radford et al. 2018): BPE with end-of-word markers (</w>), not bytes; post-LN.
GPT = register_family(Family(
    "gpt", gpt.GPTBackbone, gpt.GPT_PRESETS,
    functools.partial(tokenizers.train_word_end_bpe, special_tokens=(GPT_END_OF_TEXT,)),
    GPT_FRAMING, **_CAUSAL,
    huggingface=convert_gpt2.OPENAI_GPT_HUGGINGFACE,
    matches=lambda backbone: not backbone.normalize_first,
    optimizer=optimizers.gpt_recipe,
    tiny=TINY_TRANSFORMER))
# GPT-2 (Radford et al. 2019): byte-level BPE, pre-LN.
GPT2 = register_family(Family(
    "gpt2", gpt.GPTBackbone, gpt.GPT2_PRESETS, _BYTE_LEVEL_BPE, GPT_FRAMING, **_CAUSAL,
    huggingface=convert_gpt2.GPT2_HUGGINGFACE, keras_hub=convert_gpt2.GPT2_KERAS_HUB,
    matches=lambda backbone: backbone.normalize_first and not _banded(backbone),
    optimizer=optimizers.gpt_recipe,
    tiny=TINY_TRANSFORMER))
# GPT-3 (Brown et al. 2020): GPT-2 with alternating dense / banded layers.
GPT3 = register_family(Family(
    "gpt3", gpt.GPTBackbone, gpt.GPT3_PRESETS, _BYTE_LEVEL_BPE, GPT_FRAMING, **_CAUSAL,
    matches=lambda backbone: _banded(backbone) and backbone.attention_scale is None,
    optimizer=optimizers.gpt3_recipe,
    # Two layers (dense, then a band of 2), so the band cuts at the tests' length 6.
    tiny=dict(TINY_TRANSFORMER, num_layers=2, head_size=8, window_size=2,
              max_sequence_length=32)))
# GPT-Neo: GPT-3's pattern as EleutherAI released it (unscaled scores).
GPT_NEO = register_family(Family(
    "gpt_neo", gpt.GPTBackbone, gpt.GPT_NEO_PRESETS, _BYTE_LEVEL_BPE, GPT_FRAMING, **_CAUSAL,
    huggingface=convert_gpt_neo.HUGGINGFACE,
    matches=lambda backbone: _banded(backbone) and backbone.attention_scale is not None,
    optimizer=optimizers.gpt3_recipe,
    tiny=dict(TINY_TRANSFORMER, num_layers=2, window_size=2, max_sequence_length=32)))

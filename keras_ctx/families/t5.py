"""T5 (Raffel et al. 2020) and mT5: span corruption with sentinels, encoder-decoder."""

from keras_ctx import optimizers
from keras_ctx.convert import t5 as convert_t5
from keras_ctx.data import noise, pipelines, tokenizers
from keras_ctx.families.common import T5_FRAMING, T5_SENTINELS, chunks, pipeline, pretrainer
from keras_ctx.models import t5
from keras_ctx.pretraining import Seq2SeqPretrainer
from keras_ctx.registry import Family, register_family


def _t5_read(tokenizer, run):
    return pipelines.span_corruption_example(tokenizer, run.sequence_length, T5_SENTINELS)


# T5 classifies from its encoder (mean over real positions).
T5 = register_family(Family(
    "t5", t5.T5Backbone, t5.T5_PRESETS, tokenizers.train_sentencepiece, T5_FRAMING,
    inputs="encoder_decoder",
    pooling=("encoder_sequence_output", "encoder_padding_mask", "mean"),
    word_vectors="encoder_sequence_output", extra_tokens=T5_SENTINELS,
    dataset=pipeline(pipelines.span_corruption_dataset, num_sentinels=T5_SENTINELS),
    prepared=chunks(_t5_read, chunk_length=noise.span_corruption_tokens_length),
    pretrainer=pretrainer(Seq2SeqPretrainer), huggingface=convert_t5.HUGGINGFACE,
    optimizer=optimizers.t5_recipe))

"""ELMo (Peters et al. 2018): a character CNN and a biLM over a word vocabulary.

Its checkpoints are allennlp's options json + hdf5 (`keras_ctx.convert.elmo`).
"""

from keras_ctx import optimizers
from keras_ctx.data import layouts, pipelines
from keras_ctx.data.vocabulary import word_vocabulary
from keras_ctx.models import elmo
from keras_ctx.pretraining import bilm
from keras_ctx.registry import Family, register_family


def bilm_dataset(documents, vocabulary, run):
    return pipelines.bilm_dataset(documents, vocabulary, run.batch_size, run.sequence_length,
                                  seed=run.seed)


def bilm_pretrainer(backbone, vocabulary, run):
    return bilm.BiLMPretrainer(backbone, len(vocabulary),
                               num_sampled=min(bilm.NUM_SAMPLED, len(vocabulary) // 2))


ELMO = register_family(Family(
    "elmo", elmo.ElmoBackbone, elmo.ELMO_PRESETS, word_vocabulary, inputs="characters",
    pooling=("sequence_output", "padding_mask", "mean"), sized_by_tokenizer=False,
    dataset=bilm_dataset, pretrainer=bilm_pretrainer, prepared=layouts.bilm_layout,
    # ELMo keeps its word vocabulary in run.json.
    run_files=lambda vocabulary: (None, {"vocabulary": vocabulary}),
    optimizer=optimizers.elmo_recipe))

"""ELMo (Peters et al. 2018): a character CNN and a biLM over a word vocabulary.

Its checkpoints are allennlp's options json + hdf5 (`keras_ctx.models.elmo.convert`).
"""

from keras_ctx import optimizers
from keras_ctx.data import layouts, pipelines
from keras_ctx.data.vocabulary import word_vocabulary
from keras_ctx.models.elmo import backbone as elmo, convert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import bilm
from keras_ctx.registry import Family, register_family


def bilm_dataset(documents, vocabulary, run):
    return pipelines.bilm_dataset(documents, vocabulary, run.batch_size, run.sequence_length,
                                  seed=run.seed)


def bilm_pretrainer(backbone, vocabulary, run):
    return bilm.BiLMPretrainer(backbone, len(vocabulary),
                               num_sampled=min(bilm.NUM_SAMPLED, len(vocabulary) // 2))


# bilm-tf's bin/train_elmo.py (@7cffee2, the released options of the original model):
# batch 128, 20 unrolled steps, Adagrad at 0.2. The small and medium models' training
# settings are not published.
_BILM_STAGE = (Stage("forward + backward LM", 0, source="Peters et al. 2018, Sec. 3.1"),)
ELMO_PRETRAINING = register_pretraining({
    "elmo-original": Pretraining(learning_rate=0.2, batch_size=128, sequence_length=20,
                                 stages=_BILM_STAGE,
                                 source="allenai/bilm-tf bin/train_elmo.py @7cffee2"),
    **{name: Pretraining(stages=_BILM_STAGE, source="not published")
       for name in ("elmo-small", "elmo-medium")},
})

ELMO = register_family(Family(
    "elmo", elmo.ElmoBackbone, elmo.ELMO_PRESETS, word_vocabulary, inputs="characters",
    pooling=("sequence_output", "padding_mask", "mean"), sized_by_tokenizer=False,
    dataset=bilm_dataset, pretrainer=bilm_pretrainer, prepared=layouts.bilm_layout,
    # ELMo keeps its word vocabulary in run.json.
    run_files=lambda vocabulary: (None, {"vocabulary": vocabulary}),
    optimizer=optimizers.elmo_recipe, allennlp=convert.ALLENNLP,
    tiny=dict(projection_dim=8, lstm_units=16, num_layers=1),
    objective=(bilm.BiLMPretrainer, ())))

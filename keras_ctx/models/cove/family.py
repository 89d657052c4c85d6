"""CoVe (McCann et al. 2017): the encoder of a translation model, over word vectors.

`keras-ctx pretrain cove-base --parallel en-de=pairs.tsv --glove glove.840B.300d.txt`
runs the paper's one stage, translation (`keras_ctx.data.cove_recipe`): the
MT-LSTM encoder over the fixed --glove vectors of the source words, CoVe's
attentional decoder over the target words (`TranslationPretrainer`), SGD as
the released OpenNMT-py run. The run saves the encoder (the backbone, what
`keras-ctx embed` and fine-tuning read) and the source words' tokenizer.
"""

from keras_ctx import optimizers
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.progress import say
from keras_ctx.data import cove_recipe as recipe
from keras_ctx.models.cove import backbone as cove
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import TranslationPretrainer
from keras_ctx.registry import Family, Framing, register_family

# The released run (salesforce/cove OpenNMT-py @9a0d90b): train.py's defaults, which the
# README's commands keep: -batch_size 64, -learning_rate 1.0 (-optim sgd), -dropout 0.2,
# -layers 2, -rnn_size 600 (300 a direction). cove-base is the released MT-LSTM (its
# README: "the best, pretrained MT-LSTM from the paper", MT-Large, trained on WMT'17), whose
# README command preprocesses with -seq_length 75 (words a side; the Multi30k and IWSLT'16
# commands, MT-Small's and MT-Medium's data, keep preprocess.py's 50).
RELEASED = "salesforce/cove OpenNMT-py train.py, preprocess.py @9a0d90b"
DROPOUT = 0.2
_TRANSLATION = (Stage("translation (the MT-LSTM encoder, an attentional LSTM decoder, "
                      "teacher forcing)", 0, source="McCann et al. 2017, Sec. 3"),)
COVE_PRETRAINING = register_pretraining({
    name: Pretraining(learning_rate=optimizers.COVE_LEARNING_RATE, batch_size=64,
                      sequence_length=75, stages=_TRANSLATION,
                      source=f"{RELEASED} (SGD at 1.0, batches of 64 pairs; WMT'17's sides "
                             "of at most 75 words); McCann et al. 2017, Sec. 3 (the one stage)")
    for name in cove.COVE_PRESETS})


def recipe_config(run):
    """The --glove file's width; the released dropout in the encoder (`--set dropout=` wins)."""
    return {**recipe.recipe_config(run), "dropout": DROPOUT}


def cove_pretrainer(backbone, tokenizer, run):
    """The encoder's word table set to the --glove vectors, under CoVe's decoder: as wide as
    the encoder's output (-rnn_size 600), as deep (-layers 2), target vectors as wide as the
    source's (-word_vec_size), dropout 0.2 (train.py -dropout) on the target vectors and on h~;
    OpenNMT-py's dropout inside the decoder's steps (on the fed-back h~, between its layers)
    is not in `AttentionalDecoder`."""
    matrix, found = recipe.glove_vectors(tokenizer, run)
    table = backbone.token_embedding.embeddings
    if tuple(table.shape) != matrix.shape:
        raise ConfigError(f"--glove holds {matrix.shape[1]}-dimensional vectors but the encoder "
                          f"reads {table.shape[1]}: drop --set embedding_size.")
    table.assign(matrix)
    say(f"CoVe's encoder reads fixed --glove vectors: {found} of its {len(matrix)} source "
        "words have one, the others read zeros (the salesforce/cove README).")
    return TranslationPretrainer(
        backbone, len(recipe.target_vocabulary(run, tokenizer)),
        target_embedding_dim=backbone.embedding_size, decoder_units=backbone.output_dim,
        num_decoder_layers=backbone.num_layers, dropout=DROPOUT, target_dropout=DROPOUT)


COVE = register_family(Family(
    "cove", cove.CoveBackbone, cove.COVE_PRESETS, recipe.train_word_tokenizer,
    # Whole words, nothing around them; id 0 pads (the encoder's zero row).
    Framing(pad=(("<pad>",),), segments=1), inputs="words",
    pooling=("sequence_output", "padding_mask", "mean"),
    dataset=recipe.cove_dataset, pretrainer=cove_pretrainer, optimizer=optimizers.cove_recipe,
    recipe_config=recipe_config,
    objective=(TranslationPretrainer, ("decoder_token_ids",)),
    tiny=dict(embedding_size=8, hidden_size=8, num_layers=1)))

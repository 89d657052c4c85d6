"""zero_shot_transfer on the synthetic languages: trained on L1, evaluated on L2."""

import keras
import pytest

from keras_ctx.data import synthetic_languages as syn
from keras_ctx.models import BertBackbone
from keras_ctx.tasks.cross_lingual import zero_shot_transfer
from tests.backends import slow_on


def _bilingual_bert(aligned):
    keras.utils.set_random_seed(0)
    backbone = BertBackbone(syn.vocabulary_size(2), 1, 2, 32, 64, max_sequence_length=9,
                            dropout=0.0)
    if aligned:  # L2's word w gets L1's word w's vector: a perfectly shared space
        table = backbone.token_embedding.embeddings.numpy()
        table[syn.OFFSET + syn.WORDS:] = table[syn.OFFSET:syn.OFFSET + syn.WORDS]
        backbone.token_embedding.embeddings.assign(table)
    # Frozen table: fine-tuning on L1 cannot move L1's rows away from L2's.
    backbone.token_embedding.trainable = False
    return backbone


def _data(language, count, seed):
    words, labels = syn.sentences(count, seed=seed)
    return syn.classification_inputs(syn.to_ids(words, language)), labels


@slow_on("torch")  # ~40 s each, eager on torch; the transfer recipes run in test_transfer.py
@pytest.mark.parametrize("aligned", [True, False])
def test_zero_shot_transfer_trains_on_l1_and_evaluates_on_l2(aligned):
    result = zero_shot_transfer(_bilingual_bert(aligned), _data(0, 512, 0), _data(1, 128, 2),
                                num_classes=2, eval_l1=_data(0, 128, 1), epochs=3,
                                learning_rate=3e-3, dropout=0.0, jit_compile="auto")
    assert set(result) == {"l1_accuracy", "l2_accuracy", "classifier"}
    # The polarity label is read off two adjectives and the verb: L1 is learned.
    assert result["l1_accuracy"] > 0.95, result
    if aligned:  # the same vectors under other ids: the task carries over
        assert result["l2_accuracy"] > 0.95, result
    else:  # L2's rows were never trained: near chance (1/2)
        assert result["l2_accuracy"] < 0.8, result


def test_zero_shot_transfer_checks_its_data():
    with pytest.raises(ValueError, match="eval_l2"):
        zero_shot_transfer(_bilingual_bert(False), _data(0, 8, 0), "l2.tsv", num_classes=2)

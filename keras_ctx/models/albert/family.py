"""ALBERT (Lan et al. 2020): factorized embeddings, one shared layer, SOP, n-gram masking."""

import functools

from keras_ctx import optimizers
from keras_ctx.models.albert import convert as convert_albert
from keras_ctx.data import layouts, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, layout, pipeline, pretrainer
from keras_ctx.models.albert import backbone as albert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import AlbertPretrainer
from keras_ctx.registry import Family, register_family

# Lan et al. 2020, Sec. 4.1, one recipe for every size: batch 4096, LAMB at 0.00176,
# 125k steps, 512 tokens (albert run_pretraining.py @b772393: train_batch_size 4096,
# learning_rate 0.00176, num_train_steps 125000, num_warmup_steps 3125); n-grams of
# up to 3 words (create_pretraining_data.py: ngram=3), 15% masked, 80/10/10.
_ALBERT = Pretraining(learning_rate=0.00176, batch_size=4096, sequence_length=512,
                      steps=125_000, warmup_steps=3_125, mask_rate=0.15, mask_token_rate=0.8,
                      random_token_rate=0.1, max_span=3,
                      stages=(Stage("n-gram MLM + SOP", 0, source="Lan et al. 2020, Sec. 4.1"),),
                      source="Lan et al. 2020, Sec. 4.1; google-research/albert "
                             "run_pretraining.py, create_pretraining_data.py @b772393")
ALBERT_PRETRAINING = register_pretraining({name: _ALBERT for name in albert.ALBERT_PRESETS})

# The released SentencePiece (google-research/albert README.md @b772393): `spm_train
# --input all.txt --model_prefix=30k-clean --vocab_size=30000 --pad_id=0 --unk_id=1
# --eos_id=-1 --bos_id=-1 --control_symbols=[CLS],[SEP],[MASK]
# --user_defined_symbols="(,),\",-,.,–,£,€" --shuffle_input_sentence=true
# --input_sentence_size=10000000 --character_coverage=0.99995 --model_type=unigram`.
# Its user-defined symbols (always pieces of their own, so each starts an n-gram word)
# and character coverage are the family's. A saved or exported ALBERT tokenizer carries a
# tokenizer.json that transformers reads with SentencePiece's ids, the symbols included
# (keras_ctx.data.tokenizer_files.sentencepiece_tokenizer_json).
ALBERT_USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")
ALBERT_CHARACTER_COVERAGE = 0.99995
train_albert_tokenizer = functools.partial(
    tokenizers.train_albert_sentencepiece, user_defined_symbols=ALBERT_USER_DEFINED_SYMBOLS,
    character_coverage=ALBERT_CHARACTER_COVERAGE)

ALBERT = register_family(Family(
    "albert", albert.AlbertBackbone, albert.ALBERT_PRESETS, train_albert_tokenizer,
    WORDPIECE_FRAMING, pooling=POOLED, dataset=pipeline(pipelines.albert_dataset, word_start=tokenizers.albert_word_start),
    pretrainer=pretrainer(AlbertPretrainer),
    prepared=layout(layouts.pairs_layout, kind="sop", whole_word_masking=True, max_ngram=3,
                    word_start=tokenizers.albert_word_start),
    huggingface=convert_albert.HUGGINGFACE, keras_hub=convert_albert.KERAS_HUB,
    tf_checkpoint=convert_albert.TF_CHECKPOINT,
    optimizer=optimizers.albert_recipe,
    tiny=dict(TINY_TRANSFORMER, embedding_size=8),
    objective=(AlbertPretrainer, ("sentence_order_labels",))))

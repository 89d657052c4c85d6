"""The masker a family's masking options ask for, shared by streamed and prepared data."""

from keras_ctx.data.masking import MLMMasker
from keras_ctx.data.ngram_masking import NgramMasker
from keras_ctx.data.tokenizers import continuation_table, sentencepiece_word_start


def continuations(tokenizer, word_continuations=None, word_start=sentencepiece_word_start):
    """`word_continuations`, or the tokenizer's table (True for pieces that continue a word;
    `word_start`: the family's rule for SentencePiece pieces, `continuation_table`)."""
    if word_continuations is None:
        if tokenizer is None:
            raise ValueError("Without a tokenizer, give `word_continuations` "
                             "(keras_ctx.data.tokenizers.continuation_table).")
        word_continuations = continuation_table(tokenizer, word_start)
    return word_continuations


# fairseq's MaskTokensDataset gives its dictionary's first `nspecial` symbols (<s>,
# <pad>, </s>, <unk>; ids 0-3 of keras_ctx's byte-level BPE too) weight 0 as random
# replacements (`weights[: self.vocab.nspecial] = 0`); <mask> stays drawable.
FAIRSEQ_NSPECIAL = 4


def never_masked_ids(special_ids, maskable=()):
    """The distinct ids of `special_ids` ({role: id}) but [UNK] and the roles in
    `maskable`, sorted: never masked.

    google-research/bert create_pretraining_data.py (eedf571) leaves out only
    [CLS] and [SEP] (padding never reaches it); [UNK] stands for a word of the
    text and may be masked. fairseq's RoBERTa masks any position of a block,
    <s> and </s> too (`maskable=("cls", "sep")`); padding never.
    """
    return tuple(sorted({i for role, i in special_ids.items()
                         if role != "unk" and role not in maskable}))


def masker_for(tokenizer, special_ids, vocabulary_size, whole_word_masking=False, max_ngram=1,
               word_continuations=None, word_start=sentencepiece_word_start,
               maskable_specials=(), random_token_low=0, **kwargs):
    """BERT's token masking, or whole-word / n-gram masking (`NgramMasker`); `word_start`:
    where a SentencePiece word starts for the family (`tokenizers.albert_word_start`);
    `maskable_specials`: special roles that may be masked (`never_masked_ids`);
    `random_token_low`: the lowest id a random replacement takes (BERT's and
    ALBERT's create_pretraining_data.py draw the whole vocabulary, 0; fairseq's
    RoBERTa never its dictionary's first `nspecial` symbols, `FAIRSEQ_NSPECIAL`)."""
    if random_token_low:
        kwargs.setdefault("random_token_range", (random_token_low, vocabulary_size))
    never = never_masked_ids(special_ids, maskable_specials)
    if whole_word_masking or max_ngram > 1:
        table = (continuations(tokenizer, word_continuations, word_start)
                 if whole_word_masking else None)
        return NgramMasker(vocabulary_size, special_ids["mask"], never,
                           table, max_ngram=max_ngram, **kwargs)
    return MLMMasker(vocabulary_size, special_ids["mask"], special_token_ids=never, **kwargs)


def check_duplicate(duplicate, static_masking):
    if duplicate != 1 and not static_masking:
        raise ValueError("`duplicate` copies are for static masking; dynamic masking draws "
                         "new masks every epoch (use duplicate=1).")

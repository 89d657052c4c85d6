"""Tokenizers of the BERT family, trained on your corpus, as keras-hub tokenizer layers.

  - WordPiece (BERT, SpanBERT): `train_wordpiece` (keras-hub's
    `compute_word_piece_vocabulary`, i.e. tensorflow-text's BERT vocabulary
    learner) -> `keras_hub.tokenizers.WordPieceTokenizer`.
  - Byte-level BPE (RoBERTa, GPT-2): `train_byte_level_bpe` (Hugging Face
    `tokenizers` learns the merges) -> `keras_hub.tokenizers.BytePairTokenizer`.
  - SentencePiece (ALBERT): `train_sentencepiece` (the `sentencepiece`
    trainer) -> `keras_hub.tokenizers.SentencePieceTokenizer`.

All three are Keras layers made of TensorFlow ops, so `tokenize_documents` runs
them inside tf.data. `special_token_ids(tokenizer)` gives the ids the
pipelines need; `continuation_table(tokenizer)` marks the word-internal pieces
(SpanBERT's whole-word masking); `check_vocabulary(tokenizer, backbone)` fails
clearly when the tokenizer and the embedding table disagree.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ROBERTA_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")  # fairseq order
ALBERT_SPECIAL_TOKENS = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")  # ALBERT's spm ids 0-4


def _texts(data):
    """Python strings from a list, a tf.data of scalar strings or of 1-D string tensors."""
    if isinstance(data, tf.data.Dataset):
        for item in data.as_numpy_iterator():
            if isinstance(item, bytes):
                yield item.decode("utf-8")
            else:
                for line in np.asarray(item).reshape(-1):
                    yield line.decode("utf-8")
    else:
        for line in data:
            yield line.decode("utf-8") if isinstance(line, bytes) else line


def train_wordpiece(data, vocabulary_size, lowercase=True,
                    special_tokens=BERT_SPECIAL_TOKENS):
    """Learns a WordPiece vocabulary from `data` and returns a WordPieceTokenizer."""
    import keras_hub

    lines = [t for t in _texts(data) if t.strip()]
    if not lines:
        raise ValueError("No text to learn a WordPiece vocabulary from.")
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        tf.data.Dataset.from_tensor_slices(lines).batch(256), vocabulary_size,
        lowercase=lowercase, reserved_tokens=list(special_tokens))
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, lowercase=lowercase, oov_token="[UNK]",
        special_tokens=list(special_tokens))


def train_byte_level_bpe(data, vocabulary_size, special_tokens=ROBERTA_SPECIAL_TOKENS,
                         min_frequency=2):
    """Learns byte-level BPE merges (RoBERTa, Liu et al. 2019) and returns a BytePairTokenizer."""
    import keras_hub
    from tokenizers import ByteLevelBPETokenizer

    trainer = ByteLevelBPETokenizer(add_prefix_space=False)
    trainer.train_from_iterator((t for t in _texts(data) if t.strip()),
                                vocab_size=vocabulary_size, min_frequency=min_frequency,
                                special_tokens=list(special_tokens), show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file, merges_file = trainer.save_model(tmp)
        tokenizer = keras_hub.tokenizers.BytePairTokenizer(
            vocabulary=vocab_file, merges=merges_file,
            unsplittable_tokens=list(special_tokens))
    return tokenizer


def train_sentencepiece(data, vocabulary_size, model_type="unigram",
                        special_tokens=ALBERT_SPECIAL_TOKENS, lowercase=True):
    """Trains a SentencePiece model (ALBERT, Lan et al. 2020) -> SentencePieceTokenizer.

    Ids 0-4 are ALBERT's <pad>, <unk>, [CLS], [SEP], [MASK].
    """
    import keras_hub
    import sentencepiece as spm

    pad, unk, *control = special_tokens
    lines = [t for t in _texts(data) if t.strip()]
    if not lines:
        raise ValueError("No text to train a SentencePiece model on.")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, vocab_size=vocabulary_size,
            model_type=model_type, pad_id=0, pad_piece=pad, unk_id=1, unk_piece=unk,
            bos_id=-1, eos_id=-1, control_symbols=",".join(control),
            normalization_rule_name="nmt_nfkc_cf" if lowercase else "nmt_nfkc",
            hard_vocab_limit=False, minloglevel=2)
        with open(prefix + ".model", "rb") as f:
            proto = f.read()
    return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)


def vocabulary(tokenizer):
    """The tokenizer's pieces, in id order."""
    return [tokenizer.id_to_token(i) for i in range(tokenizer.vocabulary_size())]


def special_token_ids(tokenizer):
    """{"cls", "sep", "pad", "mask", "unk"} -> id, whichever spelling the vocabulary uses."""
    pieces = {piece: i for i, piece in enumerate(vocabulary(tokenizer))}
    spellings = {
        "cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>"),
        "mask": ("[MASK]", "<mask>"), "unk": ("[UNK]", "<unk>"),
    }
    ids = {}
    for role, names in spellings.items():
        found = [pieces[n] for n in names if n in pieces]
        if not found:
            raise ValueError(f"The tokenizer's vocabulary has no {role} token ({names}).")
        ids[role] = found[0]
    return ids


def continuation_table(tokenizer):
    """Bool array over ids: True for pieces that continue a word (not a word start).

    WordPiece: "##x". Byte-level BPE: pieces without the leading "Ġ" (space).
    SentencePiece: pieces without the leading "▁". Special tokens start words.
    """
    pieces = vocabulary(tokenizer)
    kind = type(tokenizer).__name__
    table = np.zeros(len(pieces), bool)
    for i, piece in enumerate(pieces):
        if piece.startswith(("[", "<")) and piece.endswith(("]", ">")):
            continue
        if "WordPiece" in kind:
            table[i] = piece.startswith("##")
        elif "BytePair" in kind:
            table[i] = not piece.startswith("\u0120")
        else:
            table[i] = not piece.startswith("\u2581")
    return table


def check_vocabulary(tokenizer, backbone):
    """ValueError when the tokenizer's ids do not fit the backbone's embedding table."""
    size = tokenizer.vocabulary_size()
    table = backbone.token_embedding.vocabulary_size
    if size > table:
        raise ValueError(
            f"The tokenizer has {size} tokens but the backbone's embedding table has "
            f"{table} rows; build the backbone with vocabulary_size={size} (or larger)."
        )
    return size


def tokenize_documents(documents, tokenizer):
    """Maps a tf.data of documents (1-D tf.string sentences) to ragged [sentences, tokens]."""
    def tokenize(sentences):
        tokens = tokenizer(sentences)
        if not isinstance(tokens, tf.RaggedTensor):
            tokens = tf.RaggedTensor.from_tensor(tokens)
        return tf.cast(tokens, tf.int32)

    return documents.map(tokenize)

"""tokenizers-library files written by hand for the tokenizer readers' tests."""



def _fast_wordpiece(words, lowercase=True):
    return {"version": "1.0", "normalizer": {"type": "BertNormalizer", "lowercase": lowercase,
                                             "strip_accents": None, "clean_text": True,
                                             "handle_chinese_chars": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                      "continuing_subword_prefix": "##",
                      "vocab": {word: i for i, word in enumerate(words)}}}

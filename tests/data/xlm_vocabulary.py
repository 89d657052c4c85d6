"""XLM's tokenizer files as transformers' XLMTokenizer reads them, for the XLM tokenizer tests:
vocab.json and merges.txt in fastBPE's form (XLM's checkpoints: "a b count", no header)."""

import json
import os

# English lines, accents, Moses' punctuation cases and a little French: the small corpus the
# default tests learn a vocabulary on (the built-in corpus is the slow test's).
LINES = [
    "The bank approved the loan, didn't it?",
    "We sat on the bank of the river (near Paris) at 5:30 p.m.",
    "\"Quoted\" words -- and 'single' ones ... e.g. U.S.A. & co.",
    "Café, naïve résumé: façade crème brûlée à São Paulo.",
    "L'économie française s'est améliorée en 2019-2020 !",
    "Numbers: 1,000.50 $ 3.14 100% 24/7 #hash @user x+y=z",
    "Ångström ZOË İstanbul Straße Łódź Øresund ΣΑΣ",
] * 12


def write_xlm_vocabulary(tokenizer, directory, counts=True):
    """`tokenizer`'s vocab.json and merges.txt as XLM's checkpoints hold them; returns
    their paths."""
    os.makedirs(directory, exist_ok=True)
    vocab, merges = (os.path.join(directory, n) for n in ("vocab.json", "merges.txt"))
    with open(vocab, "w", encoding="utf-8") as handle:
        json.dump(tokenizer.vocabulary, handle, ensure_ascii=False)
    with open(merges, "w", encoding="utf-8") as handle:
        for rank, merge in enumerate(tokenizer.merges):
            handle.write(" ".join(merge) + (f" {1000 - rank}" if counts else "") + "\n")
    return vocab, merges

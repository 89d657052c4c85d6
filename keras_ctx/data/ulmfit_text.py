"""ULMFiT's words (Howard & Ruder 2018) as fastai makes them for its AWD-LSTM.

fastai v1 fastai/text/transform.py (fastai/fastai1 @8287ec0, the defaults ULMFiT's
released models were trained and fine-tuned with): each text is `xxbos ` + text, then

    pre rules   fix_html, replace_rep (xxrep n c), replace_wrep (xxwrep n w),
                spec_add_spaces (around / # and newlines), rm_useless_spaces
    words       spaCy's English tokenizer (`SpacyTokenizer`: spacy.blank("en"))
    post rules  replace_all_caps (xxup w), deal_caps (xxmaj w), everything lower cased

and the vocabulary (`Vocab.create`) is the most frequent words seen at least
`min_freq` (2) times, at most `max_vocab` (60,000) entries with fastai's nine special
tokens first. The backward direction (ULMFiT Sec. 3.3, "Bidirectional language model")
reads the same words from the end, as fastai v1's `backwards=True` (text/data.py
@8287ec0): the LM's stream from its last word to its first (`LanguageModelPreLoader`:
`CircularIndex` takes the texts last to first, `fill_row` each one reversed), each
classifier text reversed (`pad_collate`'s flip), so `xxbos` ends every text. keras_ctx's choices: the words come from `spacy_like_words`, a regular
expression version of spaCy's rules (spaCy is not a dependency; docs/notes/data-
references.md measures the agreement), and the special tokens are in keras_ctx's
order, padding 0 and unknown 1 (fastai: xxunk 0, xxpad 1), as every keras_ctx
model reads padding.
"""

import collections
import html
import re

# fastai v1 transform.py's special tokens.
UNK, PAD, BOS, EOS, FLD = "xxunk", "xxpad", "xxbos", "xxeos", "xxfld"
TK_MAJ, TK_UP, TK_REP, TK_WREP = "xxmaj", "xxup", "xxrep", "xxwrep"
# keras_ctx's order: padding 0, unknown 1 (fastai's defaults.text_spec_tok starts UNK, PAD).
SPECIALS = (PAD, UNK, BOS, EOS, FLD, TK_MAJ, TK_UP, TK_REP, TK_WREP)
PADDING_ID, UNKNOWN_ID = 0, 1
# fastai v1 text/data.py: TextLMDataBunch's max_vocab=60000, min_freq=2 (ULMFiT Sec. 4: 60k).
MAX_VOCAB = 60000
MIN_FREQ = 2
# The reading directions of ULMFiT's two LMs and classifiers (Howard & Ruder 2018, Sec. 3.3).
DIRECTIONS = ("forward", "backward")


# ------------------------------------------------------------ fastai's pre rules
def fix_html(x):
    """fastai's `fix_html`: HTML remnants (IMDb's, WikiText's @-@ joins) fixed."""
    x = x.replace("#39;", "'").replace("amp;", "&").replace("#146;", "'").replace(
        "nbsp;", " ").replace("#36;", "$").replace("\\n", "\n").replace("quot;", "'").replace(
        "<br />", "\n").replace('\\"', '"').replace("<unk>", UNK).replace(" @.@ ", ".").replace(
        " @-@ ", "-").replace(" @,@ ", ",").replace("\\", " \\ ")
    return re.sub(r"  +", " ", html.unescape(x))


_REP = re.compile(r"(\S)(\1{3,})")
_WREP = re.compile(r"(\b\w+\W+)(\1{3,})")


def replace_rep(t):
    """A character repeated 4+ times: ` xxrep n c `."""
    return _REP.sub(lambda m: f" {TK_REP} {len(m.group(2)) + 1} {m.group(1)} ", t)


def replace_wrep(t):
    """A word repeated 4+ times: ` xxwrep n w `."""
    return _WREP.sub(lambda m: f" {TK_WREP} {len(m.group(2).split()) + 1} {m.group(1)} ", t)


def spec_add_spaces(t):
    return re.sub(r"([/#\n])", r" \1 ", t)


def rm_useless_spaces(t):
    return re.sub(" {2,}", " ", t)


PRE_RULES = (fix_html, replace_rep, replace_wrep, spec_add_spaces, rm_useless_spaces)


# ------------------------------------------------------------ fastai's post rules
def replace_all_caps(words):
    out = []
    for w in words:
        if w.isupper() and len(w) > 1:
            out.extend((TK_UP, w.lower()))
        else:
            out.append(w)
    return out


def deal_caps(words):
    out = []
    for w in words:
        if w == "":
            continue
        if w[0].isupper() and len(w) > 1 and w[1:].islower():
            out.append(TK_MAJ)
        out.append(w.lower())
    return out


POST_RULES = (replace_all_caps, deal_caps)


# ------------------------------------------------------------ spaCy's English rules
# spacy/lang/punctuation.py and lang/en/tokenizer_exceptions.py, in the ASCII and
# common typographic characters: what is split off a word's front and back, and where
# a word is split inside.
_PUNCT = "()[]{}<>\"'`´‘’“”«»„‚¡¿$£€¥#*&_%§—–…,:;!?^°"
_OPEN, _CLOSE = _PUNCT + "=", _PUNCT
_CLITIC = re.compile(r"^(.+?)((?:n['’]t|['’](?:s|re|ve|ll|d|m|S|RE|VE|LL|D|M)|N['’]T))$")
_PERIOD_AFTER = re.compile(r"[^A-Z.\s]$|[A-Z][A-Z]$")
_INFIX = re.compile(
    r"(\.{2,}|…"                                   # ellipses
    r"|(?<=[0-9])[+\-*^](?=[0-9-])"                # arithmetic between digits
    r"|(?<=[a-z\"'’”])\.(?=[A-Z\"'‘“])"            # "end.Start"
    r"|(?<=[A-Za-z]),(?=[A-Za-z])"                 # "a,b"
    r"|(?<=[A-Za-z0-9])(?:--|---|-|—|–|~)(?=[A-Za-z])"  # hyphens before letters
    r"|(?<=[A-Za-z0-9])[:<>=/](?=[A-Za-z]))")      # "a:b", "x=y"
_URL = re.compile(r"^(?:https?://|www\.)\S+$", re.IGNORECASE)
# Some of spaCy's English exceptions: abbreviations kept whole with their period,
# emoticons, and words split without an apostrophe (by the lengths of their parts).
_ABBREVIATIONS = frozenset(
    "e.g. i.e. vs. v.s. mr. mrs. ms. dr. st. jr. prof. gen. gov. rep. rev. sen. a.m. p.m. "
    "inc. ltd. co. corp. bros. messrs. jan. feb. mar. apr. jun. jul. aug. sep. sept. oct. "
    "nov. dec. mt. ph.d. d.c. n.y. w/o and/or c++".split())
_EMOTICONS = frozenset(":) :( ): (: :] [: :-) :-( ;) :/ :D :P :p :o =) (= <3 8) 8-) '' ’’ "
                       ":> :| :} :0 :1 :3 :x :X =] =[ =/ =| =3 ':) :') "
                       "'s 'd 'll 're 've 'm ’s ’d ’ll ’re ’ve ’m".split())
_UNSPLIT = {"cannot": (3, 3), "gonna": (3, 2), "gotta": (3, 2), "id": (1, 1), "im": (1, 1),
            "ive": (1, 2), "dont": (2, 2), "doesnt": (4, 2), "didnt": (3, 2), "isnt": (2, 2),
            "arent": (3, 2), "wasnt": (3, 2), "werent": (4, 2), "cant": (2, 2), "wont": (2, 2),
            "shouldnt": (6, 2), "wouldnt": (5, 2), "couldnt": (5, 2), "hasnt": (3, 2),
            "havent": (4, 2), "hadnt": (3, 2), "youre": (3, 2), "theyre": (4, 2)}
_SINGLE_LETTER_ABBREVIATION = re.compile(r"^[A-Za-zäöü]\.$|^(?:[A-Z]\.){2,}$")


def _is_exception(word):
    return (word.lower() in _ABBREVIATIONS or word in _EMOTICONS
            or word.lower() in _UNSPLIT and word in (word.lower(), word.capitalize())
            or _SINGLE_LETTER_ABBREVIATION.match(word) is not None
            or _URL.match(word) is not None)


def _exception_words(word):
    parts = _UNSPLIT.get(word.lower())
    if parts is None:
        return [word]
    return [word[:parts[0]], word[parts[0]:]]


def _split_chunk(chunk):
    """spaCy's loop on one space-free chunk: exceptions, prefixes, suffixes, infixes."""
    front, back = [], []
    while chunk:
        if _is_exception(chunk):
            break
        if len(chunk) > 2 and chunk[:2] in ("''", "’’"):
            front.append(chunk[:2]); chunk = chunk[2:]
            continue
        if len(chunk) > 2 and chunk[-2:] in _EMOTICONS:
            back.append(chunk[-2:]); chunk = chunk[:-2]
            continue
        if len(chunk) > 1 and (chunk[0] in _OPEN or chunk[0] == "+" and not chunk[1].isdigit()):
            if chunk.startswith("..."):
                front.append("..."); chunk = chunk[3:]
                continue
            front.append(chunk[0]); chunk = chunk[1:]
            continue
        if len(chunk) > 1 and chunk[-1] in _CLOSE:
            if chunk.endswith("..."):
                back.append("..."); chunk = chunk[:-3]
                continue
            back.append(chunk[-1]); chunk = chunk[:-1]
            continue
        clitic = _CLITIC.match(chunk)
        if clitic and clitic.group(1)[-1].isalnum():
            back.append(clitic.group(2)); chunk = clitic.group(1)
            continue
        if len(chunk) > 1 and chunk.endswith(".") and _PERIOD_AFTER.search(chunk[:-1]):
            back.append("."); chunk = chunk[:-1]
            continue
        break
    middle = [] if not chunk else _exception_words(chunk) if _is_exception(chunk) else [
        piece for piece in _INFIX.split(chunk) if piece]
    return front + middle + back[::-1]


def spacy_like_words(text):
    """Words as spaCy's English tokenizer splits them (an approximation, see above).

    Text is split at single spaces; any other run of whitespace is a word of its
    own (spaCy's, which fastai keeps: a newline is a word), then punctuation comes
    off each piece's ends, clitics ("n't", "'s") split off, inner hyphens split.
    """
    words = []
    for chunk in re.split(r"( |[^\S ]+ ?)", text):
        if chunk in ("", " "):
            continue
        if chunk.isspace():
            words.append(chunk)
        else:
            words.extend(_split_chunk(chunk))
    return words


def ulmfit_words(text, words=spacy_like_words):
    """One document's words as fastai v1's `Tokenizer` makes them (xxbos first)."""
    text = f"{BOS} {text}"  # text/data.py _join_texts(include_bos=True)
    for rule in PRE_RULES:
        text = rule(text)
    tokens = words(text)
    for rule in POST_RULES:
        tokens = rule(tokens)
    return tokens


def ulmfit_vocabulary(documents, max_vocab=MAX_VOCAB, min_freq=MIN_FREQ):
    """fastai v1's `Vocab.create`: SPECIALS, then the most frequent words seen at least
    `min_freq` times (ties in order of first appearance), `max_vocab` in all."""
    counts = collections.Counter(w for words in documents for w in words)
    words = [w for w, c in counts.most_common(max_vocab) if c >= min_freq]
    return (list(SPECIALS) + [w for w in words if w not in SPECIALS])[:max_vocab]


def ulmfit_ids(words, index):
    """Ids of `words` under {word: id}; a word not in it is UNKNOWN_ID."""
    return [index.get(w, UNKNOWN_ID) for w in words]


def directed(words, direction):
    """A text's words in `direction`'s reading order: "backward" reversed (fastai v1's
    `pad_collate(backwards=True)` flips each classifier row: `xxbos` comes last)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}.")
    return list(words) if direction == "forward" else list(words)[::-1]


def lm_stream_ids(documents, index, direction="forward"):
    """The LM's training stream: every document's ids, documents in order; "backward" the
    same stream read from its end (fastai v1's `LanguageModelPreLoader(backwards=True)`
    without shuffling: the documents last to first, each one's words reversed)."""
    stream = [i for words in documents for i in ulmfit_ids(words, index)]
    return directed(stream, direction)

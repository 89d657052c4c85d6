"""fastai's language-model data for ULMFiT, transcribed for test_ulmfit_data.py.

fastai runs on old torch and spaCy (not installed here), so its algorithms are copied
with numpy arrays in place of torch tensors, each function kept as released:

- fastai v1 (fastai/fastai1) fastai/text/transform.py @cc6d8ec: the special tokens,
  `fix_html`, `replace_rep`, `replace_wrep`, `spec_add_spaces`, `rm_useless_spaces`,
  `replace_all_caps`, `deal_caps`, `BaseTokenizer` (split on ' '),
  `Tokenizer.process_text` and `Vocab.create` (less its 'xxfake' padding to a multiple
  of 8, a mixed-precision detail); fastai/text/data.py @8287ec0 `_join_texts`
  (`xxbos ` before each text).
- `LanguageModelLoader` of fastai v0.7, the paper's code (old/fastai/text.py
  @7523e8c, what courses/dl2/imdb_scripts/pretrain_lm.py @0e1c77f and
  finetune_lm.py train with: bs 64, bptt 70, the ids of all texts concatenated).
- fastai v1's `LanguageModelLoader` before it became the fixed-length
  `LanguageModelPreLoader` (fastai/text/data.py @387787d), for the v1 column.
- the backward direction (ULMFiT Sec. 3.3) as fastai v1 reads it with `backwards=True`
  (fastai/text/data.py @8287ec0, what fastai1's examples/ULMFit.ipynb trains its
  backward LM and classifier with): `LanguageModelPreLoader` (its `CircularIndex`,
  `on_epoch_begin`, `__getitem__`, `fill_row`; `np.int` as `int`, `num_distrib()` 1) and
  `pad_collate` (numpy in place of torch).

`words` (the tokenizer function) is a parameter: fastai's is spaCy's English
tokenizer, passed in where spaCy is installed.
"""

import collections
import html
import math
import re

import numpy as np

BOS, EOS, FLD, UNK, PAD = "xxbos", "xxeos", "xxfld", "xxunk", "xxpad"
TK_MAJ, TK_UP, TK_REP, TK_WREP = "xxmaj", "xxup", "xxrep", "xxwrep"
text_spec_tok = [UNK, PAD, BOS, EOS, FLD, TK_MAJ, TK_UP, TK_REP, TK_WREP]


def base_tokenizer(t):
    return t.split(" ")


def spec_add_spaces(t):
    return re.sub(r"([/#\n])", r" \1 ", t)


def rm_useless_spaces(t):
    return re.sub(" {2,}", " ", t)


def replace_rep(t):
    def _replace_rep(m):
        c, cc = m.groups()
        return f" {TK_REP} {len(cc)+1} {c} "
    re_rep = re.compile(r"(\S)(\1{3,})")
    return re_rep.sub(_replace_rep, t)


def replace_wrep(t):
    def _replace_wrep(m):
        c, cc = m.groups()
        return f" {TK_WREP} {len(cc.split())+1} {c} "
    re_wrep = re.compile(r"(\b\w+\W+)(\1{3,})")
    return re_wrep.sub(_replace_wrep, t)


def fix_html(x):
    re1 = re.compile(r"  +")
    x = x.replace("#39;", "'").replace("amp;", "&").replace("#146;", "'").replace(
        "nbsp;", " ").replace("#36;", "$").replace("\\n", "\n").replace("quot;", "'").replace(
        "<br />", "\n").replace('\\"', '"').replace("<unk>", UNK).replace(" @.@ ", ".").replace(
        " @-@ ", "-").replace(" @,@ ", ",").replace("\\", " \\ ")
    return re1.sub(" ", html.unescape(x))


def replace_all_caps(x):
    res = []
    for t in x:
        if t.isupper() and len(t) > 1:
            res.append(TK_UP)
            res.append(t.lower())
        else:
            res.append(t)
    return res


def deal_caps(x):
    res = []
    for t in x:
        if t == "":
            continue
        if t[0].isupper() and len(t) > 1 and t[1:].islower():
            res.append(TK_MAJ)
        res.append(t.lower())
    return res


text_pre_rules = [fix_html, replace_rep, replace_wrep, spec_add_spaces, rm_useless_spaces]
text_post_rules = [replace_all_caps, deal_caps]


def join_text(text, include_bos=True):
    """`_join_texts` for one text column, mark_fields=False."""
    return (f"{BOS} " if include_bos else "") + str(text)


def process_text(t, words=base_tokenizer):
    """`Tokenizer.process_text`."""
    for rule in text_pre_rules:
        t = rule(t)
    toks = words(t)
    for rule in text_post_rules:
        toks = rule(toks)
    return toks


def vocab_create(tokens, max_vocab, min_freq):
    """`Vocab.create` (itos), without the 'xxfake' padding."""
    freq = collections.Counter(p for o in tokens for p in o)
    itos = [o for o, c in freq.most_common(max_vocab) if c >= min_freq]
    for o in reversed(text_spec_tok):
        if o in itos:
            itos.remove(o)
        itos.insert(0, o)
    return itos[:max_vocab]


def numericalize(itos, t):
    stoi = collections.defaultdict(int, {v: k for k, v in enumerate(itos)})
    return [stoi[w] for w in t]


class LanguageModelLoaderV07:
    """fastai v0.7 `LanguageModelLoader` (old/fastai/text.py @7523e8c)."""

    def __init__(self, nums, bs, bptt, backwards=False):
        self.bs, self.bptt, self.backwards = bs, bptt, backwards
        self.data = self.batchify(nums)
        self.i, self.iter = 0, 0
        self.n = len(self.data)

    def __iter__(self):
        self.i, self.iter = 0, 0
        while self.i < self.n-1 and self.iter < len(self):
            if self.i == 0:
                seq_len = self.bptt + 5 * 5
            else:
                bptt = self.bptt if np.random.random() < 0.95 else self.bptt / 2.
                seq_len = max(5, int(np.random.normal(bptt, 5)))
            res = self.get_batch(self.i, seq_len)
            self.i += seq_len
            self.iter += 1
            yield res

    def __len__(self):
        return self.n // self.bptt - 1

    def batchify(self, data):
        nb = data.shape[0] // self.bs
        data = np.array(data[:nb*self.bs])
        data = data.reshape(self.bs, -1).T
        if self.backwards:
            data = data[::-1]
        return data

    def get_batch(self, i, seq_len):
        source = self.data
        seq_len = min(seq_len, len(source) - 1 - i)
        return source[i:i+seq_len], source[i+1:i+1+seq_len].reshape(-1)


class LanguageModelLoaderV1:
    """fastai v1 `LanguageModelLoader` (fastai/text/data.py @387787d), on a list of
    id arrays (`items`, one a text) in place of its dataset."""

    def __init__(self, items, bs=64, bptt=70, shuffle=False, max_len=25, p_bptt=0.95):
        self.items, self.bs, self.bptt, self.shuffle = items, bs, bptt, shuffle
        self.max_len, self.p_bptt = max_len, p_bptt
        self.lengths = np.array([len(o) for o in items])
        self.n = self.lengths.sum() // self.bs
        self.first = True

    def __len__(self):
        return int(math.ceil((self.n-1) / self.bptt))

    def __iter__(self):
        self.idxs = np.random.permutation(len(self.items)) if self.shuffle else np.arange(
            len(self.items))
        self.text_idx = np.concatenate([[0], self.lengths[self.idxs].cumsum()])
        i, j = 0, 0
        while i < self.n-1 and j < len(self):
            if self.first and j == 0:
                self.first, seq_len = False, self.bptt + self.max_len
            else:
                bptt = self.bptt if np.random.random() < self.p_bptt else self.bptt / 2.
                seq_len = max(5, int(np.random.normal(bptt, 5)))
                seq_len = min(seq_len, self.bptt + self.max_len, self.n-1-i)
            res = self._get_batch(i, seq_len+1)
            i += seq_len
            j += 1
            yield res[:, :-1], res[:, 1:]

    def _get_batch(self, i, seq_len):
        return np.stack([self._get_text(i + k * self.n, seq_len) for k in range(self.bs)], 0)

    def _get_text(self, i, seq_len):
        mask = (self.text_idx[1:] >= i) * (self.text_idx[:-1] < i + seq_len)
        concat = np.concatenate([self.items[i] for i in self.idxs[mask]])
        start_idx = i-self.text_idx[mask.nonzero()[0][0]]
        return concat[start_idx:start_idx+seq_len]


class LanguageModelPreLoader:
    """fastai v1 `LanguageModelPreLoader` (fastai/text/data.py @8287ec0), on a list of id
    arrays (`items`, one a text) in place of `dataset.x.items`; `batches()` is what its
    `DataLoader(bs, shuffle=False)` collates: items k .. k + bs - 1, row k % bs."""

    class CircularIndex():
        "Handles shuffle, direction of indexing, wraps around to head tail in the ragged array as needed"
        def __init__(self, length, forward): self.idx, self.forward = np.arange(length), forward
        def __getitem__(self, i):
            return self.idx[i % len(self.idx) if self.forward else len(self.idx)-1-i % len(self.idx)]
        def __len__(self): return len(self.idx)
        def shuffle(self): np.random.shuffle(self.idx)

    def __init__(self, items, lengths=None, bs=32, bptt=70, backwards=False, shuffle=False):
        self.items, self.bs, self.bptt, self.shuffle, self.backwards, self.lengths = (
            items, bs, bptt, shuffle, backwards, lengths)
        self.totalToks, self.ite_len, self.idx = int(0), None, None

    def __len__(self):
        if self.ite_len is None:
            if self.lengths is None: self.lengths = np.array([len(item) for item in self.items])
            self.totalToks = self.lengths.sum()
            self.ite_len = self.bs*int(math.ceil(self.totalToks/(self.bptt*self.bs)))
        return self.ite_len

    def allocate_buffers(self):
        if self.ite_len is None: len(self)
        self.idx = LanguageModelPreLoader.CircularIndex(len(self.items), not self.backwards)
        self.batch = np.zeros((self.bs, self.bptt+1), dtype=np.int64)
        self.batch_x, self.batch_y = self.batch[:, 0:self.bptt], self.batch[:, 1:self.bptt+1]
        self.ro = np.zeros(self.bs, dtype=np.int64)
        self.ri = np.zeros(self.bs, dtype=int)

    def on_epoch_begin(self, **kwargs):
        if self.idx is None or len(self.idx) != len(self.items): self.allocate_buffers()
        elif self.shuffle: self.idx.shuffle()
        self.idx.forward = not self.backwards
        step = self.totalToks / self.bs
        ln_rag, countTokens, i_rag = 0, 0, -1
        for i in range(0, self.bs):
            while ln_rag + countTokens <= int(step * i):
                countTokens += ln_rag
                i_rag += 1
                ln_rag = self.lengths[self.idx[i_rag]]
            self.ro[i] = i_rag
            self.ri[i] = (ln_rag - int(step * i - countTokens)) if self.backwards else int(step * i - countTokens)

    def __getitem__(self, k):
        j = k % self.bs
        if self.idx is None: self.on_epoch_begin()
        self.ro[j], self.ri[j] = self.fill_row(not self.backwards, self.items, self.idx, self.batch[j],
                                               self.ro[j], self.ri[j], overlap=1, lengths=self.lengths)
        return self.batch_x[j].copy(), self.batch_y[j].copy()  # the DataLoader's collate copies

    def fill_row(self, forward, items, idx, row, ro, ri, overlap, lengths):
        "Fill the row with tokens from the ragged array. --OBS-- overlap != 1 has not been implemented"
        ibuf = n = 0
        ro -= 1
        while ibuf < row.size:
            ro += 1
            ix = idx[ro]
            rag = items[ix]
            if forward:
                ri = 0 if ibuf else ri
                n = min(lengths[ix] - ri, row.size - ibuf)
                row[ibuf:ibuf+n] = rag[ri:ri+n]
            else:
                ri = lengths[ix] if ibuf else ri
                n = min(ri, row.size - ibuf)
                row[ibuf:ibuf+n] = rag[ri-n:ri][::-1]
            ibuf += n
        return ro, ri + ((n-overlap) if forward else -(n-overlap))

    def batches(self):
        """One epoch of (x, y) batches (bs, bptt)."""
        n = len(self)
        self.on_epoch_begin()
        for start in range(0, n, self.bs):
            rows = [self[k] for k in range(start, min(start + self.bs, n))]
            yield np.stack([x for x, _ in rows]), np.stack([y for _, y in rows])


def pad_collate(samples, pad_idx=1, pad_first=True, backwards=False):
    "Function that collect samples and adds padding. Flips token order if needed"
    max_len = max([len(s[0]) for s in samples])
    res = np.zeros((len(samples), max_len), dtype=np.int64) + pad_idx
    if backwards: pad_first = not pad_first
    for i, s in enumerate(samples):
        if pad_first: res[i, -len(s[0]):] = np.asarray(s[0])
        else: res[i, :len(s[0]):] = np.asarray(s[0])
    if backwards: res = np.flip(res, 1)
    return res, np.array([s[1] for s in samples])

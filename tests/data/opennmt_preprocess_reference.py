"""CoVe's training data as its released OpenNMT-py made it, transcribed (no torch needed).

salesforce/cove @9a0d90b, OpenNMT-py/ (the code McCann et al. 2017 trained the MT-LSTM
with; its preprocess.py, onmt/Dict.py and onmt/Dataset.py are OpenNMT/OpenNMT-py @2dca0c2e,
2017-03-24, line for line):
- `lowercase_perl`: Moses' lowercase.perl (`print lc($_)`), which the README runs after
  `tokenizer.perl -no-escape -l $l`;
- `Dict` (onmt/Dict.py `add`, `addSpecial`, `prune`, `convertToIdx`), `make_vocabulary`
  (preprocess.py `makeVocabulary`), `make_data` (`makeData`: the -seq_length filter,
  -shuffle, the sort by source length);
- `batches` (onmt/Dataset.py `__getitem__`/`_batchify`: consecutive pairs, each batch by
  decreasing source length) and `epoch_order` (train.py `trainEpoch`: the batches' order,
  shuffled each epoch; -extra_shuffle off);
- `pooled_batches`: the same sort and batches a pool at a time, the form a stream can make
  (keras_ctx's `cove_recipe.pooled_batches`).
The released code runs with torch 2.13 after one change (`Dict.prune` indexes a dict with
the 0-d tensors that iterating `idx` gives now, ints in 2017's torch), which is how
docs/notes/data-references.md's numbers were checked; this transcription is what the tests
run. torch's `randperm`/`sort` become numpy's (the sort stable, as torch 2.13's is on CPU).
"""

import numpy as np

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # onmt/Constants.py
PAD_WORD, UNK_WORD, BOS_WORD, EOS_WORD = "<blank>", "<unk>", "<s>", "</s>"
SEQ_LENGTH, VOCAB_SIZE, SEED, BATCH_SIZE = 50, 50000, 3435, 64  # the scripts' defaults


def lowercase_perl(line):
    """Perl's `lc`: full case mapping, capital sigma always "σ" (no Final_Sigma rule)."""
    return line.replace("Σ", "σ").lower()


class Dict:
    """onmt/Dict.py: ids in order of first addition; frequencies counted by `add`."""

    def __init__(self, data=None, lower=False):
        self.idxToLabel, self.labelToIdx, self.frequencies = {}, {}, {}
        self.lower = lower
        self.special = []
        if data is not None:
            for label in data:
                self.addSpecial(label)

    def size(self):
        return len(self.idxToLabel)

    def addSpecial(self, label):
        self.special += [self.add(label)]

    def add(self, label):
        label = label.lower() if self.lower else label
        if label in self.labelToIdx:
            idx = self.labelToIdx[label]
        else:
            idx = len(self.idxToLabel)
            self.idxToLabel[idx] = label
            self.labelToIdx[label] = idx
        self.frequencies[idx] = self.frequencies.get(idx, 0) + 1
        return idx

    def prune(self, size):
        """The specials, then the `size` most frequent entries (the specials among them,
        each counted once by addSpecial: where the cut falls among words seen once they
        take 4 of the `size` places)."""
        if size >= self.size():
            return self
        freq = np.array([self.frequencies[i] for i in range(len(self.frequencies))])
        idx = np.argsort(-freq, kind="stable")  # torch.sort(freq, 0, True)
        new = Dict(lower=self.lower)
        for i in self.special:
            new.addSpecial(self.idxToLabel[i])
        for i in idx[:size]:
            new.add(self.idxToLabel[int(i)])
        return new

    def lookup(self, key, default=None):
        key = key.lower() if self.lower else key
        return self.labelToIdx.get(key, default)

    def convertToIdx(self, labels, unkWord, bosWord=None, eosWord=None):
        vec = [self.lookup(bosWord)] if bosWord is not None else []
        unk = self.lookup(unkWord)
        vec += [self.lookup(label, default=unk) for label in labels]
        if eosWord is not None:
            vec += [self.lookup(eosWord)]
        return np.array(vec, np.int64)

    def words(self):
        return [self.idxToLabel[i] for i in range(self.size())]


def make_vocabulary(lines, size=VOCAB_SIZE, lower=True):
    """preprocess.py makeVocabulary: every line's `split()` words, then `prune(size)`."""
    vocab = Dict([PAD_WORD, UNK_WORD, BOS_WORD, EOS_WORD], lower=lower)
    for sent in lines:
        for word in sent.split():
            vocab.add(word)
    return vocab.prune(size)


def make_data(src_lines, tgt_lines, src_dict, tgt_dict, seq_length=SEQ_LENGTH, shuffle=1,
              seed=SEED):
    """preprocess.py makeData: (src ids, tgt ids `<s> y </s>`, ignored), sorted by source
    length. Reading stops at the first pair with an empty side (its `break`); a pair with
    a side over `seq_length` words is ignored."""
    src, tgt, sizes, ignored = [], [], [], 0
    for src_line, tgt_line in zip(src_lines, tgt_lines):
        src_words, tgt_words = src_line.split(), tgt_line.split()
        if not src_words or not tgt_words:
            break
        if len(src_words) <= seq_length and len(tgt_words) <= seq_length:
            src += [src_dict.convertToIdx(src_words, UNK_WORD)]
            tgt += [tgt_dict.convertToIdx(tgt_words, UNK_WORD, BOS_WORD, EOS_WORD)]
            sizes += [len(src_words)]
        else:
            ignored += 1
    if shuffle == 1:
        perm = np.random.RandomState(seed).permutation(len(src))  # torch.randperm
        src, tgt, sizes = ([x[i] for i in perm] for x in (src, tgt, sizes))
    perm = np.argsort(np.array(sizes), kind="stable")  # torch.sort(torch.Tensor(sizes))
    return [src[i] for i in perm], [tgt[i] for i in perm], ignored


def _batchify(data):
    """onmt/Dataset.py _batchify: right-padded with PAD to the batch's longest."""
    out = np.full((len(data), max(len(x) for x in data)), PAD, np.int64)
    for i, x in enumerate(data):
        out[i, :len(x)] = x
    return out


def batches(src, tgt, batch_size=BATCH_SIZE):
    """onmt/Dataset.py: ceil(N / batch_size) batches of consecutive (sorted) pairs, the
    last one short; each (source (b, S), decoder input `<s> y` (b, T), targets `y </s>`
    (b, T)), train.py's `batch[1][:-1]` / `batch[1][1:]` (batch-major here), its rows by
    decreasing source length (`__getitem__`'s `sorted(..., key=lambda x: -x[1])`, stable)."""
    out = []
    for start in range(0, len(src), batch_size):
        source, target = _batchify(src[start:start + batch_size]), _batchify(
            tgt[start:start + batch_size])
        lengths = [len(x) for x in src[start:start + batch_size]]
        order = [i for i, _ in sorted(enumerate(lengths), key=lambda x: -x[1])]
        source, target = source[order], target[order]
        out.append((source, target[:, :-1], target[:, 1:]))
    return out


def pooled_batches(src, tgt, batch_size=BATCH_SIZE, pool_batches=100):
    """The released batches made a pool at a time (keras_ctx's streamed form, not the
    released code): each `pool_batches * batch_size` consecutive pairs sorted by source
    length as `make_data` sorts the whole file, then cut by `batches`, as torchtext's
    data/iterator.py `pool` (100 batches a chunk) does for later OpenNMT-py. A list per pool,
    in the sorted order (train.py shuffles the batches' order)."""
    pool = pool_batches * batch_size
    out = []
    for start in range(0, len(src), pool):
        chunk = np.argsort([len(x) for x in src[start:start + pool]], kind="stable")
        out.append(batches([src[start + i] for i in chunk], [tgt[start + i] for i in chunk],
                           batch_size))
    return out


def epoch_order(num_batches, seed):
    """train.py trainEpoch: `torch.randperm(len(trainData))`, the batches' order."""
    return np.random.RandomState(seed).permutation(num_batches)

"""XLM's pretraining data for `keras-ctx pretrain` (Lample & Conneau 2019).

The paper's stages, from its inputs: MLM on each language's monolingual
stream (`--languages en,fr` names the `--corpus` files in order), the
language of each batch drawn with the paper's smoothed probabilities
(alpha 0.5, Sec. 3.1); and, with `--parallel en-fr=pairs.tsv` (one
`source<TAB>target` pair a line), TLM on the pairs, alternated with MLM as
XLM's README runs it (`--mlm_steps 'en,fr,en-fr'`: one update for each
entry in turn). Without `--languages` the whole corpus is one language
(the tokenizer's), MLM only (xlm-mlm-en-2048's run). Every batch is masked
by `multilingual.xlm_masker` (1/sqrt(frequency) targets, Sec. 3.3). A CLM
preset (`objective="clm"`, XLM's `--clm_steps 'en,fr'`, Sec. 3.2) reads the same
sampled streams unmasked, without pairs.

Each language's corpus streams (tf.data over its files, tokenized in the
pipeline with Moses' rules for its language, as XLM's tools/tokenize.sh $lg): one
counting pass first gives its sentence count (the sampling weights) and its token
counts (XLM's dictionary counts, for the masker), kept in the run directory so a
resumed run does not count again; nothing holds the corpus in memory. The
--parallel pair files stream alike, each side by its language's rules. The run's
BPE is learnt on a sample of every corpus, each by its own language's rules
(`tokenizer_text`).
"""

import os
import re

from keras_ctx.common.errors import ConfigError
from keras_ctx.common.optional import tensorflow as tf
from keras_ctx.common.progress import say
from keras_ctx.data import (corpora, labelled, multilingual, prepared_ids, token_counts,
                            tokenizers, xlm_text)

LANGUAGE_CODE = re.compile(r"[a-z]{2,3}$")  # ISO 639 codes, as XLM's `--lgs`
LINES_PER_CALL = 1000  # sentences tokenized per tokenizer call
OBJECTIVES = ("mlm", "clm")  # XLM's --mlm_steps (MLM, TLM) and --clm_steps


def _language_list(languages):
    if not languages:
        return ()
    names = tuple(languages.split(",")) if isinstance(languages, str) else tuple(languages)
    for name in names:
        if not LANGUAGE_CODE.match(name):
            raise ConfigError(f"--languages: {name!r} is not a language code (two or three "
                              "lower-case letters, e.g. en,fr).")
        if name in xlm_text.SEGMENTED_LANGUAGES:
            raise ConfigError(f"--languages: XLM splits {name!r} with its own segmenter, which "
                              "keras_ctx does not run; segment it first and give it another code.")
    if len(set(names)) != len(names):
        raise ConfigError(f"--languages names a language twice: {','.join(names)}.")
    return names


def _parallel_list(parallel, languages):
    """("en-fr=path", ...) -> ((source, target, path), ...), each language one of `languages`."""
    pairs = []
    for item in parallel or ():
        key, sep, path = item.partition("=") if isinstance(item, str) else ("-".join(
            item[:2]), "=", item[2])
        source, dash, target = key.partition("-")
        if not sep or not dash or not path:
            raise ConfigError(f"--parallel takes SOURCE-TARGET=FILE (en-fr=pairs.tsv), got "
                              f"{item!r}.")
        for name in (source, target):
            if name not in languages:
                raise ConfigError(f"--parallel {item}: {name!r} is not one of --languages "
                                  f"({','.join(languages) or 'none given'}); add its corpus.")
        if source == target:
            raise ConfigError(f"--parallel {item}: a pair needs two languages.")
        if not os.path.isfile(path):
            raise ConfigError(f"--parallel {item}: {path} is not a file.")
        check_parallel(path)  # a malformed line is refused before anything is trained
        pairs.append((source, target, os.fspath(path)))
    if len({pair[:2] for pair in pairs}) != len(pairs):
        raise ConfigError("--parallel names one language pair twice: give one file per pair.")
    return tuple(pairs)


def check_inputs(corpus, languages, parallel):
    """The checked (languages, parallel) of a run; ConfigError (one line) on bad ones.

    `corpus` must list one source per language, in the order of `languages`.
    """
    languages = _language_list(languages)
    if parallel and not languages:
        raise ConfigError("--parallel needs --languages: name the language of each --corpus "
                          "file (e.g. --languages en,fr).")
    if languages:
        sources = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
        if len(sources) != len(languages):
            raise ConfigError(
                f"--languages names {len(languages)} languages ({','.join(languages)}): give "
                f"one --corpus per language, in that order; got {len(sources)}.")
    return languages, _parallel_list(parallel, languages)


def _inputs(run):
    inputs = dict(run.inputs)
    return inputs.get("languages", ()), inputs.get("corpora", ()), inputs.get("parallel", ())


def language_ids(languages):
    """{language: id}: XLM numbers the languages in sorted order (loader.py
    `check_data_params`: id2lang over sorted(langs); transformers' lang2id alike)."""
    return {name: i for i, name in enumerate(sorted(languages))}


def recipe_config(run):
    """The backbone's language embedding has a row per --languages entry."""
    languages = _inputs(run)[0]
    return {"num_languages": len(languages)} if languages else {}


def tokenizer_text(run):
    """The sentences a run's tokenizer learns its BPE from, each with its language (a
    `corpora.Sample` with `languages`, read by `tokenizers.train_xlm_bpe` with each one's
    Moses rules), or None without --languages (the corpus' own sample).

    XLM's README builds bpe.train from the same number of sentences of each language's
    tokenized corpus (`shuf -r -n 10000000 train.$lg`, after tools/tokenize.sh $lg); here
    a seeded sample of at most `corpora.TOKENIZER_SAMPLE_SENTENCES` / (languages) of each,
    without replacement: a smaller corpus gives all its sentences, none twice.
    """
    languages, sources, _ = _inputs(run)
    if not languages:
        return None
    sample, size = corpora.Sample(), corpora.TOKENIZER_SAMPLE_SENTENCES // len(languages)
    sample.languages = []
    for language, source in zip(languages, sources):
        part = corpora.sample_sentences(source, size=size, seed=run.seed)
        sample.extend(part)
        sample.languages.extend([language] * len(part))
        sample.seen += part.seen
    return sample


def _for_language(tokenizer, language):
    """The run's tokenizer with Moses' rules for `language` (the same BPE and ids); a
    tokenizer without per-language rules as it is."""
    for_language = getattr(tokenizer, "for_language", None)
    return tokenizer if for_language is None else for_language(language)


def _sentences(tokenizer, source):
    """A corpus' sentences as token ids, read and tokenized as tf.data streams them (XLM
    tokenizes line by line; `LINES_PER_CALL` a call, as a call a document was 2-3x slower)."""
    lines = corpora.documents(source).unbatch().batch(LINES_PER_CALL)
    return lines.map(lambda batch: tf.cast(tokenizer(batch), tf.int32)).unbatch()


def _languages(run, tokenizer, documents):
    """{language: its corpus source}, in --languages order: without --languages the one
    corpus, of the tokenizer's language (the run's fingerprint: `part` None)."""
    languages, sources, _ = _inputs(run)
    if languages:
        return dict(zip(languages, sources)), {n: (n, s) for n, s in zip(languages, sources)}
    language = getattr(tokenizer, "language", "en")
    return {language: documents}, {language: None}


def prepared_parts(tokenizer, run):
    """What `keras-ctx prepare` writes (`prepared_ids.Part`): each language's sentences by
    its Moses rules, and each --parallel pair file's pairs, each side by its language's."""
    corpora_of = _languages(run, tokenizer, (_inputs(run)[1] or (None,))[0])[0]
    parts = [prepared_ids.Part(name, source, (_for_language(tokenizer, name),))
             for name, source in corpora_of.items()]
    return parts + [prepared_ids.Part(f"{s}-{t}", path, (_for_language(tokenizer, s),
                                                         _for_language(tokenizer, t)))
                    for s, t, path in _inputs(run)[2]]


def _counted(sentences, tokenizer, language, part):
    """(sentences, tokens, counts per id) of a language's stream, in one streamed pass (an
    id outside the vocabulary refused), or read back where a run kept them for this corpus
    and tokenizer (token_counts.kept_in; `part`: (language, its --corpus source), kept in
    token_counts.LANGUAGE.json, None for the one corpus of a run without --languages), so a
    resumed run does not read its corpora again to count them."""
    size, whose = tokenizer.vocabulary_size(), f"the {language} corpus'"
    why = "XLM's masker weighs a token by its frequency, the sampler a language by its sentences"
    counts, total = token_counts.kept_or_counted(
        lambda: token_counts.counted(sentences, size, (whose, "sentences", why)), tokenizer,
        size, part=part, whose=whose)
    return total, int(counts.sum()), counts


def check_parallel(path):
    """The number of pairs in a pair file, `source<TAB>target` a line (blank lines skipped),
    read line by line; ConfigError naming the first malformed line."""
    pairs = 0
    for number, line, sides in labelled.tab_separated(path):
        if len(sides) != 2 or not sides[0].strip() or not sides[1].strip():
            raise ConfigError(f"{path}:{number}: a parallel line is 'source<TAB>target' "
                              f"(one tab, two non-empty sides); got {line[:60]!r}.")
        pairs += 1
    if not pairs:
        raise ConfigError(f"{path} holds no parallel pairs.")
    return pairs


def pair_ids(path, source_tokenizer, target_tokenizer):
    """A checked pair file's (source ids, target ids), read and tokenized as tf.data
    streams them (blank lines skipped, as `check_parallel`)."""
    lines = tf.data.TextLineDataset(path).map(
        lambda line: tf.strings.regex_replace(line, "\r$", "")).filter(
        lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
    sides = lines.map(lambda line: tf.strings.split(line, "\t")).batch(LINES_PER_CALL)
    return sides.map(lambda sides: (tf.cast(source_tokenizer(sides[:, 0]), tf.int32),
                                    tf.cast(target_tokenizer(sides[:, 1]), tf.int32))).unbatch()


def _stream(sentences, tokens, run, eos, language_id, language):
    if tokens < run.sequence_length:  # each sentence opened by </s>
        raise ConfigError(f"The {language} corpus holds {tokens} tokens, fewer than one stream "
                          f"window of {run.sequence_length}: give it more text.")
    stream = multilingual.text_stream(sentences, run.sequence_length, eos, language_id)
    return stream.shuffle(1024, seed=run.seed).repeat().batch(run.batch_size,
                                                             drop_remainder=True)


def _tlm(data, run, ids, pair):
    eos, pad = ids["sep"], ids["pad"]
    longest = min(multilingual.XLM_MAX_LENGTH, (run.sequence_length - 4) // 2)

    def fits(sources, targets):  # tlm_pairs' filter, counted in one streamed pass
        sizes = tf.stack([sources.row_lengths(), targets.row_lengths()])
        return (tf.reduce_sum(tf.cast(tf.reduce_all((sizes > 0) & (sizes <= longest), 0),
                                      tf.int64)), sources.nrows())

    kept = total = 0
    for fit, rows in data.ragged_batch(LINES_PER_CALL).map(fits).as_numpy_iterator():
        kept, total = kept + int(fit), total + int(rows)
    if not kept:
        raise ConfigError(f"No {pair[0]}-{pair[1]} pair fits a TLM row of "
                          f"{run.sequence_length} tokens (each side 1-{longest} tokens).")
    language = language_ids(_inputs(run)[0])
    examples = multilingual.tlm_pairs(data, run.sequence_length, eos, pad,
                                      language[pair[0]], language[pair[1]], seed=run.seed)
    return examples.shuffle(1024, seed=run.seed).repeat().batch(run.batch_size,
                                                               drop_remainder=True), kept, total


def refuse_pairs_for_clm(parallel, preset):
    """ConfigError (one line) for --parallel pairs given to a CLM run: the paper's TLM is an
    MLM objective (Sec. 3.3; XLM's --mlm_steps 'en-fr'), CLM reads monolingual streams."""
    if parallel:
        raise ConfigError(f"--parallel: {preset} is a CLM model (next-token prediction on "
                          "each language's stream, Lample & Conneau 2019, Sec. 3.2); the "
                          "paper's TLM on pairs is an MLM objective: drop --parallel, or "
                          "pretrain an xlm-mlm-* preset with it.")


def _sampled(languages, shares, run):
    """What the log says of the streams both objectives read."""
    return (f"streams of {run.sequence_length} tokens (the paper's 256, Sec. 5.1 / README "
            f"--bptt 256) in batches of {run.batch_size} (the paper's 64, Sec. 5.1), each "
            f"batch's language drawn with alpha {multilingual.XLM_ALPHA} (Sec. 3.1): "
            + ", ".join(f"{n} {shares[n]:.2f}" for n in languages))


def xlm_dataset(documents, tokenizer, run, objective="mlm"):
    """XLM's batches for `run` (see the module docstring): masked MLM (and TLM) batches, or
    with `objective="clm"` the same language-sampled streams unmasked, for CLM (XLM's
    --clm_steps 'en,fr': every position predicts the next token, trainer.py `clm_step`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"`objective` is one of {', '.join(OBJECTIVES)}, got {objective!r}.")
    languages, sources, parallel = _inputs(run)
    if objective == "clm":
        refuse_pairs_for_clm(parallel, run.preset)
    # one corpus without --languages, of one language: the tokenizer's
    sources, parts = _languages(run, tokenizer, documents)
    languages = tuple(sources)
    ids = tokenizers.special_token_ids(tokenizer)
    number = language_ids(languages)
    size = tokenizer.vocabulary_size()
    data = prepared_ids.data_of(run)
    if data is None:  # each corpus split into Moses words as the pipeline reads it
        read = {name: _for_language(tokenizer, name) for name in languages}
        text = {name: _sentences(read[name], sources[name]) for name in languages}
        counted = {name: _counted(text[name], read[name], name, parts[name])
                   for name in languages}
    else:  # `keras-ctx prepare`'s ids and counts: the same streams, split once
        text = {name: prepared_ids.sentences(data, name) for name in languages}
        counted = {}
        for name in languages:
            total, counts = prepared_ids.counted(data, name, size)
            counted[name] = total, int(counts.sum()), counts
    streams = {name: _stream(text[name], counted[name][0] + counted[name][1], run,
                             ids["sep"], number[name], name) for name in languages}
    # XLM weighs a language by its stream's sentence count (facebookresearch/XLM @cd281d3
    # xlm/utils.py `set_sampling_probs`, called by train.py with --lg_sampling_factor:
    # len(data['mono_stream'][lang]['train']), StreamDataset.__len__ = n_sentences).
    sentences = {name: counted[name][0] for name in languages}
    mlm = multilingual.sample_languages(streams, sentences, multilingual.XLM_ALPHA,
                                        seed=run.seed)
    shares = multilingual.smoothed_probabilities(sentences, multilingual.XLM_ALPHA)
    if objective == "clm":
        say(f"XLM stage CLM on {', '.join(languages)}: {_sampled(languages, shares, run)}; "
            "each token predicts the next, left to right (Sec. 3.2, XLM's --clm_steps '"
            + ",".join(languages) + "').")
        return mlm
    say(f"XLM stage MLM on {', '.join(languages)}: {_sampled(languages, shares, run)}"
        "; 15% of the tokens masked 80/10/10 by weights 1/sqrt(frequency) (Sec. 3.3, "
        "--sample_alpha 0.5).")
    parts = [mlm]
    for pair in parallel:
        pairs = (pair_ids(pair[2], _for_language(tokenizer, pair[0]),
                          _for_language(tokenizer, pair[1])) if data is None
                 else prepared_ids.pairs(data, f"{pair[0]}-{pair[1]}"))
        batches, kept, total = _tlm(pairs, run, ids, pair)
        parts.append(batches)
        say(f"XLM stage TLM on {pair[0]}-{pair[1]}: {kept} of {total} "
            f"pairs of {pair[2]} "
            f"(sides of at most {multilingual.XLM_MAX_LENGTH} tokens, XLM's --max_len), "
            "both directions (the README's en-fr and fr-en).")
    if parallel:
        # XLM's --mlm_steps 'en,fr,en-fr' (README): an MLM update per language, then one
        # TLM update per pair, in turn.
        order = [0] * len(languages) + list(range(1, len(parts)))
        say("XLM alternates them as its README's --mlm_steps '"
            + ",".join(list(languages) + [f"{s}-{t}" for s, t, _ in parallel])
            + f"': {len(languages)} MLM updates, then {len(parallel)} TLM, in turn.")
        choice = tf.data.Dataset.from_tensor_slices(tf.constant(order, tf.int64)).repeat()
        batches = tf.data.Dataset.choose_from_datasets(parts, choice)
    else:
        batches = mlm
    counts = sum(counted[name][2] for name in languages)
    masker = multilingual.xlm_masker(size, ids["mask"], ids["sep"], ids["pad"], counts,
                                     seed=run.seed)
    return masker.apply(batches)


xlm_dataset.check_inputs = check_inputs  # `keras-ctx pretrain --languages/--parallel`
xlm_dataset.tokenizer_text = tokenizer_text  # each language's sentences by its own rules
xlm_dataset.prepared_parts = prepared_parts  # `keras-ctx prepare`'s sentence ids

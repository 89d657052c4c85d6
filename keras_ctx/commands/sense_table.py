"""The main job's closing table: one word, two senses, different vectors.

For each word, sentences of two senses, all drawn from the register of the
built-in corpus (the standard library's docstrings, where these words are
frequent), with the word at the same position in every sentence: position
embeddings then add the same thing to every vector, and only the context
differs.

What is compared (a choice, measured in docs/notes/senses.md): the word's
last-layer vector (`sequence_output`, what `keras-ctx embed` returns) minus
the word's mean vector over its sentences. Raw cosines are all close to 1 (a
small model's 0.98-1.00): every vector of a word shares a large common part,
its own embedding and position and the direction all vectors share
(Ethayarajh 2019, "How contextual are contextualized word representations?").
Removing the mean leaves what each context adds: a model that reads the
context scores pairs within a sense above pairs across senses; one that
ignores it scores both alike. The table gives the
mean cosine within a sense and across senses, and whether every same-sense
pair is above every pair across senses.
"""

import os

import numpy as np

from keras_ctx.commands.embed import TextModel, cosine
from keras_ctx.common.optional import install_command

# {word: {sense: sentences}}; the word is the third token of every sentence.
SENSE_EXAMPLES = {
    "set": {
        "a collection": ["Return a set of the names.", "Build a set of unique keys.",
                         "Create a set of the options."],
        "to assign": ["It will set the value.", "You can set the timeout.",
                      "We then set the flag."],
    },
    "return": {
        "a noun": ["Check the return value.", "Ignore the return code.",
                   "Use the return value."],
        "a verb": ["It will return the value.", "We then return the code.",
                   "You should return the value."],
    },
    "list": {
        "a sequence": ["Return a list of the names.", "Build a list of the files.",
                       "Create a list of the options."],
        "to enumerate": ["It will list the files in the directory.",
                         "We then list the modules.", "You should list the files first."],
    },
    "close": {
        "to shut": ["You must close the file.", "We then close the socket.",
                    "You should close the stream."],
        "near": ["Values are close to zero.", "They are close enough.",
                 "Both are close to one."],
    },
}

HEATMAP = "senses.png"
# The sentences' language, for a model that reads language ids (XLM): their id and rules.
SENSE_LANGUAGE = "en"

# all-MiniLM-L6-v2 (a trained checkpoint, README's tour) on SENSE_EXAMPLES with
# this table's measure: within / across per word, every pair separated
# (measured for docs/notes/senses.md).
TRAINED_REFERENCE = ("all-MiniLM-L6-v2 separates all four words pair by pair: within a "
                     "sense +0.26 to +0.51, across senses -0.50 to -0.67")


def sense_similarities(run_dir, examples=None, model=None):
    """{word: (senses, sentences, raw cosines, context cosines)} for a run.

    Args:
        run_dir: a run directory (`keras-ctx pretrain --out`, `convert`) or any
            handle with a tokenizer (`keras_ctx.handles`); loaded once.
        examples: {word: {sense: sentences}}; defaults to `SENSE_EXAMPLES`.
        model: `run_dir` already loaded (a `keras_ctx.commands.embed.TextModel`).

    Returns:
        For each word: the sense of each sentence, the sentences, the (n, n)
        cosines of the word's vectors, and the (n, n) cosines after removing
        the word's mean vector over its sentences (what the context adds).
    """
    model = model or TextModel(run_dir)
    # A model that names its languages reads the sentences as English; one that names none
    # (every family but XLM's) takes no language.
    read = {} if getattr(model, "languages", None) is None else {"language": SENSE_LANGUAGE}
    result = {}
    for word, by_sense in (examples or SENSE_EXAMPLES).items():
        senses = [sense for sense, texts in by_sense.items() for _ in texts]
        texts = [text for group in by_sense.values() for text in group]
        vectors = model.word_vectors(texts, word, **read)
        context = vectors - vectors.mean(0)
        n = len(texts)
        raw = np.array([[cosine(vectors[i], vectors[j]) for j in range(n)] for i in range(n)])
        added = np.array([[cosine(context[i], context[j]) for j in range(n)] for i in range(n)])
        result[word] = (senses, texts, raw, added)
    return result


def within_and_across(senses, similarities):
    """(mean same-sense, mean other-sense) similarity over pairs i < j."""
    same, other = _pairs(senses, similarities)
    return float(np.mean(same)), float(np.mean(other))


def _pairs(senses, similarities):
    same, other = [], []
    for i in range(len(senses)):
        for j in range(i + 1, len(senses)):
            (same if senses[i] == senses[j] else other).append(similarities[i, j])
    return same, other


def separation(senses, similarities):
    """(lowest same-sense, highest other-sense) similarity over pairs i < j."""
    same, other = _pairs(senses, similarities)
    return min(same), max(other)


def model_name(handle, info):
    """The model as the table and the heatmap name it: a pretrained run's preset and
    steps, else (a converted run records its source's path) its handle's last part."""
    name = info.get("model")
    if not name or "/" in name or os.sep in name:
        name = os.path.basename(os.path.normpath(str(handle)))
    steps = info.get("steps")
    return f"{name} after {steps:,} training steps" if steps else name


def write_heatmap(table, path, model="the model"):
    """Draws each word's context-cosine matrix into one PNG (atomically).

    Rows and columns are the sentences numbered as `show_sense_table` prints them;
    the title names `model` (`model_name`).

    Returns:
        The path, or None when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from keras_ctx.common.files import replacing

    columns = min(2, len(table))
    rows = -(-len(table) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 5.6 * rows),
                                squeeze=False, gridspec_kw={"hspace": 0.45})  # room for ticks
    for ax in axes.flat[len(table):]:
        ax.axis("off")
    for ax, (word, (senses, texts, _, added)) in zip(axes.flat, table.items()):
        image = ax.imshow(added, vmin=-1, vmax=1, cmap="RdBu_r")
        labels = [f"{k + 1}. {sense}" for k, sense in enumerate(senses)]
        ax.set_xticks(range(len(texts)), labels, rotation=90, fontsize=8)
        ax.set_yticks(range(len(texts)), labels, fontsize=8)
        border = senses.index(senses[-1]) - 0.5  # between the two senses
        ax.axhline(border, color="black", linewidth=1)
        ax.axvline(border, color="black", linewidth=1)
        for i in range(len(texts)):
            for j in range(len(texts)):
                ax.text(j, i, f"{added[i, j]:+.2f}", ha="center", va="center", fontsize=7)
        within, across = within_and_across(senses, added)
        low, high = separation(senses, added)
        ax.set_title(f"'{word}': within a sense {within:+.2f}, across {across:+.2f}"
                     + (" (every pair apart)" if low > high else ""), fontsize=10)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6,
                    label="cosine of what the context adds")
    figure.suptitle(f"{model}: one word, two senses (cosines of the last-layer vectors "
                    "minus the word's mean vector)")
    with replacing(path, overwrite=True) as staging:
        figure.savefig(staging, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def show_sense_table(run_dir, model=None):
    """Prints the sense table of a run and writes it as `senses.png` into the run.

    `model`: the run already loaded (a `keras_ctx.commands.embed.TextModel`; pretrain
    passes the one it trained), else it is read from `run_dir`.

    Returns:
        The table (`sense_similarities`), or None for a model that names its languages
        without English (the sentences' language).
    """
    loaded = model or TextModel(run_dir)
    name = model_name(run_dir, loaded.info)
    languages = getattr(loaded, "languages", None)
    if languages is not None and SENSE_LANGUAGE not in languages:
        print(f"\nNo sense table: its sentences are English, and {name} reads "
              f"{', '.join(languages)}.")
        return None
    table = sense_similarities(run_dir, model=loaded)
    print(f"\nOne word, different contexts: does {name} tell a word's senses apart?\n"
          "Cosine of what each context adds to the word's last-layer vector (the word's mean "
          "over its\nsentences removed, Ethayarajh 2019): a model that reads the context "
          "scores higher\nwithin a sense than across senses; one that ignores it, the same.")
    print(f"  {'word':10s} {'within a sense':>14s} {'across senses':>14s}   every pair apart")
    apart = on_average = 0
    for word, (senses, texts, raw, added) in table.items():
        within, across = within_and_across(senses, added)
        low, high = separation(senses, added)
        apart += low > high
        on_average += within > across
        verdict = "yes" if low > high else ("no, on average only" if within > across else "no")
        print(f"  {word!r:10s} {within:>+14.2f} {across:>+14.2f}   {verdict}")
    for word, (senses, texts, *_) in table.items():
        for sense in dict.fromkeys(senses):  # numbered as the heatmap's rows
            quoted = " | ".join(f"{k + 1}. {t}" for k, (t, s) in enumerate(zip(texts, senses))
                                if s == sense)
            print(f"    {word!r} {sense}: {quoted}")
    raw_pairs = np.concatenate([r[np.triu_indices(len(r), 1)] for *_, r, _ in table.values()])
    print(f"Senses apart: {apart} of {len(table)} words pair by pair, {on_average} of "
          f"{len(table)} on average. Raw cosines (before removing the mean) lie in "
          f"{raw_pairs.min():.3f}...{raw_pairs.max():.3f}; static word embeddings would give "
          "1.000 for every pair.")
    if apart < len(table):
        print(f"For comparison, the trained {TRAINED_REFERENCE} (README's tour: convert it, "
              "then `show_sense_table(RUN_DIR)` from keras_ctx.commands.sense_table).")
    path = write_heatmap(table, os.path.join(run_dir, HEATMAP), name)
    if path:
        print(f"Heatmap: {path}")
    else:
        print(f"No heatmap: matplotlib is not installed ({install_command('plot')}, in the "
              "keras_ctx clone).")
    return table

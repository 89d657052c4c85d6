"""The main job's closing table: one word, two senses, different vectors.

For each word, sentences of two senses, all drawn from the register of the
built-in corpus (the standard library's docstrings, where these words are
frequent), with the word at the same position in every sentence: position
embeddings then add the same thing to every vector, and only the context
differs. A small model's raw cosines are all close to 1 (its vectors share a
large common part: the word's own embedding and its position; Ethayarajh 2019,
"How contextual are contextualized word representations?"), so the table
compares what the context adds: each vector minus the word's mean vector over
its sentences, then cosine. A word is separated when every same-sense pair is
more similar than every pair across senses.
"""

import os

import numpy as np

from keras_ctx.commands.embed import cosine, word_vectors

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


def sense_similarities(run_dir, examples=None):
    """{word: (senses, sentences, raw cosines, context cosines)} for a run.

    Args:
        run_dir: a run directory (`keras-ctx pretrain --out`, `convert`).
        examples: {word: {sense: sentences}}; defaults to `SENSE_EXAMPLES`.

    Returns:
        For each word: the sense of each sentence, the sentences, the (n, n)
        cosines of the word's vectors, and the (n, n) cosines after removing
        the word's mean vector over its sentences (what the context adds).
    """
    result = {}
    for word, by_sense in (examples or SENSE_EXAMPLES).items():
        senses = [sense for sense, texts in by_sense.items() for _ in texts]
        texts = [text for group in by_sense.values() for text in group]
        vectors = word_vectors(run_dir, texts, word)
        context = vectors - vectors.mean(0)
        n = len(texts)
        raw = np.array([[cosine(vectors[i], vectors[j]) for j in range(n)] for i in range(n)])
        added = np.array([[cosine(context[i], context[j]) for j in range(n)] for i in range(n)])
        result[word] = (senses, texts, raw, added)
    return result


def separation(senses, similarities):
    """(lowest same-sense, highest other-sense) similarity over pairs i < j."""
    same, other = [], []
    for i in range(len(senses)):
        for j in range(i + 1, len(senses)):
            (same if senses[i] == senses[j] else other).append(similarities[i, j])
    return min(same), max(other)


def write_heatmap(table, path):
    """Draws each word's context-cosine matrix into one PNG (atomically).

    Returns:
        The path, or None when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from keras_ctx.files import replacing

    columns = min(2, len(table))
    rows = -(-len(table) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 5.6 * rows),
                                squeeze=False)
    for ax in axes.flat[len(table):]:
        ax.axis("off")
    for ax, (word, (senses, texts, _, added)) in zip(axes.flat, table.items()):
        image = ax.imshow(added, vmin=-1, vmax=1, cmap="RdBu_r")
        labels = [f"{sense} {k + 1}" for k, sense in enumerate(senses)]
        ax.set_xticks(range(len(texts)), labels, rotation=90, fontsize=8)
        ax.set_yticks(range(len(texts)), labels, fontsize=8)
        border = senses.index(senses[-1]) - 0.5  # between the two senses
        ax.axhline(border, color="black", linewidth=1)
        ax.axvline(border, color="black", linewidth=1)
        for i in range(len(texts)):
            for j in range(len(texts)):
                ax.text(j, i, f"{added[i, j]:+.2f}", ha="center", va="center", fontsize=7)
        low, high = separation(senses, added)
        ax.set_title(f"'{word}': same sense >= {low:+.2f}, other sense <= {high:+.2f}",
                     fontsize=10)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6,
                    label="cosine of what the context adds")
    figure.suptitle("One word, two senses: contextual vectors minus the word's mean vector")
    with replacing(path, overwrite=True) as staging:
        figure.savefig(staging, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def show_sense_table(run_dir):
    """Prints the sense table of a run and writes it as `senses.png` into the run.

    Returns:
        The table (`sense_similarities`).
    """
    table = sense_similarities(run_dir)
    print("\nThe same word, different contexts: similarity of what the context adds to its "
          "vector\n(cosine after removing the word's mean vector over these sentences; the "
          "word is the\nthird token of each, so only the context differs):")
    for word, (senses, texts, raw, added) in table.items():
        low, high = separation(senses, added)
        verdict = "senses separated" if low > high else "senses NOT separated"
        print(f"  {word!r}: same sense {low:+.2f} or more, other sense {high:+.2f} or less: "
              f"{verdict}")
        for sense in dict.fromkeys(senses):
            group = [i for i, s in enumerate(senses) if s == sense]
            others = [i for i, s in enumerate(senses) if s != sense]
            same = np.mean([added[i, j] for i in group for j in group if i < j])
            other = np.mean([added[i, j] for i in group for j in others])
            quoted = " | ".join(texts[i] for i in group)
            print(f"    {sense:13s} mean {same:+.2f} within, {other:+.2f} across: {quoted}")
    raw_pairs = np.concatenate([r[np.triu_indices(len(r), 1)] for *_, r, _ in table.values()])
    print(f"Raw cosines (before removing the mean) lie in {raw_pairs.min():.3f}..."
          f"{raw_pairs.max():.3f}; static word embeddings would give 1.000 for every pair.")
    path = write_heatmap(table, os.path.join(run_dir, HEATMAP))
    if path:
        print(f"Heatmap: {path}")
    else:
        print('No heatmap: matplotlib is not installed (pip install "keras-ctx[plot]").')
    return table

"""A small synthetic English corpus with a topic per document, made on the spot.

For the example scripts and their fast mode: text that is learnable in CPU
seconds, in BERT's file format, with a label (the topic) for fine-tuning.
A sentence is "SUBJECT ACTION and CONNECTIVE ACTION." with the subject and
both actions from one topic (cooking or sailing); a document is 3-6
sentences of one topic.

    >>> path = synthetic_text.write_corpus("corpus.txt", documents=400)
    >>> texts, labels = synthetic_text.labelled_sentences(512)
"""

import numpy as np

TOPICS = ("cooking", "sailing")
SUBJECTS = {
    "cooking": ("the cook", "a chef", "my aunt", "the baker"),
    "sailing": ("the captain", "a sailor", "the crew", "my uncle"),
}
ACTIONS = {
    "cooking": ("stirs the soup", "bakes fresh bread", "slices onions", "tastes the sauce",
                "heats the oven", "adds some salt"),
    "sailing": ("raises the sail", "checks the wind", "ties the rope", "steers the boat",
                "reads the chart", "drops the anchor"),
}
CONNECTIVES = ("then", "after that", "later", "next", "slowly")


def sentence(rng, topic):
    """One sentence about `topic` ("cooking" or "sailing"), drawn with `rng`."""
    subject = rng.choice(SUBJECTS[topic])
    first, second = rng.choice(ACTIONS[topic], size=2, replace=False)
    return f"{subject} {first} and {rng.choice(CONNECTIVES)} {second}."


def documents(count, seed=0):
    """`count` documents, each a list of 3-6 sentences of one topic."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        topic = rng.choice(TOPICS)
        out.append([sentence(rng, topic) for _ in range(int(rng.integers(3, 7)))])
    return out


def write_corpus(path, documents_count=400, seed=0):
    """Writes `documents(documents_count, seed)` to `path` in BERT's format; returns `path`.

    One sentence per line, a blank line after each document (what
    `keras_ctx.data.corpora.documents` reads).
    """
    with open(path, "w", encoding="utf-8") as f:
        for document in documents(documents_count, seed):
            f.write("\n".join(document) + "\n\n")
    return path


def labelled_sentences(count, seed=1):
    """(texts, labels): `count` sentences and their topic's index in TOPICS."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(TOPICS), size=count)
    return [sentence(rng, TOPICS[label]) for label in labels], labels

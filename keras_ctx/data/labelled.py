"""Labelled text for fine-tuning: a TSV of text<TAB>label, read strictly.

Every line is exactly two tab-separated fields (text, then label), labels
are stripped of surrounding blanks and may not be empty, and there are at
least two classes. A header line is taken as one when `header=True`, or,
with `header=None` (auto), when its label is a usual column name ("label",
"class", ...). A first-line label seen nowhere else is ambiguous (a header,
or a rare class?) and raises, asking for the explicit choice. A label that
reads as a number with a fraction (0.5, 3.7) is refused: it is a regression
target, and each distinct one would become a class. Errors name the file and
the line.
"""

import math

from keras_ctx.common.errors import DataError

HEADER_LABELS = ("label", "labels", "class", "category", "target", "y", "sentiment")


def fractional(label):
    """Whether `label` reads as a number that is not a whole one ("0.5", "3.7", "1e-3",
    "nan", "inf"): a regression target, not a class name."""
    try:
        value = float(label)
    except ValueError:
        return False
    return not math.isfinite(value) or value != int(value)


def _refuse_scores(path, rows):
    """Refuses labels that read as scores: every distinct label would become a class."""
    for number, _, label in rows:
        if fractional(label):
            raise DataError(
                f"{path}:{number}: the label {label!r} is a number with a fraction (a "
                "regression target?); fine-tuning trains a classifier, one class per distinct "
                "label: give class names or whole-number class ids (e.g. bin the scores).")


def tab_separated(path):
    """(line number, line, its tab-separated fields) of each non-blank line of the UTF-8
    file `path`, read line by line, its line end removed."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield number, line, line.split("\t")


def read_labelled_tsv(path, header=None):
    """(texts, labels) of a TSV of text<TAB>label.

    Args:
        path: the TSV file (UTF-8).
        header: True if the first line is a header, False if not, None to
            detect it.
    """
    rows = []
    for number, _, fields in tab_separated(path):
        if len(fields) != 2:
            raise DataError(f"{path}:{number}: expected exactly 2 tab-separated fields "
                            f"(text<TAB>label), got {len(fields)}.")
        text, label = fields[0].strip(), fields[1].strip()
        if not text or not label:
            raise DataError(f"{path}:{number}: the {'text' if not text else 'label'} "
                            "is empty.")
        rows.append((number, text, label))
    _refuse_scores(path, rows)  # before the checks a column of scores would trip
    texts, labels = {r[1] for r in rows}, {r[2] for r in rows}
    if len(rows) >= 4 and len(texts) < len(labels):
        raise DataError(f"{path}: {len(labels)} distinct labels but only {len(texts)} "
                        "distinct texts: are the columns swapped? Expected text<TAB>label.")
    if rows and header is None:
        first = rows[0][2]
        if first.lower() in HEADER_LABELS:
            header = True
        elif sum(label == first for _, _, label in rows) == 1 and len(rows) > 2:
            raise DataError(
                f"{path}:{rows[0][0]}: the label {first!r} occurs on no other line: if this "
                "line is a header pass --header, else --no-header.")
    if header and rows:
        rows = rows[1:]
    if not rows:
        raise DataError(f"{path} has no examples.")
    texts = [text for _, text, _ in rows]
    labels = [label for _, _, label in rows]
    classes = set(labels)
    if len(classes) < 2:
        raise DataError(f"{path}: every example has the label {labels[0]!r}; a classifier "
                        "needs at least two classes.")
    return texts, labels

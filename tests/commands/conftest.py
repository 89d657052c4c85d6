"""Fixtures the command tests share: XLM's two tiny languages."""

import numpy as np
import pytest

EN = "the cat sat on a mat and dog ran to park while birds sang in old trees".split()
FR = ("le chat assis sur un tapis et chien couru au parc pendant oiseaux chantaient dans "
      "vieux arbres").split()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """(en.txt, fr.txt, en-fr.tsv): word-for-word "translations" of random sentences."""
    root = tmp_path_factory.mktemp("xlm")
    rng = np.random.default_rng(0)
    paths = root / "en.txt", root / "fr.txt", root / "en-fr.tsv"
    with open(paths[0], "w") as en, open(paths[1], "w") as fr, open(paths[2], "w") as pairs:
        for _ in range(30):
            for _ in range(4):
                words = rng.integers(0, len(EN), size=int(rng.integers(5, 9)))
                other = rng.integers(0, len(FR), size=int(rng.integers(5, 9)))
                en.write(" ".join(EN[i] for i in words) + " .\n")
                fr.write(" ".join(FR[i] for i in other) + " .\n")
                pairs.write(" ".join(EN[i] for i in words) + " .\t"
                            + " ".join(FR[i] for i in words) + " .\n")
            en.write("\n")
            fr.write("\n")
    return tuple(map(str, paths))

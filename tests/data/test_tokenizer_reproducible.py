"""Each family's tokenizer trainer learns the same vocabulary in every process.

Two runs of one command with one seed must build the same model: a resumed
run is compared with an uninterrupted one. Hugging Face's WordPieceTrainer
and an end-of-word suffix number their `##x` / `x</w>` symbols in hash order,
which changes which of two equally frequent merges wins in each process.
"""

import json
import os
import subprocess
import sys

import pytest

from keras_ctx import families

SCRIPT = """
import hashlib, json, sys
from keras_ctx import families
lines = [line.strip() for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
out = {}
for name in sys.argv[2:]:
    tokenizer = families.get(name).train_tokenizer(lines, 300)
    vocabulary = (tokenizer.get_vocabulary() if hasattr(tokenizer, "get_vocabulary")
                  else list(tokenizer))
    out[name] = hashlib.sha256("\\n".join(map(str, vocabulary)).encode()).hexdigest()
print("VOCABULARIES " + json.dumps(out))
"""
pytestmark = pytest.mark.backend_neutral(
    "tokenizer trainers (Hugging Face tokenizers, keras-hub over tf.data) in two processes")
TRAINED = sorted(n for n in families.names() if families.get(n).train_tokenizer is not None)


@pytest.fixture(scope="module")
def vocabularies(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    words = ["bank", "river", "money", "loan", "water", "ducks", "swim", "interest"]
    with open(corpus, "w", encoding="utf-8") as handle:
        for i in range(300):  # many equally frequent pairs: ties everywhere
            handle.write(f"the {words[i % 8]} by the {words[(i * 3) % 8]} {i % 17} Ok.\n")
    env = dict(os.environ, PYTHONHASHSEED="random")
    runs = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", SCRIPT, str(corpus), *TRAINED],
                                env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        line = [l for l in result.stdout.splitlines() if l.startswith("VOCABULARIES ")][-1]
        runs.append(json.loads(line.split(" ", 1)[1]))
    return runs


@pytest.mark.parametrize("family", TRAINED)
def test_a_tokenizer_is_the_same_in_two_processes(family, vocabularies):
    first, second = vocabularies
    assert first[family] == second[family], family

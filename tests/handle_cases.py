"""A tiny Hugging Face BERT checkpoint with its vocab.txt, and the sequence output that
tells two backbones' weights apart, for the handle tests (tests/handles/test_handles.py) and the
text tasks built from handles (tests/tasks/test_text_presets.py)."""

import os

import keras
import numpy as np

from tests.convert.head_checkpoints import BERT, bert_mlm_tensors
from tests.convert.hf_checkpoints import write_checkpoint

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(25)]
INPUTS = {"token_ids": np.array([[2, 7, 11, 29, 3]], "int32"),
          "padding_mask": np.ones((1, 5), "int32"), "segment_ids": np.zeros((1, 5), "int32")}


def tiny_bert(directory, seed=7):
    """Writes a one-layer BERT checkpoint and its vocab.txt to `directory`; returns it."""
    write_checkpoint(directory, BERT, bert_mlm_tensors(seed))
    with open(os.path.join(directory, "vocab.txt"), "w") as handle:
        handle.write("\n".join(VOCAB) + "\n")
    return str(directory)


def sequence(backbone):
    """The backbone's sequence output on `INPUTS` (numpy)."""
    return keras.ops.convert_to_numpy(backbone(INPUTS)["sequence_output"])

"""GPT-3's examples against its paper and GPT-2's released encoder (issue 54).

Brown et al. 2020 release no data pipeline; Sec. 2.1-2.3 and Appendix B: GPT-2's byte-level
BPE, documents joined by `<|endoftext|>` and packed into full 2,048-token sequences,
with no mask across the document boundary. The GPT-3 family's recipe must read text with
the family's byte-level BPE exactly as openai/gpt-2's encoder (src/encoder.py @1b8a018,
`gpt2_encoder_reference.py`) reads whole documents, and cut that stream into full chunks.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_ctx import registry
from keras_ctx.data import corpora, pipelines
from keras_ctx.models import presets
from tests.data.gpt2_encoder_reference import Encoder

pytestmark = pytest.mark.tensorflow_only(
    "the examples are tf.data, the same TensorFlow ops whatever the Keras backend")

HANDMADE = [["The ship's crew sailed 3,000 miles.", "They didn't stop: café au lait!"],
            ["Naïve résumés aren't read.", "  Two  spaces and\ttabs."],
            ["One sentence only, with ‘quotes’ – dashes…"]]


def _gpt3_tokenizer_and_reference(documents, vocabulary_size):
    family = registry.get("gpt3")
    tokenizer = family.train_tokenizer([s for d in documents for s in d], vocabulary_size)
    merges = [tuple(m.split(" ")) for m in tokenizer.merges]
    return family, tokenizer, Encoder(dict(tokenizer.vocabulary), merges)


def _released_stream(encoder, documents, end):
    return [i for d in documents for i in encoder.encode(" ".join(d)) + [encoder.encoder[end]]]


def _documents_dataset(documents):
    return tf.data.Dataset.from_generator(lambda: iter(documents),
                                          output_signature=tf.TensorSpec([None], tf.string))


@pytest.mark.slow  # ~10 s on 2 cores, as GPT-2's (test_gpt2_stream.py): the BPE's training
def test_gpt3_stream_is_the_released_encoders_on_whole_documents():
    family, tokenizer, encoder = _gpt3_tokenizer_and_reference(HANDMADE, 300)
    end = family.dataset.options["end_token"]
    ours = [int(i) for doc in pipelines.token_documents(
        _documents_dataset(HANDMADE), tokenizer, tokenizer.token_to_id(end))
        for i in doc.numpy()]
    assert ours == _released_stream(encoder, HANDMADE, end)
    assert family.dataset.builder is pipelines.causal_lm_dataset  # full chunks of the stream


def test_gpt3_records_papers_context_and_reads_gpt2s_vocabulary():
    for name, preset in registry.get("gpt3").presets.items():
        assert presets.pretraining(name).sequence_length == 2048  # Sec. 2.1, n_ctx
        assert preset.config["max_sequence_length"] == 2048
        assert preset.config["vocabulary_size"] == 50257  # GPT-2's BPE (Sec. 2.1)


@pytest.mark.slow  # the built-in corpus (7,303 documents) through both encoders (~60 s)
def test_gpt3_builtin_stream_equals_the_released_encoders_at_2048():
    documents = corpora.builtin_documents()
    family, tokenizer, encoder = _gpt3_tokenizer_and_reference(documents, 8000)
    end = family.dataset.options["end_token"]
    ours = [int(i) for doc in pipelines.token_documents(
        _documents_dataset(documents), tokenizer, tokenizer.token_to_id(end))
        for i in doc.numpy()]
    released = _released_stream(encoder, documents, end)
    assert ours == released
    stream = np.asarray(released)
    chunks = stream[:len(stream) // 2048 * 2048].reshape(-1, 2048)
    ends = chunks == encoder.encoder[end]
    # Measured 2026-11-30 (docs/notes/data-references.md, "GPT-3"): the numbers of the note.
    assert len(stream) == pytest.approx(304_186, rel=1e-3)
    assert len(chunks) == len(stream) // 2048
    assert len(chunks) == pytest.approx(148, abs=1) and ends.sum(axis=1).min() > 0
    assert ends.sum(axis=1).mean() == pytest.approx(49.1, rel=0.01)

"""XLM's CLM models generate (Lample & Conneau 2019, Sec. 3.2): the family's decoder
(`keras_ctx.models.xlm.decoder`, the registry's `decoder`) runs the converted checkpoint
one token at a time with a key/value cache, its PredLayer bias and the rows' language.
The tokens are those of a greedy loop over the whole model's logits, the loop XLM's own
`TransformerModel.generate` runs (xlm/model/transformer.py @cd281d3: the last position's
scores, positions 0.., one language id a row); on transformers' XLMWithLMHeadModel too."""

import warnings

import numpy as np
import pytest
from keras import ops

from keras_ctx import generation, handles, run_files
from keras_ctx.convert.formats import convert
from keras_ctx.convert.heads import masked_lm_from_huggingface
from keras_ctx.data import tokenizers
from keras_ctx.models import XLMBackbone
from keras_ctx.pretraining import CausalLMPretrainer
from keras_ctx.tasks.text import CausalLM
from tests.cli_helpers import cli_output, one_line_error
from tests.convert.hf_checkpoints import write_checkpoint
from tests.convert.xlm_checkpoints import XLM, transformers_clm, xlm_tensors
from tests.data.xlm_vocabulary import LINES, write_xlm_vocabulary
from tests.execution import few_calls

CAUSAL = dict(XLM, causal=True, n_langs=2, dropout=0.0, attention_dropout=0.0)
PROMPT = np.array([[5, 6, 7], [8, 9, 0]])  # right-padded: the second row is two tokens
PROMPT_MASK = PROMPT > 0
LENGTH = 10


@pytest.fixture(scope="module")
def clm(tmp_path_factory):
    """The tiny CLM checkpoint's pretrainer: backbone and PredLayer (a non-zero bias)."""
    tensors = xlm_tensors(CAUSAL)
    tensors["pred_layer.proj.weight"] = tensors["transformer.embeddings.weight"].copy()
    directory = write_checkpoint(tmp_path_factory.mktemp("xlm") / "clm", CAUSAL, tensors)
    backbone, head = masked_lm_from_huggingface(directory)
    return CausalLMPretrainer(backbone, output_bias=True, lm_head=head)


def _greedy_loop(logits_of, prompt, mask, length):
    """Greedy decoding by re-reading every row whole: each row's next token is the argmax
    at its last token, appended (`logits_of(ids, language)` -> (batch, time, vocab))."""
    rows = [list(row[m]) for row, m in zip(prompt, mask)]
    for row in rows:
        while len(row) < length:
            row.append(int(np.argmax(logits_of(np.array([row]))[0, -1])))
    return np.array(rows)


def _model_logits(model, language):
    forward = few_calls(lambda ids: model({
        "token_ids": ids, "padding_mask": ops.ones_like(ids),
        "position_ids": ops.arange(ids.shape[1])[None], "language_ids":
        ops.full(ops.shape(ids), language, "int32")}))
    return lambda ids: ops.convert_to_numpy(forward(ops.convert_to_tensor(ids, "int32")))


def test_greedy_tokens_with_and_without_cache_are_the_whole_models_loop(clm):
    decoder = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=1)
    want = _greedy_loop(_model_logits(clm, 1), PROMPT, PROMPT_MASK, LENGTH)
    for use_cache in (True, False):
        out = clm.generate(PROMPT, PROMPT_MASK, max_length=LENGTH, language_id=1,
                           use_cache=use_cache, jit_compile=False)
        np.testing.assert_array_equal(ops.convert_to_numpy(out["token_ids"]), want)
    # The language and the bias are read: the other language, or no bias, differ.
    first = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=0)
    hidden_of = [ops.convert_to_numpy(d.call_with_cache(PROMPT, d.build_cache(2, 3), 0)[0])
                 for d in (decoder, first)]
    assert np.abs(hidden_of[0] - hidden_of[1]).min() > 1e-4
    no_bias = generation.causal_decoder(clm.backbone, language_id=1)
    hidden = np.random.default_rng(0).normal(size=(1, 1, 16)).astype("float32")
    bias = ops.convert_to_numpy(decoder.logits(hidden) - no_bias.logits(hidden))[0, 0]
    np.testing.assert_allclose(bias, ops.convert_to_numpy(clm.lm_head.output_bias), atol=1e-5)


@pytest.mark.parametrize("sampler", ["top_k", "top_p", "random", "beam"])
def test_samplers_draw_the_same_tokens_with_the_cache_as_without(clm, sampler):
    decoder = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=1)
    cached, full = (ops.convert_to_numpy(generation.generate(
        decoder, PROMPT, PROMPT_MASK, max_length=LENGTH, sampler=sampler, seed=7,
        use_cache=use_cache, jit_compile=False)["token_ids"]) for use_cache in (True, False))
    np.testing.assert_array_equal(cached, full)
    np.testing.assert_array_equal(cached[PROMPT_MASK.nonzero()], PROMPT[PROMPT_MASK])


def test_streamed_tokens_are_generates(clm):
    decoder = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=1)
    streamed = list(generation.stream(decoder, PROMPT[:1], max_length=6, sampler="top_k",
                                      seed=3))
    out = generation.generate(decoder, PROMPT[:1], max_length=6, sampler="top_k", seed=3)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["token_ids"])[0, 3:], streamed)


def test_an_mlm_model_or_an_unknown_language_is_refused_in_one_line():
    mlm = XLMBackbone(40, 1, 2, 16, 64, num_languages=2)
    with pytest.raises(ValueError, match="CLM models"):
        generation.generate(mlm, PROMPT, max_length=LENGTH)
    clm = XLMBackbone(40, 1, 2, 16, 64, num_languages=2, causal=True)
    with pytest.raises(ValueError, match="language id 2 is not one of"):
        generation.causal_decoder(clm, language_id=2)
    other = XLMBackbone(40, 1, 2, 16, 64, num_languages=2, causal=True)
    with pytest.raises(ValueError, match="lm_head reads another token table"):
        generation.causal_decoder(clm, CausalLMPretrainer(other, output_bias=True).lm_head)


def _prefill_logits(decoder):
    """The decoder's next-token scores at every prompt position (one cached pass)."""
    hidden, _ = decoder.call_with_cache(PROMPT, decoder.build_cache(2, PROMPT.shape[1]), 0)
    return ops.convert_to_numpy(ops.cast(decoder.logits(hidden), "float32"))


@pytest.mark.parametrize("precision", [
    "bfloat16", pytest.param("int8", marks=pytest.mark.slow)])  # int8: 3 s of CPU (quantize)
def test_int8_and_bfloat16_decoding_read_the_copied_table_and_keep_the_bias(clm, precision):
    """for_decoding of XLM's decoder copies its backbone and reads the PredLayer from the
    copy's table (was: refused, and a head given with the copy was refused as another
    table's; a copy alone decoded with a zero bias)."""
    decoder = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=1)
    fast = generation.for_decoding(decoder, precision)
    assert fast.backbone is not clm.backbone and fast.language_id == 1
    assert fast.lm_head.token_embedding is fast.backbone.token_embedding
    assert decoder.lm_head.token_embedding is clm.backbone.token_embedding  # left as it was
    if precision == "int8":
        assert fast.backbone.token_embedding.quantization_mode == "int8"
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(fast.lm_head.output_bias,
                                                             "float32")),
                               ops.convert_to_numpy(clm.lm_head.output_bias), rtol=1e-2)
    # The float decoder's scores (the whole model's: the first test) against the copy's,
    # within the precision's error.
    want, got = _prefill_logits(decoder), _prefill_logits(fast)
    scale = np.abs(want).max()
    assert 0 < np.abs(got - want).max() < 0.03 * scale, (np.abs(got - want).max(), scale)


@pytest.mark.slow  # ~9 s of CPU: a quantized copy, two decode loops traced
def test_int8_greedy_tokens_are_the_float_decoders(clm):
    decoder = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=1)
    tokens = [ops.convert_to_numpy(generation.generate(
        d, PROMPT, PROMPT_MASK, max_length=LENGTH, jit_compile=False)["token_ids"])
        for d in (decoder, generation.for_decoding(decoder, "int8"))]
    np.testing.assert_array_equal(tokens[1], tokens[0])
    np.testing.assert_array_equal(tokens[0], _greedy_loop(_model_logits(clm, 1), PROMPT,
                                                          PROMPT_MASK, LENGTH))


@pytest.mark.slow  # ~12 s of CPU: the decode loop traced into a SavedModel, then loaded
@pytest.mark.tensorflow_only("serve_generate is exported from TensorFlow only")
def test_the_exported_signature_generates_the_decoders_tokens(clm, tmp_path):
    """serve_generate decodes with the family's decoder (its PredLayer bias, its language):
    the in-process tokens (was: refused, serve_generate read only a backbone's own
    cache)."""
    import tensorflow as tf

    from keras_ctx.export import ExportError, Generation, export_saved_model

    decoder = generation.causal_decoder(clm.backbone, clm.lm_head, language_id=1)
    # In process: the whole model's greedy loop (the first test).
    want = ops.convert_to_numpy(generation.generate(
        decoder, PROMPT, PROMPT_MASK, max_length=LENGTH, jit_compile=False)["token_ids"])
    path = export_saved_model(clm.backbone, tmp_path / "m", generation=Generation(
        LENGTH, decoder=decoder))
    served = tf.saved_model.load(path).signatures["serve_generate"](
        token_ids=tf.constant(PROMPT, tf.int32),
        padding_mask=tf.constant(PROMPT_MASK, tf.int32))
    np.testing.assert_array_equal(served["token_ids"].numpy(), want)
    other = XLMBackbone(40, 1, 2, 16, 64, num_languages=2, causal=True)
    with pytest.raises(ExportError, match="decodes another backbone than the one exported"):
        export_saved_model(other, tmp_path / "o", generation=Generation(LENGTH,
                                                                        decoder=decoder))
    mlm = XLMBackbone(40, 1, 2, 16, 64, num_languages=2)
    with pytest.raises(ExportError, match="is not a language model"):
        export_saved_model(mlm, tmp_path / "o", generation=Generation(LENGTH))
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # transformers and torch imported: ~15 s on 2 busy cores
def test_greedy_tokens_equal_transformers_xlm_with_lm_head(tmp_path):
    torch = pytest.importorskip("torch")
    reference = transformers_clm(tmp_path / "hf", lang_id=1)  # generate's langs: 1
    backbone, head = masked_lm_from_huggingface(str(tmp_path / "hf"))
    decoder = generation.causal_decoder(backbone, head, language_id=1)

    def reference_logits(ids, extra=()):
        ids = torch.cat([torch.tensor(ids)] + [torch.full((len(ids), 1), t) for t in extra], 1)
        with torch.no_grad():
            return reference(input_ids=ids, langs=torch.full_like(ids, 1)).logits.numpy()

    want = _greedy_loop(reference_logits, PROMPT, PROMPT_MASK, LENGTH)
    got = generation.generate(decoder, PROMPT, PROMPT_MASK, max_length=LENGTH)
    np.testing.assert_array_equal(ops.convert_to_numpy(got["token_ids"]), want)
    # transformers' own XLMWithLMHeadModel.generate is not this loop: its
    # prepare_inputs_for_generation appends reference.config.mask_token_id to the row and reads
    # the scores there (the MLM models' way), a token XLM's CLM never trained on (and
    # with its cache it reads the appended token's keys, not the chosen one's, later on).
    with torch.no_grad():
        theirs = reference.generate(torch.tensor(PROMPT[:1]), max_length=LENGTH,
                                    do_sample=False, num_beams=1, use_cache=False).numpy()
    masked = _greedy_loop(lambda ids: reference_logits(ids, [reference.config.mask_token_id]),
                          PROMPT[:1], PROMPT_MASK[:1], LENGTH)
    np.testing.assert_array_equal(theirs, masked)
    assert (masked != want[:1]).any()


# ----------------------------------------------------------------- the text task and the CLI

PROMPT_TEXT = "l'économie"


@pytest.fixture(scope="module")
def enfr(tmp_path_factory):
    """(backbone, PredLayer, tokenizer, directory) of a tiny en-fr CLM checkpoint with its lang2id and
    tokenizer files, as transformers' XLMWithLMHeadModel directories hold them."""
    tokenizer = tokenizers.train_xlm_bpe(LINES, 120)
    config = dict(CAUSAL, vocab_size=tokenizer.vocabulary_size(), lang2id={"en": 0, "fr": 1},
                  id2lang={"0": "en", "1": "fr"})
    tensors = xlm_tensors(config)
    tensors["pred_layer.proj.weight"] = tensors["transformer.embeddings.weight"].copy()
    directory = write_checkpoint(tmp_path_factory.mktemp("xlm") / "enfr", config, tensors)
    write_xlm_vocabulary(tokenizer, directory)
    backbone, head = masked_lm_from_huggingface(directory)
    return backbone, head, handles.resolve(directory, need_tokenizer=True).tokenizer, directory


def test_a_causal_lm_task_decodes_in_its_language_and_keeps_the_bias(enfr, tmp_path):
    backbone, head, tokenizer, directory = enfr
    assert backbone.languages == ("en", "fr")
    with pytest.raises(ValueError, match="give the text's language with --language"):
        CausalLM(backbone, tokenizer, sequence_length=20, lm_head=head)
    with pytest.warns(UserWarning, match="a new one, its bias zero; pass lm_head="):
        fresh = CausalLM(backbone, tokenizer, sequence_length=20, language="en")
    assert fresh.decoder.language_id == 0
    assert not ops.convert_to_numpy(fresh.decoder.lm_head.output_bias).any()
    task = CausalLM(backbone, tokenizer, sequence_length=20, lm_head=head, language="fr")
    # French's id where it decodes and where it trains, and the checkpoint's PredLayer.
    assert task.decoder.language_id == 1 and task.decoder.lm_head is head
    assert (np.asarray(task.preprocessor(np.array([PROMPT_TEXT]))["language_ids"]) == 1).all()
    # A prompt opens with </s> as each sentence of XLM's CLM streams does; the next ends it.
    eos = tokenizer.token_to_id("</s>")
    ids, mask = task.generate_ids([PROMPT_TEXT])
    assert ids.shape == (1, 20) and ids[0, 0] == eos and task.stop_ids == (eos,)
    assert ids[0, 0] not in task._prompts([PROMPT_TEXT])[0][0, 1:]
    # Saved with its language and the checkpoint's bias; `keras-ctx generate` keeps them.
    task.save(tmp_path / "lm")
    saved = CausalLM.load(tmp_path / "lm").decoder
    assert saved.language_id == 1 and np.abs(ops.convert_to_numpy(head.output_bias)).max() > 0
    np.testing.assert_array_equal(ops.convert_to_numpy(saved.lm_head.output_bias),
                                  ops.convert_to_numpy(head.output_bias))
    code, output = cli_output(["generate", str(tmp_path / "lm"), "the bank", "--language",
                               "en"])
    assert code != 0 and "saved for language 'fr'" in one_line_error(output), output[-500:]


def test_a_converted_run_keeps_the_checkpoints_pred_layer(enfr, tmp_path):
    """keras-ctx convert keeps the checkpoint's output bias with the run, so the run decodes
    as the checkpoint does (was: a zero-bias PredLayer and a warning)."""
    backbone, head, tokenizer, directory = enfr
    convert(directory, tmp_path / "run")
    want = ops.convert_to_numpy(head.output_bias)
    assert np.abs(want).max() > 0
    np.testing.assert_array_equal(run_files.load_head_weights(tmp_path / "run")[0], want)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = CausalLM.from_run(tmp_path / "run", language="fr")
    assert not [w for w in caught if "bias zero" in str(w.message)], caught
    np.testing.assert_array_equal(ops.convert_to_numpy(task.decoder.lm_head.output_bias), want)


@pytest.mark.slow  # ~15 s: a task's export traced, loaded and served
@pytest.mark.tensorflow_only("serve_generate is exported from TensorFlow only")
def test_a_causal_lm_exports_its_decoder_and_refuses_python_text_signatures(enfr, tmp_path):
    import tensorflow as tf

    backbone, head, tokenizer, directory = enfr
    task = CausalLM(backbone, tokenizer, sequence_length=20, lm_head=head, language="fr")
    # XLM's Moses rules run in Python: a loaded serve_generate_text would fail.
    with pytest.raises(ValueError, match="runs Python .* with_text=False"):
        task.export(str(tmp_path / "text"))
    assert not (tmp_path / "text").exists()
    path = task.export(str(tmp_path / "ids"), max_length=12, with_text=False)
    want, want_mask = task.generate_ids([PROMPT_TEXT], max_length=12, jit_compile=False)
    ids, mask = task._prompts([PROMPT_TEXT])
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) >= {"serving_default", "serve_generate"}
    assert not {"serve_text", "serve_generate_text"} & set(loaded.signatures)
    served = loaded.signatures["serve_generate"](token_ids=tf.constant(ids),
                                                 padding_mask=tf.constant(mask, tf.int32))
    np.testing.assert_array_equal(served["token_ids"].numpy(), want)
    np.testing.assert_array_equal(served["padding_mask"].numpy(), want_mask.astype(int))


@pytest.mark.slow  # ~10 s: a task generates, then the CLI from the task and the checkpoint
def test_keras_ctx_generate_writes_the_tasks_text_from_it_or_the_checkpoint(enfr, tmp_path):
    backbone, head, tokenizer, directory = enfr
    task = CausalLM(backbone, tokenizer, sequence_length=20, lm_head=head, language="fr")
    text = task.generate(PROMPT_TEXT)
    assert text and text != CausalLM(backbone, tokenizer, sequence_length=20,
                                      language="fr").generate(PROMPT_TEXT)  # the bias counts
    task.save(tmp_path / "lm")
    for model, flags in ((tmp_path / "lm", []), (directory, ["--language", "fr",
                                                             "--max-length", "20"])):
        code, output = cli_output(["generate", str(model), PROMPT_TEXT, *flags])
        assert code == 0 and output.strip().endswith(text), output[-500:]

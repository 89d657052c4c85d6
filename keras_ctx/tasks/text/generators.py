"""Text generation: decoder-only (CausalLM) and encoder-decoder (Seq2SeqLM) tasks.

Both read prompts as strings and return text; what stops generation and which
tokens never show comes from the family's framing (`keras_ctx.families`).
"""

import os
import warnings

import keras
import numpy as np
from keras_ctx.common import validation
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx import generation, handles, runs
from keras_ctx import registry  # lookups only: keras_ctx.families registers
from keras_ctx.preprocessing import token_id
from keras_ctx.tasks.language_model import LanguageModel
from keras_ctx.tasks.text.task import (TASK_FILE, TASKS, TextTask, family_of, read_task_info,
                                       registered, strings)


def _token_ids(tokenizer, spellings):
    ids = [token_id(tokenizer, s) for s in spellings]
    return tuple(i for i in ids if i is not None)


class _Generator(TextTask):
    """Shared by CausalLM and Seq2SeqLM: stop tokens, detokenizing, streaming."""

    encoder_decoder = False  # True: prompts are source texts, the decoder starts empty

    @classmethod
    def _restore(cls, model, tokenizer, info):
        task = super()._restore(model, tokenizer, info)
        task.decoder = getattr(model, "decoder", None) or task.backbone
        task._setup_generation()
        return task

    def compile(self, optimizer="adam", loss=None, weighted_metrics=(), **kwargs):
        """`keras.Model.compile` with next-token cross-entropy on the logits by default."""
        loss = loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return self.model.compile(optimizer=optimizer, loss=loss,
                                  weighted_metrics=list(weighted_metrics), **kwargs)

    def _setup_generation(self):
        pre = self.preprocessor
        self.stop_ids = _token_ids(self.tokenizer, self.family.framing.stop)
        # Framing tokens never show in the text returned.
        self._special = set(pre.start_ids + pre.middle_ids + pre.end_ids
                            + pre.decoder_start_ids + list(self.stop_ids) + [pre.pad_id])

    def detokenize(self, ids):
        """Generated ids -> text, framing and stop tokens left out.

        Ids past the tokenizer's vocabulary (the family's `extra_tokens`, T5's
        sentinels) have no text and are left out too.
        """
        size = self.tokenizer.vocabulary_size()
        ids = [int(i) for i in ids if int(i) not in self._special and int(i) < size]
        if not ids:
            return ""
        text = self.tokenizer.detokenize(ids)
        if isinstance(text, (tf.Tensor, np.ndarray)):
            text = np.asarray(text).item()
        return text.decode("utf-8") if isinstance(text, bytes) else str(text)

    def generate(self, prompts, max_length=None, sampler="greedy", seed=0, **kwargs):
        """Text(s) in, generated text(s) out.

        Args:
            prompts: a string or a list of strings.
            max_length: the most tokens of a row (CausalLM: prompt included;
                Seq2SeqLM: of the decoder's output); default sequence_length.
            sampler: "greedy", "top_k", "top_p", "random", "beam" or a Sampler.
            seed: the random samplers' seed.
            **kwargs: the rest of `keras_ctx.generation.generate` (use_cache,
                jit_compile, ...).

        Returns:
            A string for a string, a list of strings for a list.
        """
        single = isinstance(prompts, str)
        ids, mask = self.generate_ids(strings(prompts, "prompts"), max_length, sampler, seed,
                                      **kwargs)
        texts = [self.detokenize(row[m]) for row, m in zip(ids, mask)]
        return texts[0] if single else texts

    def export(self, directory, max_length=None, sampler="greedy", version=1,
               overwrite=False, jit_compile=False, with_text=True):
        """Exports a SavedModel that generates, for TF Serving; returns its version path.

        Signatures (keras_ctx.export): `serving_default` (the backbone's
        forward pass), `serve_text`, `serve_generate` (prompt ids -> generated
        ids, the decode loop in the graph, core TensorFlow ops only) and
        `serve_generate_text` (prompt strings -> generated strings, as
        `generate` returns them; needs the tokenizer's ops, as `serve_text`).
        Random samplers take a `seed` input: the same seed gives
        `generate(..., seed=seed)`'s tokens.

        Args:
            directory: the model's base directory (TF Serving watches it).
            max_length: as `generate` (default sequence_length); fixed in
                the export.
            sampler: as `generate`, fixed in the export.
            version, overwrite, jit_compile: as `export_saved_model`.
            with_text: add the string signatures (`serve_text`,
                `serve_generate_text`); False: ids in and out only, for a tokenizer that
                runs Python (XLM's Moses rules), which a SavedModel cannot hold.

        Returns:
            The path of the written version directory.
        """
        from keras_ctx.export import Generation, export_saved_model

        if with_text and not getattr(self.tokenizer, "in_graph", True):
            raise ValueError(f"{type(self.tokenizer).__name__} runs Python (tf.py_function), "
                             "which a SavedModel cannot hold: its text signatures would fail "
                             "once loaded. Export with with_text=False (serve_generate takes "
                             "and returns ids).")
        decoding = Generation(
            self.max_length(max_length), sampler,
            end_token_id=list(self.stop_ids) or None, pad_token_id=self.preprocessor.pad_id,
            decoder_start_token_id=(self.preprocessor.decoder_start_ids[0]
                                    if self.encoder_decoder else None),
            text=GenerationText(self) if with_text else None,
            decoder=None if self.encoder_decoder else self.decoder)
        return export_saved_model(self.backbone, directory, version=version,
                                  overwrite=overwrite,
                                  preprocessor=self.preprocessor if with_text else None,
                                  sequence_length=self.sequence_length,
                                  jit_compile=jit_compile, generation=decoding)

    def generate_stream(self, prompt, max_length=None, sampler="greedy", seed=0):
        """Yields the text of one prompt in chunks as its tokens are decoded.

        The tokens are `generate`'s (same sampler and seed;
        `keras_ctx.generation.stream`); each chunk is the text the newest
        token adds, held back while a byte-level BPE character is still
        incomplete, so "".join(chunks) == generate(prompt, ...).
        """
        if not isinstance(prompt, str):
            raise TypeError(f"`generate_stream` takes one prompt string, got "
                            f"{type(prompt).__name__}; loop over a list.")
        prefix, tokens = self._stream(prompt, max_length, sampler, seed)
        ids, shown = list(prefix), ""
        for token in tokens:
            ids.append(token)
            text = self.detokenize(ids)
            if text.endswith("\ufffd") or not text.startswith(shown):
                continue  # an incomplete character: wait for its next byte
            if len(text) > len(shown):
                yield text[len(shown):]
                shown = text
        text = self.detokenize(ids)
        if text != shown:
            yield text[len(shown):] if text.startswith(shown) else text


class GenerationText(keras.layers.Layer):
    """The text codec of an exported language model (`serve_generate_text`), in the graph.

    `encode` turns prompts into the ids `generate` reads (a CausalLM's
    prompt pieces, right-padded; a Seq2SeqLM's framed source); `decode`
    turns generated rows into text as `detokenize` does (framing, stop,
    padding and out-of-vocabulary ids left out). Not saved with the model:
    `export` builds it from the task.

    Args:
        task: a CausalLM or Seq2SeqLM.
    """

    def __init__(self, task, **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = task.tokenizer
        self.text_preprocessor = task.preprocessor
        self.encoder_decoder = task.encoder_decoder
        self.special_ids = sorted(task._special)
        self.tokenizer_size = int(task.tokenizer.vocabulary_size())
        self.built = True

    def encode(self, text):
        pre = self.text_preprocessor
        if self.encoder_decoder:
            inputs = pre(text)
            return {"encoder_token_ids": inputs["encoder_token_ids"],
                    "encoder_padding_mask": inputs["encoder_padding_mask"]}
        pieces = pre._tokenize(text)
        return {"token_ids": pieces.to_tensor(pre.pad_id),
                "padding_mask": tf.sequence_mask(pieces.row_lengths(), dtype=tf.int32)}

    def decode(self, token_ids, padding_mask):
        ids = tf.cast(token_ids, tf.int32)
        special = tf.reduce_any(ids[..., None] == tf.constant(self.special_ids, tf.int32),
                                axis=-1)
        keep = tf.cast(padding_mask, tf.bool) & ~special & (ids < self.tokenizer_size)
        text = self.tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))
        return tf.reshape(text, [-1])


@registered
class CausalLM(_Generator):
    """A decoder-only language model (GPT, GPT-2) that reads and writes text.

    `fit(texts)` trains next-token prediction (the loss over real tokens);
    `generate("prompt")` returns the prompt and its continuation, up to the
    family's stop token (GPT-2's <|endoftext|>) or max_length.

    Args:
        backbone: a decoder backbone of a registered family (its `logits`
            ties the output to the token embedding), or a causal backbone its family
            decodes (`Family.decoder`: XLM's CLM models, with XLM's PredLayer).
        tokenizer: its tokenizer.
        sequence_length: the training length and the default max_length.
        family, truncation: as `TextClassifier`.
        lm_head: a family decoder's output layer to start from (XLM: the PredLayer
            `masked_lm_from_huggingface` reads, its bias); None: a new one.
        language: the text's language code, for a model of several (XLM's CLM: the
            prompts' and the generated text's language id and Moses rules).

    Example:
    >>> lm = CausalLM.from_run("runs/gpt2")
    >>> lm.generate("The bank", max_length=20, sampler="top_k")
    """

    def __init__(self, backbone, tokenizer, sequence_length=128, family=None,
                 truncation="error", lm_head=None, language=None):
        family = family_of(backbone, family)
        own = hasattr(backbone, "call_with_cache")
        if family.inputs != "tokens" or family.framing is None or not (own or family.decoder):
            raise ValueError(f"CausalLM needs a decoder-only backbone; {family.name} is "
                             "not one (use Seq2SeqLM for encoder-decoders).")
        super().__init__(None, tokenizer, family, sequence_length, truncation,
                         backbone=backbone, language=language)
        language_id = None if own else self.preprocessor.language_id
        if not own and lm_head is None:  # a run keeps the backbone, not the pretrainer's head
            warnings.warn(f"{family.name}'s output layer is not the backbone's: this CausalLM "
                          "decodes with a new one, its bias zero; pass lm_head= (the "
                          "CausalLMPretrainer's, or masked_lm_from_huggingface's) to decode "
                          "with the trained one.", stacklevel=2)
        self.decoder = generation.causal_decoder(backbone, lm_head, language_id)
        self.model = LanguageModel(backbone, "sequence_output", language_id=language_id,
                                   decoder=None if own else self.decoder, name="causal_lm")
        self._setup_generation()

    @classmethod
    def from_run(cls, run_dir, sequence_length=None, **kwargs):
        """The task over a run directory: its backbone and tokenizer and, for a family
        decoder (XLM's CLM), the output head its pretraining kept (`runs.HEAD_FILE`)."""
        info, backbone, tokenizer = runs.load_run(run_dir, need_tokenizer=True)
        backbone.family = info["family"]
        family, kept = registry.get(info["family"]), runs.load_head_weights(run_dir)
        if family.decoder is not None and kept is not None and "lm_head" not in kwargs:
            from keras_ctx.pretraining.kept_head import restore_head

            kwargs["lm_head"] = family.decoder(backbone, None, None).lm_head
            restore_head(kwargs["lm_head"], kept, backbone.hidden_size, run_dir)
        return cls(backbone, tokenizer, sequence_length=(
            info["sequence_length"] if sequence_length is None else sequence_length),
            family=info["family"], **kwargs)

    def _settings(self):
        language = self.preprocessor.language
        return {} if language is None else {"language": language}

    def _targets(self, inputs, y):
        return _next_tokens(inputs["token_ids"], inputs["padding_mask"])

    def _dataset(self, x, y=None, batch_size=32):
        if y is not None:
            raise ValueError("CausalLM learns from texts alone (next-token targets); pass "
                             "no y.")
        if isinstance(x, tf.data.Dataset):
            return super()._dataset(x.map(lambda text: (text, text)), None, batch_size)
        texts = self._text_columns(x)
        return super()._dataset(tf.data.Dataset.from_tensor_slices((texts, texts)).batch(
            batch_size), None, batch_size)

    def predict(self, x, batch_size=32, **kwargs):
        """Next-token logits (batch, sequence_length, vocabulary) for texts."""
        batch_size = validation.positive_int("batch_size", batch_size)
        kwargs.setdefault("verbose", 0)
        texts = self._text_columns(x)
        dataset = tf.data.Dataset.from_tensor_slices(texts).batch(batch_size).map(
            lambda text: (self._inputs(text),))
        return self.model.predict(dataset, **kwargs)

    def _prompt_row(self, prompt):
        opening = list(_token_ids(self.tokenizer, self.family.framing.prompt_start))
        return opening + np.asarray(self.preprocessor._tokenize(tf.constant([prompt]))[0]
                                    ).tolist()

    def _prompts(self, prompts):
        rows = [self._prompt_row(p) for p in prompts]
        if any(not row for row in rows):
            raise ValueError("A prompt is empty: generation needs at least one token.")
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.preprocessor.pad_id, "int32")
        mask = np.zeros((len(rows), width), bool)
        for i, row in enumerate(rows):
            ids[i, :len(row)], mask[i, :len(row)] = row, True
        return ids, mask

    def _stream(self, prompt, max_length, sampler, seed):
        ids, _ = self._prompts([prompt])
        return ids[0].tolist(), generation.stream(
            self.decoder, ids, max_length=self.max_length(max_length),
            sampler=sampler, end_token_id=self.stop_ids or None,
            pad_token_id=self.preprocessor.pad_id, seed=seed)

    def generate_ids(self, prompts, max_length=None, sampler="greedy", seed=0, **kwargs):
        """(token_ids, padding_mask) numpy arrays of the prompts and their continuations."""
        ids, mask = self._prompts(prompts)
        out = generation.generate(self.decoder, ids, mask,
                                  max_length=self.max_length(max_length),
                                  sampler=sampler, end_token_id=self.stop_ids or None,
                                  pad_token_id=self.preprocessor.pad_id, seed=seed, **kwargs)
        return np.asarray(out["token_ids"]), np.asarray(out["padding_mask"])


@registered
class Seq2SeqLM(_Generator):
    """An encoder-decoder (T5, BART) that maps texts to texts.

    `fit(sources, targets)` trains the decoder on the target (teacher forcing,
    the family's decoder start token first, its end token last);
    `generate("source")` returns the decoded target text.

    Args:
        backbone: an encoder-decoder backbone of a registered family.
        tokenizer: its tokenizer.
        sequence_length: the encoder and training decoder length; the default
            max_length of `generate`.
        family, truncation: as `TextClassifier`.
    """

    encoder_decoder = True

    def __init__(self, backbone, tokenizer, sequence_length=128, family=None,
                 truncation="error", language=None):
        family = family_of(backbone, family)
        if family.inputs != "encoder_decoder":
            raise ValueError(f"Seq2SeqLM needs an encoder-decoder backbone; {family.name} "
                             "is not one (use CausalLM for decoder-only families).")
        model = LanguageModel(backbone, "decoder_sequence_output", name="seq2seq_lm")
        super().__init__(model, tokenizer, family, sequence_length, truncation,
                         backbone=backbone, language=language)  # a language is refused
        self._setup_generation()

    def _inputs(self, text):
        source = self.preprocessor(text[0] if isinstance(text, (tuple, list)) else text)
        inputs = {"encoder_token_ids": source["encoder_token_ids"],
                  "encoder_padding_mask": source["encoder_padding_mask"]}
        if isinstance(text, (tuple, list)):
            target = self.preprocessor(text[1])
            inputs["decoder_token_ids"] = target["decoder_token_ids"]
            inputs["decoder_padding_mask"] = target["decoder_padding_mask"]
            # The framed target is what the decoder learns to write.
            inputs["_target"] = target["encoder_token_ids"]
            inputs["_target_mask"] = target["encoder_padding_mask"]
        else:
            start = tf.fill([tf.shape(source["encoder_token_ids"])[0], 1],
                            tf.constant(self.preprocessor.decoder_start_ids[0]))
            inputs["decoder_token_ids"] = start
            inputs["decoder_padding_mask"] = tf.ones_like(start)
        return inputs

    def _targets(self, inputs, y):
        target, mask = inputs.pop("_target"), inputs.pop("_target_mask")
        return target, tf.cast(mask, tf.float32)

    def _dataset(self, x, y=None, batch_size=32):
        if isinstance(x, tf.data.Dataset):
            dataset = x.map(lambda source, target: ((source, target), target))
            return super()._dataset(dataset, None, batch_size)
        if y is None:
            raise ValueError("Seq2SeqLM trains on (sources, targets): pass y, the target "
                             "texts.")
        sources, targets = self._text_columns(x), self._text_columns(y)
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets.")
        dataset = tf.data.Dataset.from_tensor_slices(((sources, targets), targets))
        return super()._dataset(dataset.batch(batch_size), None, batch_size)

    def predict(self, x, batch_size=32, **kwargs):
        raise TypeError("Seq2SeqLM.predict is not defined on texts: use generate(texts).")

    def _encoder(self, sources):
        inputs = self.preprocessor(np.asarray(sources, object).astype(str))
        return (np.asarray(inputs["encoder_token_ids"]),
                np.asarray(inputs["encoder_padding_mask"]))

    def _stream(self, source, max_length, sampler, seed):
        ids, mask = self._encoder([source])
        start = self.preprocessor.decoder_start_ids[0]
        return [start], generation.stream(
            self.backbone, [[start]], max_length=self.max_length(max_length),
            sampler=sampler, end_token_id=self.stop_ids or None,
            pad_token_id=self.preprocessor.pad_id, seed=seed, encoder_token_ids=ids,
            encoder_padding_mask=mask)

    def generate_ids(self, sources, max_length=None, sampler="greedy", seed=0, **kwargs):
        """(decoder token_ids, padding_mask) numpy arrays for the source texts."""
        ids, mask = self._encoder(sources)
        out = generation.generate_seq2seq(
            self.backbone, ids, mask, max_length=self.max_length(max_length),
            decoder_start_token_id=self.preprocessor.decoder_start_ids[0], sampler=sampler,
            end_token_id=self.stop_ids or None, pad_token_id=self.preprocessor.pad_id,
            seed=seed, **kwargs)
        return np.asarray(out["token_ids"]), np.asarray(out["padding_mask"])


def _next_tokens(token_ids, padding_mask):
    """Targets and weights of next-token prediction: position t predicts t + 1."""
    targets = tf.concat([token_ids[:, 1:], tf.zeros_like(token_ids[:, :1])], axis=1)
    mask = tf.cast(padding_mask, tf.float32)
    weights = tf.concat([mask[:, 1:], tf.zeros_like(mask[:, :1])], axis=1)
    return targets, weights


def language_model(handle, sequence_length=None, language=None):
    """The CausalLM or Seq2SeqLM of a run directory, a saved text task or a checkpoint.

    Which one comes from the family's registry entry (encoder-decoders read
    a source text, the others continue a prompt). A checkpoint (a local directory,
    hf://, kaggle://; `keras_ctx.handles`) brings the output layer its family decodes
    with where it is not the backbone's (XLM's PredLayer, its bias); a run keeps the
    backbone only. `language`: the text's language code, for a model of several (XLM's
    CLM); a saved task keeps its own.
    """
    handle = os.fspath(handle)
    task_file = os.path.join(handle, TASK_FILE)
    if os.path.isfile(task_file):
        info = read_task_info(handle)
        name, saved = info["task"], info["settings"].get("language")
        if name not in ("CausalLM", "Seq2SeqLM"):
            raise ValueError(f"{handle} holds a {name}, which does not generate text.")
        if language is not None and language != saved:
            raise ValueError(f"{handle} is a {name} saved for language {saved!r}: leave "
                             f"--language {language} out, or save a task for it.")
        return TASKS[name].load(handle)
    remote = handle.startswith((handles.HF_SCHEME, handles.KAGGLE_SCHEME))
    if runs.is_run(handle) or not (remote or os.path.isdir(handle)):
        info = runs.read_info(handle)  # says what an unfinished run or a wrong path lacks
        family = registry.get(info["family"])
        cls = Seq2SeqLM if family.inputs == "encoder_decoder" else CausalLM
        return cls.from_run(handle, sequence_length=sequence_length, language=language)
    resolved = handles.resolve(handle, head=True, need_tokenizer=True)
    family = registry.get(resolved.info["family"])
    length = resolved.info["sequence_length"] if sequence_length is None else sequence_length
    if family.inputs == "encoder_decoder":
        return Seq2SeqLM(resolved.backbone, resolved.tokenizer, length, family,
                         language=language)
    return CausalLM(resolved.backbone, resolved.tokenizer, length, family, language=language,
                    lm_head=resolved.head if family.decoder else None)

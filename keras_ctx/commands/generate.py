"""`keras-ctx generate`: text from a prompt with a run or a saved text task."""

from keras_ctx.tasks.text import language_model


def generate(model, prompt, stream=False, max_length=None, sampler="greedy", seed=0,
             language=None):
    """Prints (and returns) the text `model` generates from `prompt`.

    Args:
        model: a run directory or a saved CausalLM / Seq2SeqLM directory.
        prompt: the prompt (encoder-decoders: the source text).
        stream: print the text piece by piece as it is decoded.
        max_length: most tokens (None: the run's sequence length).
        sampler: "greedy", "random", "top_k" or "top_p".
        seed: the sampler's seed.
        language: the prompt's language code, for a model of several (XLM's CLM:
            the language id the text is read and written with, and its Moses rules).

    Returns:
        The generated text.
    """
    from keras_ctx.common import validation

    validation.check_args(max_length=max_length, seed=seed)
    model = language_model(model, language=language)
    if stream:
        chunks = []
        for chunk in model.generate_stream(prompt, max_length=max_length, sampler=sampler,
                                           seed=seed):
            chunks.append(chunk)
            print(chunk, end="", flush=True)
        print()
        return "".join(chunks)
    text = model.generate(prompt, max_length=max_length, sampler=sampler, seed=seed)
    print(text)
    return text

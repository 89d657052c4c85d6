"""MAD-X's adapter stack in a fine-tuned classifier: stages 2 and 3 (Pfeiffer et al. 2020).

Stage 2, `keras-ctx finetune --task-adapter --language-adapter FILE`: a task adapter
stacked on the source language's adapter (`with_task_adapter`, `save_task_adapter`).
Stage 3, `keras-ctx export FINETUNED OUT --language-adapter OTHER`: the target language's
adapter replaces the source's under the task adapter (`with_language_adapter`). Stage 1
is `keras_ctx.commands.adapter`.
"""

import os

from keras_ctx import peft
from keras_ctx.common import files, validation
from keras_ctx.common.errors import ConfigError
from keras_ctx.common.progress import say
from keras_ctx.layers.adapters import ADAPTER_CONFIGS

LANGUAGE_ADAPTER_FILE = "language_adapter.safetensors"  # what stage 1 saves in its --out
TASK_ADAPTER_FILE = "task_adapter.safetensors"
ADAPTERS_FILE = "adapters.json"  # in a finetune --out: the classifier's adapter stack
TASK_ADAPTER = "task"  # the task adapter's name in a fine-tuned classifier

# MAD-X's adapters train at 1e-4: AdapterHub's language-adapter command (adapter-hub/adapters
# docs/training.md @88f18eb, `--learning_rate 1e-4`); the paper's text was not at hand here.
LEARNING_RATE = 1e-4
TASK_REDUCTION_FACTOR = ADAPTER_CONFIGS["madx_task"]["reduction_factor"]
# A task adapter's passes and batch: AdapterHub's task-adapter command (adapter-hub/adapters
# docs/training.md @88f18eb, "Train a Task Adapter": `--num_train_epochs 10.0
# --per_device_train_batch_size 32`, at `--max_seq_length 128`, the length a converted
# checkpoint's run records).
TASK_EPOCHS = 10
TASK_BATCH_SIZE = 32


def adapter_optimizer(learning_rate, steps):
    """The optimizer AdapterHub's scripts train MAD-X's adapters with (both stages): Hugging
    Face Trainer's defaults, which neither released command changes but for the rate
    (adapter-hub/adapter-transformers @6303b5a, src/transformers/training_args.py and
    trainer.py's create_optimizer_and_scheduler).

    AdamW without weight decay, epsilon 1e-8, betas 0.9 / 0.999, the gradients clipped to
    a global norm of 1.0 (clip_grad_norm_ over every parameter), and no warm-up: the rate
    falls linearly from `learning_rate` at the first update to 0 after `steps`
    (get_linear_schedule_with_warmup), eta_t = eta (1 - t / steps). Keras' own AdamW would
    decay every weight by 0.004 at epsilon 1e-7 and a constant rate, unclipped.
    """
    import keras

    from keras_ctx.optimizers import bert_adamw

    # Trainer's warmup_steps 0: keras_ctx's WarmupThenDecay warms up for at least one step,
    # Keras' PolynomialDecay of power 1 is the linear decay alone.
    schedule = keras.optimizers.schedules.PolynomialDecay(
        learning_rate, validation.positive_int("steps", steps), end_learning_rate=0.0,
        power=1.0)
    return bert_adamw(schedule,
                      weight_decay=0.0,  # TrainingArguments.weight_decay
                      beta_1=0.9, beta_2=0.999,  # adam_beta1, adam_beta2
                      epsilon=1e-8,  # adam_epsilon
                      global_clipnorm=1.0)  # max_grad_norm


def check_adapter_file(path, flag="--language-adapter"):
    """Refuses in one line a path that is not an existing keras_ctx adapter file."""
    validation.check_given(**{flag.lstrip("-").replace("-", "_"): path})
    if not os.path.isfile(path):
        raise ConfigError(f"{flag} {path}: no such file; give a .safetensors file that "
                          "`keras-ctx adapter-language` saved (DIR/"
                          f"{LANGUAGE_ADAPTER_FILE}).")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(os.fspath(path), framework="numpy") as handle:
            kind = (handle.metadata() or {}).get("format")
    except (SafetensorError, OSError) as error:
        raise ConfigError(f"{flag} {path} is not a safetensors file ({error}); give one "
                          "that `keras-ctx adapter-language` saved.") from None
    if kind != peft.FORMAT:
        raise ConfigError(f"{flag} {path} holds no keras_ctx adapter (format {kind!r}); "
                          "give one that `keras-ctx adapter-language` saved.")


def check_task_flags(task_adapter, language_adapter):
    """`finetune`'s adapter flags, checked before anything loads."""
    validation.boolean("task_adapter", task_adapter)
    if language_adapter is not None:
        if not task_adapter:
            raise ConfigError("--language-adapter stacks a task adapter on the language "
                              "adapter (MAD-X): add --task-adapter.")
        check_adapter_file(language_adapter)


def with_task_adapter(model, backbone, language_adapter=None,
                      reduction_factor=TASK_REDUCTION_FACTOR):
    """Stage 2's model: the language adapter at `language_adapter` loaded into `backbone`
    (frozen), a task adapter stacked on it, and every weight of `model` frozen but the
    task adapter's and the head's (the layers of `model` around `backbone`).

    Returns the adapter stack ({"language_adapter": its name or None, "task_adapter"}).
    """
    language = None
    if language_adapter is not None:
        try:  # refuses an adapter made for another backbone, before anything trains
            language = peft.load_adapter(backbone, language_adapter)
        except ValueError as error:
            raise ConfigError(f"--language-adapter {language_adapter}: {error}") from None
    try:
        peft.add_adapter(backbone, TASK_ADAPTER, "madx_task", reduction_factor=reduction_factor)
    except ValueError as error:
        raise ConfigError(f"--task-adapter: {error}") from None
    head = [layer for layer in model.layers if layer is not backbone]
    trained = peft.train_only(model, adapters=[TASK_ADAPTER], keep=head)
    say(f"Training the task adapter and the head ({trained:,} parameters)"
        + (f", stacked on the frozen {language!r} language adapter." if language else "."))
    return {"language_adapter": language, "task_adapter": TASK_ADAPTER}


def save_task_adapter(model, out, stack, overwrite):
    """Stage 2's files beside classifier.keras: the task adapter alone and the stack."""
    peft.save_adapter(model, TASK_ADAPTER, os.path.join(out, TASK_ADAPTER_FILE),
                      overwrite=overwrite)
    files.write_json(os.path.join(out, ADAPTERS_FILE), stack)


def with_language_adapter(classifier, directory, path):
    """Stage 3: `classifier` (fine-tuned into `directory` with --language-adapter) with the
    language adapter at `path` in place of the one it was trained on."""
    check_adapter_file(path)
    record = os.path.join(directory, ADAPTERS_FILE)
    stack = files.read_json(record, "a fine-tuned classifier's adapters") if os.path.isfile(
        record) else {}
    if not stack.get("language_adapter"):
        raise ConfigError(f"--language-adapter: {directory} was not fine-tuned on a language "
                          "adapter (`keras-ctx finetune --task-adapter --language-adapter "
                          "FILE`), so it has none to replace.")
    try:
        name = peft.replace_adapter(classifier, stack["language_adapter"], path)
    except ValueError as error:
        raise ConfigError(f"--language-adapter {path}: {error}") from None
    say(f"The {name!r} language adapter replaces {stack['language_adapter']!r} under the task "
        "adapter.")
    return classifier

"""The text tasks' base: an id-level Keras model with the family's preprocessor, and its files.

A saved task is one directory (written beside and renamed into place):

    DIR/task.json     which task, its family, sequence length and settings
    DIR/model.keras   the id-level Keras model (weights and config)
    DIR/tokenizer/    the tokenizer (as in a run directory)
"""

import os
import warnings

import numpy as np
from keras_ctx.common.optional import tensorflow as tf

from keras_ctx import handles, registry, runs
from keras_ctx.common import files, keras_files, validation
from keras_ctx.preprocessing import TextPreprocessor

TASK_FILE = "task.json"
MODEL_FILE = "model.keras"
# What `load` reads from task.json, with the types and ranges it needs.
TASK_SCHEMA = {"task": (str, None, True), "family": (str, None, True),
               "sequence_length": (int, 1, True), "truncation": (str, None, True),
               "settings": (dict, None, True)}

# Task class name -> class, for `TextTask.load` (task.json names the class).
TASKS = {}
# Old name -> new name of the text tasks renamed so that no two task classes share a
# name (keras_ctx/tasks/__init__.py says why). The old names stay one release: as
# deprecated aliases (`deprecated_names`) and in TASKS, for directories saved with them.
RENAMED = {"TokenClassifier": "WordClassifier", "SpanQuestionAnswerer": "QuestionAnswerer"}


def registered(cls):
    """Class decorator: files a text task under its name, and any name it had before
    (`RENAMED`), for `TextTask.load`."""
    for name, new in [(cls.__name__, cls.__name__), *RENAMED.items()]:
        if new == cls.__name__:
            TASKS[name] = cls
    return cls


def deprecated_names(namespace):
    """A module `__getattr__` (PEP 562) that answers a renamed task's old name with the
    class of `namespace` (the module's globals) it became, with a DeprecationWarning."""
    module = namespace["__name__"]

    def __getattr__(name):
        new = RENAMED.get(name)
        if new is None or new not in namespace:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {module}.{new}; the old name goes in the "
                      "next release.", DeprecationWarning, stacklevel=2)
        return namespace[new]

    return __getattr__


def family_of(backbone, family):
    """The Family of `family` (a name or a Family), else the backbone's registered one."""
    if family is not None:
        return registry.get(family) if isinstance(family, str) else family
    found = registry.of_backbone(backbone)
    if found is None:
        raise ValueError(f"Cannot tell the family of {backbone.name!r}: pass "
                         "family=NAME (one of keras_ctx.families.names()).")
    return found


def strings(texts, name="x"):
    """A list of str; a clear error for anything else."""
    if isinstance(texts, str):
        texts = [texts]
    texts = list(texts)
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise TypeError(f"`{name}` must hold strings, got {type(bad[0]).__name__} "
                        f"({bad[0]!r}); pass texts, not token ids.")
    return texts


class TextTask:
    """Base of the text tasks: a Keras model over ids plus the family's preprocessor.

    `self.model` is the id-level Keras model: `compile`, `summary` and
    `count_params` are its, and anything else of it is `task.model.NAME`.
    `fit`, `evaluate` and `predict` turn strings into ids first. Subclasses
    say how one example of text becomes model inputs (`_inputs`) and targets
    (`_targets`).
    """

    def __init__(self, model, tokenizer, family, sequence_length, truncation="error",
                 backbone=None, language=None):
        self.model = model
        self.backbone = backbone if backbone is not None else getattr(model, "backbone", model)
        self.tokenizer = tokenizer
        self.family = family_of(self.backbone, family)
        self.sequence_length = validation.positive_int("sequence_length", sequence_length)
        self.truncation = truncation
        # The text's language (XLM: its language id and Moses rules; the model's id2lang).
        self.preprocessor = TextPreprocessor(tokenizer, self.sequence_length, self.family,
                                             truncation=truncation, language=language,
                                             languages=getattr(self.backbone, "languages", None))

    # ------------------------------------------------------------ construction

    @classmethod
    def from_run(cls, run_dir, sequence_length=None, **kwargs):
        """The task over a run directory's backbone and tokenizer (a new head)."""
        info, backbone, tokenizer = runs.load_run(run_dir, need_tokenizer=True)
        backbone.family = info["family"]
        return cls(backbone, tokenizer, sequence_length=(
            info["sequence_length"] if sequence_length is None else sequence_length), family=info["family"], **kwargs)

    @classmethod
    def from_preset(cls, handle, sequence_length=None, **kwargs):
        """The task from a handle: a saved task directory, or any model handle (new head).

        Args:
            handle: a directory `TextTask.save` wrote (loaded as saved), or
                what `keras_ctx.handles.resolve` reads: a run directory, a
                local checkpoint, `hf://ORG/NAME[@REVISION]`, `kaggle://...`.
                It must come with its tokenizer (a bare preset name has none).
            sequence_length: the task's input length (default: the run's or
                checkpoint's `sequence_length`).
            **kwargs: the task's other constructor arguments (num_classes,
                labels, ...).

        Returns:
            The task, its backbone holding the handle's weights.
        """
        name = os.fspath(handle)
        if os.path.isfile(os.path.join(name, TASK_FILE)):
            return cls.load(name)
        resolved = handles.resolve(name, need_tokenizer=True)
        if resolved.tokenizer is None:
            raise ValueError(f"{name!r} names an architecture without a tokenizer (a preset "
                             "name): text tasks need one; give a checkpoint or run "
                             "directory, hf://ORG/NAME or kaggle://..., or build the task "
                             "from a backbone and a tokenizer.")
        backbone = resolved.backbone
        backbone.family = resolved.info["family"]
        return cls(backbone, resolved.tokenizer,
                   sequence_length=(resolved.info["sequence_length"] if sequence_length is None
                                    else sequence_length),
                   family=resolved.info["family"], **kwargs)

    def max_length(self, max_length=None):
        """A generation's `max_length`: checked when given (0 is refused, not "the
        default"), else `sequence_length`."""
        if max_length is None:
            return self.sequence_length
        return validation.positive_int("max_length", max_length)

    # ------------------------------------------------------------ Keras model API

    def compile(self, *args, **kwargs):
        """`keras.Model.compile` of the id-level model."""
        return self.model.compile(*args, **kwargs)

    def summary(self, *args, **kwargs):
        return self.model.summary(*args, **kwargs)

    def count_params(self):
        return self.model.count_params()

    def _settings(self):
        return {}

    def _inputs(self, text):
        """A batch of text (tensors) -> the model's input dict (in the graph)."""
        return self._backbone_inputs(self.preprocessor(text))

    def _backbone_inputs(self, inputs):
        """The preprocessor's outputs the backbone takes."""
        return {k: v for k, v in inputs.items() if k in self.backbone.input}

    def _targets(self, inputs, y):
        return y, None

    def _dataset(self, x, y=None, batch_size=32):
        from keras_ctx.backend import check_strings

        check_strings()
        if isinstance(x, tf.data.Dataset):
            dataset = x
        else:
            x = self._text_columns(x)
            # (x,) without labels: a pair's two columns are one text, not a text and a label.
            dataset = tf.data.Dataset.from_tensor_slices((x,) if y is None else (x, y))
            dataset = dataset.batch(batch_size)

        def prepare(*element):
            text, rest = element[0], element[1:]
            if isinstance(text, tf.Tensor) and text.shape.rank == 0:
                raise ValueError("The dataset yields single texts: batch it first "
                                 "(dataset.batch(32)).")
            inputs = self._inputs(text)
            if not rest:
                return (inputs,)
            targets, weights = self._targets(inputs, rest[0])
            if len(rest) > 1:  # the user's sample weights
                weights = rest[1] if weights is None else weights * tf.cast(rest[1],
                                                                             weights.dtype)
            return (inputs, targets) if weights is None else (inputs, targets, weights)

        return dataset.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)

    def _text_columns(self, x):
        return np.asarray(strings(x), dtype=object).astype(str)

    def fit(self, x, y=None, batch_size=32, validation_data=None, **kwargs):
        """Trains on texts (and labels, or a dataset of (text, label) batches)."""
        batch_size = validation.positive_int("batch_size", batch_size)
        dataset = self._dataset(x, y, batch_size)
        if validation_data is not None:
            validation_data = self._dataset(*_split(validation_data), batch_size=batch_size)
        return self.model.fit(dataset, validation_data=validation_data, **kwargs)

    def evaluate(self, x, y=None, batch_size=32, **kwargs):
        batch_size = validation.positive_int("batch_size", batch_size)
        return self.model.evaluate(self._dataset(x, y, batch_size), **kwargs)

    def predict(self, x, batch_size=32, **kwargs):
        """The id-level model's outputs for texts (numpy)."""
        batch_size = validation.positive_int("batch_size", batch_size)
        kwargs.setdefault("verbose", 0)
        return self.model.predict(self._dataset(x, None, batch_size), **kwargs)

    # ------------------------------------------------------------ save / load

    def save(self, directory, overwrite=False):
        """Writes the model, its tokenizer and settings to `directory` (one directory).

        Nothing there is replaced unless `overwrite`; the directory appears
        whole (written beside, renamed into place).
        """
        info = {"task": type(self).__name__, "family": self.family.name,
                "sequence_length": self.sequence_length, "truncation": self.truncation,
                "settings": self._settings()}
        with files.replacing_directory(directory, overwrite=overwrite,
                                       flag="overwrite=True") as staging:
            self.model.save(os.path.join(staging, MODEL_FILE))
            runs.save_tokenizer(self.tokenizer, os.path.join(staging, runs.TOKENIZER_DIR))
            files.write_json(os.path.join(staging, TASK_FILE), info)
        return directory

    @classmethod
    def load(cls, directory):
        """The task `save` wrote to `directory`, ready to predict (or to compile again)."""
        path = os.path.join(directory, TASK_FILE)
        if not os.path.isfile(path):
            raise runs.RunDirectoryError(f"{directory} has no {TASK_FILE}: it is not a "
                                         "saved text task (TextTask.save writes one).")
        info = read_task_info(directory)
        task = TASKS.get(info.get("task"))
        if task is None or not issubclass(task, cls):
            raise runs.RunDirectoryError(
                f"{directory} holds a {info.get('task')!r}, not a {cls.__name__}; load it "
                f"with keras_ctx.tasks.text.{getattr(task, '__name__', info.get('task'))}.load.")
        # Its sizes, and task.json's sequence length, checked against the stored weights;
        # its classes are registered where they are defined (the face imports them all).
        model = keras_files.load_model(os.path.join(directory, MODEL_FILE), compile=True,
                                       claims=[(path, info)])
        tokenizer = runs.load_tokenizer(os.path.join(directory, runs.TOKENIZER_DIR))
        if tokenizer is None:
            raise runs.RunDirectoryError(f"{directory} has no tokenizer/; save the task again.")
        return task._restore(model, tokenizer, info)

    @classmethod
    def _restore(cls, model, tokenizer, info):
        task = cls.__new__(cls)
        TextTask.__init__(task, model, tokenizer, info["family"], info["sequence_length"],
                          info["truncation"], language=info["settings"].get("language"))
        task._load_settings(info["settings"])
        return task

    def _load_settings(self, settings):
        pass


def read_task_info(directory):
    """task.json of a saved task, checked (`TASK_SCHEMA`: one line naming file and field)."""
    path, fix = os.path.join(directory, TASK_FILE), "save the task again"
    return validation.check_fields(
        path, files.read_json(path, "a saved task's task.json", fix), TASK_SCHEMA, fix,
        closed=True)  # every field `save` writes: another is a typo or a hand edit


def _split(data):
    """validation_data as (x, y) or (x,) for `_dataset`."""
    if isinstance(data, tf.data.Dataset):
        return (data,)
    return tuple(data)

"""keras_ctx: a Keras 3 zoo of contextual word representations (TensorFlow, JAX or PyTorch).

The house, bottom to top (imports flow downwards only; tests/repository/test_import_graph.py
fails on a circle):

- packages: `layers` (reusable layers), `models` (backbones: one folder per family
  with its model, registry entry and converters), `data` (text to
  pretraining batches, corpus fingerprints), `pretraining` (objectives), `tasks`
  (fine-tuning models and transfer recipes), `convert` (checkpoint formats),
  `export` (SavedModel, ONNX), `families` (the one list of families, a line
  per family folder), `commands` (one module per `keras-ctx` command, each a
  Python function, with the checks and the one error path they share).
- the registry: `registry` (Family, Framing, Run; imports nothing of ours).
- below the models, what their `from_preset` reads: `handles` (model handles:
  presets, directories, hf://, kaggle://; every family's classes and converters
  reached through the registry) and `run_files` (a run directory's files).
- `backend`, the one switch: what differs per Keras backend (one module each for
  tensorflow, jax and torch, chosen once by the backend Keras runs); below the layers.
- `common`, what every layer of the house may use: `compat` (private upstream
  APIs, fenced), `errors`, `files` (atomic writes, locks), `keras_files` (Keras'
  .weights.h5 / .keras files loaded checked), `optional` (TensorFlow imported
  when used), `progress`, `startup`, `validation` (config keys and sizes checked).
- the package's face, one concept each: `preprocessing` (the one text path),
  `generation`, `peft` (adapters and LoRA on a backbone), `optimizers`,
  `schedules`, `training` (resumable fit), `runs` (run directories, claimed
  by a resumable pretraining run),
  `evaluation`, `testing` (run_layer_test, run_backbone_test), `scripts` (the
  example scripts' smoke mode), `cli` (the `keras-ctx` parser: it parses before
  the rest is imported, so `keras-ctx --help` does not wait for TensorFlow).

docs/design.md describes the house in full.
"""

import os

from keras_ctx.common.startup import invoked_as_cli, quiet_startup, use_backend_flag, use_caching_allocator  # noqa: E402,I001  (stdlib only)
from keras_ctx.common.optional import preload_tensorflow  # noqa: E402  (stdlib only)

use_backend_flag()  # `keras-ctx --backend jax ...`
# Keras 3 reads the backend once, at its first import: TensorFlow unless the
# user chose (KERAS_BACKEND=jax runs the model side without TensorFlow;
# docs/backends.md says which backend runs what).
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

use_caching_allocator()  # the `keras-ctx` command only; before TensorFlow starts

__version__ = "0.1.0"


def import_all():
    """Imports Keras and every package of the face: what `import keras_ctx` does.

    Importing them registers the families (`keras_ctx.registry`), whose entries
    the model handles read. The `keras-ctx` command calls it
    once its arguments parse, so that `keras-ctx --help` and a mistyped command
    answer before TensorFlow starts.
    """
    with quiet_startup():
        import keras  # noqa: F401  (imported quietly here, before anything else reads it)

    if invoked_as_cli():
        preload_tensorflow()
    with quiet_startup():
        from keras_ctx import layers, models, tasks  # noqa: F401
        from keras_ctx import data, families, generation, pretraining  # noqa: F401
        from keras_ctx import convert, export, optimizers  # noqa: F401
        from keras_ctx import handles, peft  # noqa: F401


if not invoked_as_cli():
    import_all()

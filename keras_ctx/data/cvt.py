"""Cross-view training's input stream (Clark et al. 2018): labelled and unlabelled
batches zipped so that one element feeds one `CrossViewTrainer` step
(`keras_ctx.pretraining.cvt`)."""

from keras_ctx.common.optional import tensorflow as tf


def cvt_dataset(labelled, unlabelled, task_names=None):
    """The two streams of `CrossViewTrainer`, zipped: one element feeds one step.

    Args:
        labelled: a dataset of `(inputs, labels)` batches, or {task: such a
            dataset} for the multi-task variant.
        unlabelled: a dataset of `inputs` batches (the same input names and
            shapes). With K tasks, each step takes K of its batches.
        task_names: the trainer's task names when `labelled` is one dataset
            (default "tags", `CrossViewTrainer(tasks=int)`'s name).

    Returns:
        An endless dataset of {"labelled": {task: (inputs, labels)},
        "unlabelled": {task: inputs}}.
    """
    if not isinstance(labelled, dict):
        names = list(task_names or ["tags"])
        if len(names) != 1:
            raise ValueError(f"One labelled dataset but tasks {names}: pass {{task: dataset}}.")
        labelled = {names[0]: labelled}
    names = list(labelled)
    stream = unlabelled.repeat()
    return tf.data.Dataset.zip({
        "labelled": {t: labelled[t].repeat() for t in names},
        # Every K-th unlabelled batch for each task: no batch is used twice per pass.
        "unlabelled": {t: stream.shard(len(names), k) for k, t in enumerate(names)},
    })


__all__ = ["cvt_dataset"]

"""Monolingual transfer (Artetxe, Ruder & Yogatama 2020, "On the Cross-lingual Transferability
of Monolingual Representations"), as steps over any encoder backbone with a `token_embedding`.

    1. pretrain an encoder on L1 (MLM)                       -> body + L1 embeddings
    2. new vocabulary for L2: `resize_vocabulary`; freeze the body and learn
       only L2's token embeddings with MLM on L2 text        -> `learn_token_embeddings`
    3. fine-tune on L1 task data with L1's embeddings frozen -> `freeze_token_embeddings`
    4. swap in L2's embeddings and predict on L2, zero-shot  -> `swap_token_embeddings`

Freezing is per variable (`keras_ctx.peft.freeze_except`), so frozen
weights stay bit-identical. The masked LM's output layer is tied to the token
embeddings; its output bias is vocabulary-specific and is learned with them
in step 2. Position and segment embeddings are language-independent and
belong to the frozen body.

From the command line: step 1 is `keras-ctx pretrain`, step 2 `keras-ctx
transfer-vocabulary`, step 3 `keras-ctx finetune --freeze-token-embeddings`, step 4
`keras-ctx transfer-swap` (`keras_ctx.commands.transfer`), which gives a classifier of L2's
vocabulary (`swap_vocabulary`: L2's table may have another size than L1's).
"""

import hashlib

import keras
import numpy as np

from keras_ctx.peft import freeze_except


def _table(backbone):
    embedding = getattr(backbone, "token_embedding", None)
    if embedding is None or not hasattr(embedding, "embeddings"):
        raise ValueError(f"{type(backbone).__name__} has no `token_embedding` with an "
                         "`embeddings` table; monolingual transfer needs one.")
    return embedding.embeddings


def resize_vocabulary(backbone, vocabulary_size, rows=None, seed=None):
    """A copy of `backbone` with a `vocabulary_size`-row token embedding and every other weight.

    Args:
        backbone: a keras_ctx backbone whose config has `vocabulary_size`.
        vocabulary_size: the new vocabulary's size (L2's).
        rows: optional sequence, one per new row: the old row to copy there,
            or -1 for a freshly initialised row. Default: all rows fresh
            (a new language's vocabulary, Artetxe et al. step 2).
        seed: seeds the fresh rows' initialiser.

    Returns:
        The new backbone (the input is not changed).
    """
    config = backbone.get_config()
    if config.get("adapters"):
        raise ValueError("resize_vocabulary copies a plain backbone; resize before adding "
                         "adapters (keras_ctx.peft), or delete them first.")
    if "vocabulary_size" not in config:
        raise ValueError(f"{type(backbone).__name__}'s config has no vocabulary_size.")
    if seed is not None:
        keras.utils.set_random_seed(seed)
    config["vocabulary_size"] = vocabulary_size
    new = type(backbone).from_config(config)
    old_table, new_table = _table(backbone), _table(new)
    old_vars = {v.path: v for v in backbone.weights if v is not old_table}
    new_vars = {v.path: v for v in new.weights if v is not new_table}
    if set(old_vars) != set(new_vars):
        raise ValueError("The resized backbone's variables do not match the original's.")
    for path, variable in new_vars.items():
        # A copy: on JAX assign would share the buffer, which the new model's jitted
        # step then donates (the original's weights deleted under it).
        variable.assign(keras.ops.copy(old_vars[path]))
    if rows is not None:
        rows = np.asarray(rows)
        if rows.shape != (vocabulary_size,):
            raise ValueError(f"`rows` must have one entry per new row ({vocabulary_size}), "
                             f"got shape {rows.shape}.")
        old_size = int(old_table.shape[0])
        if rows.max() >= old_size or rows.min() < -1:
            raise ValueError(f"`rows` must be old row ids in [0, {old_size}) or -1.")
        values = keras.ops.convert_to_numpy(new_table).copy()
        old = keras.ops.convert_to_numpy(old_table)
        values[rows >= 0] = old[rows[rows >= 0]]
        new_table.assign(values)
    return new


def learn_token_embeddings(pretrainer, also=()):
    """Step 2: only the backbone's token embeddings (and the MLM output bias) train.

    `pretrainer` is a masked-LM pretrainer over the L2-vocabulary backbone
    (`keras_ctx.pretraining.MaskedLMPretrainer`). `also`: more of its variables
    to train (heads the L1 model did not keep: left frozen at their random start
    they would only add noise). Returns the trainable parameter count; compile
    the pretrainer after this call.
    """
    variables = [_table(pretrainer.backbone), *also]
    head = getattr(pretrainer, "mlm_head", None)
    if head is not None:
        if not head.built:  # its output bias is made at build
            head.build((None, None, pretrainer.backbone.hidden_size))
        variables.append(head.output_bias)
    return freeze_except(pretrainer, variables)


def freeze_token_embeddings(model, backbone):
    """Step 3: everything in `model` trains except `backbone`'s token embeddings."""
    table = _table(backbone)
    return freeze_except(model, [v for v in model.weights if v is not table])


def swap_token_embeddings(backbone, table):
    """Step 4: writes `table` (L2's embeddings) into `backbone`; returns the old table (numpy)."""
    variable = _table(backbone)
    table = keras.ops.convert_to_numpy(table)
    if tuple(table.shape) != tuple(variable.shape):
        raise ValueError(f"The new table has shape {tuple(table.shape)}, the backbone's "
                         f"{tuple(variable.shape)}; make a backbone of that vocabulary size "
                         "with resize_vocabulary first.")
    old = keras.ops.convert_to_numpy(variable).copy()
    variable.assign(table)
    return old


def body_weights(backbone):
    """Every weight of `backbone` but its token table, in order: what steps 2 and 4 keep."""
    table = _table(backbone)
    return [v for v in backbone.weights if v is not table]


def fingerprint(variables):
    """sha256 of the variables' values (shapes, dtypes and bytes, in order): what tells
    whether a table or a body is bit for bit another's."""
    digest = hashlib.sha256()
    for variable in variables:
        value = np.ascontiguousarray(keras.ops.convert_to_numpy(variable))
        digest.update(f"{value.shape}{value.dtype}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def table_fingerprint(backbone):
    """`fingerprint` of `backbone`'s token table."""
    return fingerprint([_table(backbone)])


def swap_vocabulary(classifier, backbone):
    """Step 4 for a task model: a copy of `classifier` that reads `backbone`'s vocabulary.

    The copy's backbone is `classifier.backbone` (the fine-tuned body) with
    `backbone`'s token table in place of its own (L2's, of any size:
    `resize_vocabulary`, then `swap_token_embeddings`); every weight of the task's
    head is the classifier's. Neither input is changed.

    Args:
        classifier: a task model over a backbone (`keras_ctx.tasks.SequenceClassifier`)
            whose config holds `backbone` and its own settings.
        backbone: the backbone of step 2 (L2's token embeddings).
    """
    table = _table(backbone)
    new_backbone = resize_vocabulary(classifier.backbone, int(table.shape[0]))
    swap_token_embeddings(new_backbone, table)
    config = classifier.get_config()
    for key in ("backbone", "name"):
        config.pop(key, None)
    new = type(classifier)(new_backbone, **config)
    old_head, new_head = (_head_weights(model) for model in (classifier, new))
    if [v.shape for v in old_head] != [v.shape for v in new_head]:
        raise ValueError(f"The copy of {type(classifier).__name__} has other head weights "
                         "than the original; swap_vocabulary copies task models whose "
                         "config rebuilds them.")
    for variable, value in zip(new_head, old_head):
        variable.assign(keras.ops.copy(value))
    return new


def _head_weights(model):
    backbone = {id(v) for v in model.backbone.weights}
    return [v for v in model.weights if id(v) not in backbone]


__all__ = ["body_weights", "fingerprint", "freeze_token_embeddings", "learn_token_embeddings",
           "resize_vocabulary", "swap_token_embeddings", "swap_vocabulary",
           "table_fingerprint"]

"""Parameter-efficient training on any keras_ctx backbone: adapters (MAD-X, Houlsby) and LoRA.

Adapters (`keras_ctx.layers.adapters` has the math):

    add_adapter(backbone, "de", "madx_language")    # into every transformer block
    add_adapter(backbone, "ner", "madx_task")
    set_active_adapters(backbone, ["de", "ner"])    # MAD-X stack: language, then task
    train_only(model, adapters=["ner"], keep=[classifier_head])
    save_adapter(backbone, "ner", "ner.safetensors")  # the adapter alone
    load_adapter(other_backbone, "ner.safetensors")    # re-inserted from the file's config
    replace_adapter(backbone, "en", "de.safetensors")   # MAD-X zero-shot: "de" under "ner"

LoRA (Hu et al. 2022) on any Dense / EinsumDense whose path matches a pattern,
by Keras' own `layer.enable_lora(rank)` (W x + (alpha / r) B A x, A random,
B zero):

    enable_lora(backbone, rank=8, patterns=["*self_attention/query", "*self_attention/value"])
    train_only(model, lora=True)
    save_lora(backbone, "lora.safetensors"); load_lora(other_backbone, "lora.safetensors")

Files are safetensors with the adapter config (LoRA: each layer's rank and alpha) and
the backbone they were made for (class, family, architecture: `made_for`) in the
metadata; they never hold backbone weights. Loading checks the whole file before the
model changes and refuses another backbone in one line; a file written before the
record existed is refused unless `allow_unrecorded=True`. Freezing is per variable (`variable.trainable = False`, as
Keras' enable_lora freezes its kernel), so layers stay in training mode and the
frozen weights stay bit-identical.
"""

import fnmatch
import json
import os

import keras
import numpy as np

from keras_ctx import registry
from keras_ctx.common import compat, validation
from keras_ctx.layers.adapter_sites import (  # noqa: F401  (re-exported: peft's public names)
    adapter_sites_of,
    attach_adapters,
    encoder_stacks,
    new_adapters,
    record_adapters,
    active_adapters,
    adapter_names,
    adapter_state,
    add_adapter,
    delete_adapter,
    restore_adapters,
    set_active_adapters,
    transformer_blocks,
)
from keras_ctx.layers.adapters import adapter_config
from keras_ctx.pretraining.adapters import (  # noqa: F401  (re-exported: MAD-X's objective)
    AdapterMaskedLMPretrainer,
    invert_output,
)

FORMAT = "keras_ctx.adapter"
LORA_FORMAT = "keras_ctx.lora"


def _named_variables(layer, prefix):
    out = {}
    for sub in compat.flatten_layers(layer, include_self=False, recursive=True):
        for variable in compat.own_variables(sub):
            out[f"{prefix}.{sub.name}.{variable.name}"] = variable
    return out


def adapter_variables(model, name):
    """{stable key: variable} of adapter `name` (keys are what save_adapter writes)."""
    out = {}
    for prefix, slot in adapter_sites_of(model, name):
        out.update(_named_variables(slot.get(name), prefix))
    if not out:
        raise ValueError(f"No adapter named {name!r}; the model has {adapter_names(model)}.")
    return out


def lora_variables(model):
    """{layer path + .lora_kernel_a/b: variable} of every LoRA-enabled layer."""
    out = {}
    for layer in compat.flatten_layers(model, include_self=False, recursive=True):
        if getattr(layer, "lora_enabled", False):
            out[f"{layer.path}.lora_kernel_a"] = layer.lora_kernel_a
            out[f"{layer.path}.lora_kernel_b"] = layer.lora_kernel_b
    return out


def train_only(model, adapters=(), lora=False, keep=()):
    """Freezes every variable of `model` except the named adapters, LoRA factors and `keep`.

    `keep` lists layers (e.g. a task head) whose variables stay trainable, as
    do the variables a model lists in `trained_with_adapters` (a fresh MLM
    head of `AdapterMaskedLMPretrainer`). Returns the number of trainable
    parameters. Recompile after calling it.
    """
    if lora:
        lora_vars = lora_variables(model)
        if not lora_vars:
            raise ValueError("lora=True, but no layer has LoRA enabled; call enable_lora first.")
    variables = [v for name in adapters for v in adapter_variables(model, name).values()]
    if lora:
        variables += lora_vars.values()
    for layer in keep:
        variables += layer.weights
    variables += list(getattr(model, "trained_with_adapters", ()))
    return freeze_except(model, variables)


def freeze_except(model, variables):
    """Sets `trainable` on every variable of `model`: True for `variables`, else False.

    Per variable, as Keras' enable_lora freezes its kernel: layers stay in
    training mode (dropout) and frozen weights stay bit-identical. Returns the
    number of trainable parameters. Recompile after calling it.
    """
    keep = {id(v) for v in variables}
    for variable in model.weights:
        variable.trainable = id(variable) in keep
    return sum(int(np.prod(v.shape)) for v in model.trainable_weights)


def enable_lora(model, rank, patterns, alpha=None):
    """Keras' `enable_lora(rank, lora_alpha)` on every Dense / EinsumDense matching a pattern.

    Patterns are shell-style (fnmatch) over the layer's path (e.g.
    "bert_backbone/encoder/block_0/self_attention/query"), so any projection
    can be chosen: `["*self_attention/query", "*self_attention/value"]` is
    Hu et al. 2022's W_q, W_v. Returns the paths enabled; no match raises.
    """
    rank = validation.positive_int("rank", rank)
    alpha = None if alpha is None else validation.positive_number("alpha", alpha)
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    chosen = [layer for layer in compat.flatten_layers(model, include_self=False, recursive=True)
              if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
              and any(fnmatch.fnmatchcase(layer.path, p) for p in patterns)]
    for layer in chosen:  # every layer checked before the first is changed
        if layer.lora_enabled:
            raise ValueError(f"LoRA is already enabled on {layer.path}.")
    for layer in chosen:
        layer.enable_lora(rank, lora_alpha=alpha)
    enabled = [layer.path for layer in chosen]
    if not enabled:
        paths = [layer.path for layer in compat.flatten_layers(model, include_self=False)
                 if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))]
        raise ValueError(f"No Dense/EinsumDense layer path matches {patterns}; some paths: "
                         f"{paths[:6]}.")
    return enabled


def _write(path, tensors, metadata, overwrite):
    from safetensors.numpy import save_file

    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it.")
    partial = path + ".partial"
    save_file(tensors, partial, metadata=metadata)
    os.replace(partial, path)  # written beside, renamed into place


def _read(path, expected_format):
    from safetensors import safe_open

    with safe_open(os.fspath(path), framework="numpy") as handle:
        metadata = handle.metadata() or {}
        if metadata.get("format") != expected_format:
            raise ValueError(f"{path} is not a {expected_format} file (format "
                             f"{metadata.get('format')!r}).")
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    return metadata, tensors


def _check_tensors(shapes, tensors, path):
    """Raises unless `tensors` holds exactly `shapes`' keys, each of that shape."""
    missing = sorted(set(shapes) - set(tensors))
    extra = sorted(set(tensors) - set(shapes))
    if missing or extra:
        raise ValueError(f"{path} does not fit this model: missing {missing[:4]}, "
                         f"unexpected {extra[:4]} (was it saved from another architecture?).")
    for key, shape in shapes.items():
        if tuple(tensors[key].shape) != tuple(shape):
            raise ValueError(f"{path}: {key} has shape {tensors[key].shape}, the model's "
                             f"{tuple(shape)}.")


def _assign(variables, tensors, path):
    _check_tensors({key: tuple(v.shape) for key, v in variables.items()}, tensors, path)
    for key, variable in variables.items():
        variable.assign(tensors[key])


def save_adapter(model, name, path, overwrite=False):
    """Writes adapter `name` alone (weights + config) as safetensors, with the backbone it
    was made for (`made_for`), which `load_adapter` checks."""
    variables = adapter_variables(model, name)
    tensors = {k: np.asarray(keras.ops.convert_to_numpy(v)) for k, v in variables.items()}
    metadata = {"format": FORMAT, "name": name,
                "config": json.dumps(adapter_sites_of(model, name)[0][1].configs[name]),
                "made_for": json.dumps(made_for(model))}
    _write(path, tensors, metadata, overwrite)


def load_adapter(model, path, name=None, activate=True, allow_unrecorded=False):
    """Inserts the adapter saved at `path` (as `name`, default its saved name) and loads it.

    Everything is checked before the model changes: the backbone the file was made
    for (class, family, architecture: `made_for`), the adapter config, every
    tensor's name and shape. A refused file leaves the model as it was.

    Args:
        allow_unrecorded: load a file written before adapter files recorded their
            backbone (checked by tensor names and shapes only); without it such a
            file is refused.
    """
    metadata, tensors = _read(path, FORMAT)
    name = name or metadata["name"]
    config = _saved_config(metadata, path)
    planned = _loaded_plan(model, name, config, metadata, tensors, path, allow_unrecorded,
                           "load_adapter")
    attach_adapters(model, name, config, planned)
    if activate:
        set_active_adapters(model, list(active_adapters(model)) + [name])
    else:
        record_adapters(model)
    return name


def _saved_config(metadata, path):
    try:
        return adapter_config(json.loads(metadata["config"]))
    except (KeyError, TypeError, json.JSONDecodeError, ValueError) as error:
        raise ValueError(f"{path} holds no usable adapter config ({error}); save the adapter "
                         "again with save_adapter.") from None


def _loaded_plan(model, name, config, metadata, tensors, path, allow_unrecorded, loader):
    """`new_adapters`' plan for the file's adapter, its weights loaded and the file checked
    against `model` (tensors, `made_for`); nothing is attached yet."""
    planned = new_adapters(model, name, config)
    variables = {}
    for prefix, *_, adapter in planned:
        variables.update(_named_variables(adapter, prefix))
    _assign(variables, tensors, path)  # the new adapters only: nothing attached yet
    check_made_for(model, metadata, path, "adapter", allow_unrecorded, loader)
    return planned


# What makes two adapters interchangeable in a stack: where they sit (an adapter of
# another placement or places would leave its slots without one).
_PLACE_KEYS = ("placement", "places", "invertible")


def replace_adapter(model, old, path, name=None, allow_unrecorded=False):
    """Puts the adapter saved at `path` where adapter `old` is and removes `old`.

    MAD-X's zero-shot transfer (Pfeiffer et al. 2020, Fig. 1): the target language's
    adapter replaces the source language's under the task adapter trained on it. The new
    adapter takes `old`'s place in every slot and in the active stack; it must sit where
    `old` does (placement, places, invertible adapter), its sizes may differ. Everything
    is checked (as `load_adapter`: the backbone it was made for, every tensor) before
    the model changes. Returns the new adapter's name (`name`, default its saved one;
    the same as `old`: its weights replace `old`'s, whose config must then be the same).
    """
    sites = adapter_sites_of(model, old)
    if not sites:
        raise ValueError(f"No adapter named {old!r} to replace; the model has "
                         f"{adapter_names(model)}.")
    metadata, tensors = _read(path, FORMAT)
    name = name or metadata["name"]
    config, current = _saved_config(metadata, path), sites[0][1].configs[old]
    for key in _PLACE_KEYS if name != old else sorted(current):
        if config.get(key) != current.get(key):
            raise ValueError(f"{path} holds an adapter with {key}={config.get(key)!r}, and "
                             f"{old!r} has {key}={current.get(key)!r}: an adapter replaces "
                             "one that sits where it does (save one of that config).")
    if name == old:
        variables = adapter_variables(model, old)
        _check_tensors({key: tuple(v.shape) for key, v in variables.items()}, tensors, path)
        check_made_for(model, metadata, path, "adapter", allow_unrecorded, "replace_adapter")
        _assign(variables, tensors, path)
        return name
    planned = _loaded_plan(model, name, config, metadata, tensors, path, allow_unrecorded,
                           "replace_adapter")
    active = active_adapters(model)
    attach_adapters(model, name, config, planned, before=old)
    delete_adapter(model, old)
    set_active_adapters(model, [name if n == old else n for n in active])
    return name


# What a file records of the model it was saved from: config keys that do not change
# which weights there are or how they combine are left out (a LoRA or adapter trained
# with dropout loads into the same backbone without).
_UNRECORDED_KEYS = ("name", "trainable", "dtype", "adapters")


def _backbone_of(model):
    from keras_ctx.models.backbone import Backbone

    if isinstance(model, Backbone):
        return model
    found = [layer for layer in compat.flatten_layers(model, include_self=False, recursive=True)
             if isinstance(layer, Backbone)]
    return found[0] if found else None


def made_for(model):
    """{"model", "backbone", "family", "config"}: the model a LoRA or adapter file is saved
    from, as the file records it (the backbone's architecture: its config without names,
    dtypes and dropout rates)."""
    backbone = _backbone_of(model)
    record = {"model": type(model).__name__, "backbone": None, "family": None, "config": {}}
    if backbone is not None:
        family = registry.of_backbone(backbone)
        record.update(backbone=type(backbone).__name__,
                      family=family.name if family is not None else None,
                      config=json.loads(json.dumps(
                          {key: value for key, value in backbone.get_config().items()
                           if key not in _UNRECORDED_KEYS and "dropout" not in key},
                          default=str)))
    return record


def check_made_for(model, metadata, path, what, allow_unrecorded, loader):
    """Raises ValueError in one line when the file at `path` was made for another backbone
    than `model`'s (another class, family or architecture), naming what differs."""
    if "made_for" not in metadata:
        if allow_unrecorded:
            return
        raise ValueError(
            f"{path} does not record the model it was made for (written before {what} files "
            f"did): save it again from that model, or pass allow_unrecorded=True to {loader} "
            "to load it checked by tensor names and shapes only.")
    saved, here = json.loads(metadata["made_for"]), made_for(model)
    for key in ("backbone", "family"):
        if saved.get(key) != here[key]:
            raise ValueError(f"{path} holds a {what} made for a {saved.get(key)} {key}, and "
                             f"this model's is {here[key]}: load it into the model it was "
                             "made for.")
    config = saved.get("config", {})
    for key in sorted(set(config) | set(here["config"])):
        if config.get(key) != here["config"].get(key):
            raise ValueError(
                f"{path} holds a {what} made for a {saved['backbone']} with {key}="
                f"{config.get(key)!r}, and this model has {key}="
                f"{here['config'].get(key)!r}: load it into the model it was made for.")


def save_lora(model, path, overwrite=False):
    """Writes every LoRA factor pair of `model` (not the frozen kernels) as safetensors."""
    variables = lora_variables(model)
    if not variables:
        raise ValueError("No layer of the model has LoRA enabled.")
    tensors = {k: np.asarray(keras.ops.convert_to_numpy(v)) for k, v in variables.items()}
    alphas = {}
    for layer in compat.flatten_layers(model, include_self=False, recursive=True):
        if getattr(layer, "lora_enabled", False):
            alphas[layer.path] = [layer.lora_rank, layer.lora_alpha]
    _write(path, tensors, {"format": LORA_FORMAT, "layers": json.dumps(alphas),
                           "made_for": json.dumps(made_for(model))}, overwrite)


def load_lora(model, path, allow_unrecorded=False):
    """Enables LoRA on the layers the file names (same rank and alpha) and loads the factors.

    The whole file is checked against the model first (the backbone it was made for:
    class, family, architecture; every layer there, its rank and alpha, every
    factor's shape): a refused file leaves the model as it was.

    Args:
        allow_unrecorded: load a file written before LoRA files recorded their model
            (checked by layer paths, ranks and shapes only); without it such a file
            is refused.
    """
    metadata, tensors = _read(path, LORA_FORMAT)
    layers = json.loads(metadata["layers"])
    by_path = {layer.path: layer
               for layer in compat.flatten_layers(model, include_self=False, recursive=True)}
    shapes = {key: tuple(variable.shape) for key, variable in lora_variables(model).items()}
    for layer_path, (rank, alpha) in layers.items():
        layer = by_path.get(layer_path)
        if layer is None:
            raise ValueError(f"{path} holds LoRA for {layer_path}, which this model lacks.")
        if layer.lora_enabled and (layer.lora_rank, layer.lora_alpha) != (rank, alpha):
            raise ValueError(
                f"{path} holds rank {rank}, alpha {alpha} LoRA for {layer_path}, where the "
                f"model has rank {layer.lora_rank}, alpha {layer.lora_alpha}.")
        # Keras' factors of a (..., in, out) kernel or (rows, out) table: A (..., in, r),
        # B (r, out).
        base = tuple((layer.kernel if hasattr(layer, "kernel") else layer.embeddings).shape)
        shapes[f"{layer_path}.lora_kernel_a"] = base[:-1] + (int(rank),)
        shapes[f"{layer_path}.lora_kernel_b"] = (int(rank), base[-1])
    _check_tensors(shapes, tensors, path)
    check_made_for(model, metadata, path, "LoRA", allow_unrecorded, "load_lora")
    for layer_path, (rank, alpha) in layers.items():
        if not by_path[layer_path].lora_enabled:
            by_path[layer_path].enable_lora(rank, lora_alpha=alpha)
    _assign(lora_variables(model), tensors, path)


__all__ = ["active_adapters", "add_adapter", "adapter_names", "adapter_state", "adapter_variables",
           "check_made_for", "delete_adapter", "made_for",
           "enable_lora", "freeze_except", "AdapterMaskedLMPretrainer", "invert_output", "load_adapter", "load_lora", "lora_variables",
           "replace_adapter", "restore_adapters", "save_adapter", "save_lora", "set_active_adapters", "train_only",
           "transformer_blocks"]


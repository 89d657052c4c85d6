"""Adapters in a built model's blocks: inserted, switched, listed and recorded.

The half of `keras_ctx.peft` that Keras needs to load a saved backbone
(`Backbone.from_config` calls `restore_adapters`): it sits with the layers it
places adapters in, so the models import it directly. A block hosts adapters by
the `AdapterHost` contract. `keras_ctx.peft` re-exports the public names.
"""

from keras_ctx.common import compat
from keras_ctx.layers.adapters import (
    AdapterHost,
    AdapterSlot,
    BottleneckAdapter,
    InvertibleAdapter,
    InvertibleAdapterSlot,
    adapter_config,
    attach_sublayer,
)
from keras_ctx.layers.transformer import TransformerEncoderStack


def transformer_blocks(model):
    """Every distinct block of `model` that hosts adapters (`AdapterHost`), in a stable order."""
    seen, blocks = set(), []
    for layer in compat.flatten_layers(model, include_self=False, recursive=True):
        if isinstance(layer, AdapterHost) and id(layer) not in seen:
            seen.add(id(layer))
            blocks.append(layer)
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no keras_ctx transformer blocks to put "
                         "adapters in; in a block of your own use BottleneckAdapter directly.")
    return blocks


def encoder_stacks(model):
    return [layer for layer in compat.flatten_layers(model, include_self=False, recursive=True)
            if isinstance(layer, TransformerEncoderStack)]


def _slot(parent, attribute, make):
    slot = getattr(parent, attribute, None)
    if slot is None:
        slot = make()
        attach_sublayer(parent, attribute, slot)
    return slot


def adapter_sites_of(model, name):
    """[(key prefix, slot)] of every slot holding adapter `name`."""
    sites = []
    for index, block in enumerate(transformer_blocks(model)):
        for place in ("attention", "cross_attention", "feedforward"):
            slot = getattr(block, f"{place}_adapters", None)
            if slot is not None and name in slot.names:
                sites.append((f"layer_{index}.{place}", slot))
    for index, stack in enumerate(encoder_stacks(model)):
        slot = getattr(stack, "input_adapters", None)
        if slot is not None and name in slot.names:
            sites.append((f"stack_{index}.invertible", slot))
    return sites


def adapter_names(model):
    """Names of the adapters in `model`, in the order they were added."""
    names = []
    for slot in _slots(model):
        names += [n for n in slot.names if n not in names]
    return names


def add_adapter(model, name, config="pfeiffer", activate=True, **overrides):
    """Inserts adapter `name` into every transformer block of a built `model`.

    Args:
        model: a built model holding keras_ctx transformer blocks (a backbone
            or a task model around one).
        name: the adapter's name (language "de", task "ner", ...).
        config: "houlsby", "pfeiffer", "madx_task", "madx_language" or a dict
            (`keras_ctx.layers.adapters.adapter_config`); `overrides` change keys
            (e.g. reduction_factor=8).
        activate: stack it on top of the active adapters.

    Returns:
        The full config dict (saved with the adapter).
    """
    config = adapter_config(config, **overrides)
    attach_adapters(model, name, config, new_adapters(model, name, config))
    if activate:
        set_active_adapters(model, list(active_adapters(model)) + [name])
    else:
        record_adapters(model)
    return config


def new_adapters(model, name, config):
    """[(key prefix, owner, slot attribute, slot factory, adapter)]: the built adapters
    `add_adapter` would insert, checked against `model` and attached to nothing yet."""
    if name in adapter_names(model):
        raise ValueError(f"{type(model).__name__} already has an adapter {name!r}.")
    if not str(name).isidentifier():
        raise ValueError(f"Adapter names must be identifiers (letters, digits, _), got {name!r}.")
    blocks = transformer_blocks(model)
    stacks = encoder_stacks(model) if config["invertible"] else []
    if config["invertible"] and not stacks:
        raise ValueError("Invertible adapters go on a TransformerEncoderStack's input, and "
                         f"{type(model).__name__} has none; use invertible=False.")
    planned = []
    for index, block in enumerate(blocks):
        for place in config["places"]:
            if place == "cross_attention" and not getattr(block, "use_cross_attention", False):
                continue
            slot = getattr(block, f"{place}_adapters", None)
            if slot is not None and slot.placement != config["placement"]:
                raise ValueError(f"{block.name}'s {place} already holds {slot.placement} "
                                 f"adapters; a {config['placement']} adapter cannot share it.")
            adapter = BottleneckAdapter(config["reduction_factor"], activation=config["activation"],
                                        dtype=block.dtype_policy, name=name)
            adapter.build((None, None, block.adapter_width()))
            planned.append((f"layer_{index}.{place}", block, f"{place}_adapters",
                            lambda block=block, place=place: AdapterSlot(
                                config["placement"], dtype=block.dtype_policy,
                                name=f"{place}_adapters"), adapter))
    for index, stack in enumerate(stacks):
        adapter = InvertibleAdapter(config["invertible_reduction_factor"], activation=
                                    config["activation"], dtype=stack.dtype_policy, name=name)
        adapter.build((None, None, stack.blocks[0].adapter_width()))
        planned.append((f"stack_{index}.invertible", stack, "input_adapters",
                        lambda stack=stack: InvertibleAdapterSlot(
                            dtype=stack.dtype_policy, name="input_adapters"), adapter))
    return planned


def attach_adapters(model, name, config, planned, before=None):
    """Attaches `new_adapters`' plan: each adapter last in its slot, or just below `before`."""
    for _, owner, attribute, make, adapter in planned:
        _slot(owner, attribute, make).add(name, adapter, config, before=before)


def _slots(model):
    for block in transformer_blocks(model):
        for place in ("attention", "cross_attention", "feedforward"):
            slot = getattr(block, f"{place}_adapters", None)
            if slot is not None:
                yield slot


def active_adapters(model):
    """The active adapter stack, lowest first."""
    active = []
    for slot in _slots(model):
        active += [n for n in slot.active if n not in active]
    return active


def adapter_state(model):
    """{"configs": {name: config}, "active": [...]}: what rebuilds the adapters, or None."""
    configs = {}
    for slot in _slots(model):
        for name in slot.names:
            configs.setdefault(name, slot.configs[name])
    if not configs:
        return None
    return {"configs": configs, "active": active_adapters(model)}


def restore_adapters(model, state):
    """Re-inserts the adapters `adapter_state` described (fresh weights; load them after)."""
    for name, config in state["configs"].items():
        add_adapter(model, name, config, activate=False)
    set_active_adapters(model, state["active"])


def _records_adapters(layer):
    # The contract: a class that saves its adapters in its config (keras_ctx's Backbone)
    # declares `_adapter_state` (what get_config reads).
    return hasattr(type(layer), "_adapter_state")


def record_adapters(model):
    """Keeps a keras_ctx backbone's config in step, so .keras files rebuild the adapters."""
    owners = [model] if _records_adapters(model) else [
        layer for layer in compat.flatten_layers(model, include_self=False, recursive=True)
        if _records_adapters(layer)]
    for owner in owners:
        # Untracked: read by Backbone.get_config only.
        object.__setattr__(owner, "_adapter_state", adapter_state(owner))


def set_active_adapters(model, names):
    """Switches on `names` (first = lowest, MAD-X: language then task) and off the rest.

    The switches are variables, so models compiled or traced before keep
    following them (no recompiling to swap a language adapter)."""
    names = list(names)
    known = adapter_names(model)
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"No adapters named {missing} in the model; it has {known}.")
    if names != [n for n in known if n in names]:
        raise ValueError(f"Active adapters stack in the order they were added ({known}); "
                         f"got {names}. Add them in the stacking order you need.")
    for block in transformer_blocks(model):
        for place in ("attention", "cross_attention", "feedforward"):
            slot = getattr(block, f"{place}_adapters", None)
            if slot is not None:
                slot.active = tuple(n for n in names if n in slot.names)
    for stack in encoder_stacks(model):
        slot = getattr(stack, "input_adapters", None)
        if slot is not None:
            slot.active = tuple(n for n in names if n in slot.names)
    record_adapters(model)


def delete_adapter(model, name):
    """Removes adapter `name` from every block (and the active stack)."""
    sites = adapter_sites_of(model, name)
    if not sites:
        raise ValueError(f"No adapter named {name!r}; the model has {adapter_names(model)}.")
    set_active_adapters(model, [n for n in active_adapters(model) if n != name])
    for _, slot in sites:
        slot.remove(name)
    record_adapters(model)

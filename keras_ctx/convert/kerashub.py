"""Weight transfer from keras-hub backbones of the same family: the format's machinery.

Each family's convert module (`keras_ctx.models.bert.convert`, ...) holds its
`*_from_keras_hub` function, named by its `KerasHub` spec; the block,
attention and embedding entries below are what they share.

`from_keras_hub(backbone)` builds the matching keras_ctx backbone and copies
every keras-hub variable by its path (e.g.
`transformer_layer_0/self_attention_layer/query/kernel`); each path must be
used, so a keras-hub version with another layout fails loudly.
`from_keras_hub_preset(directory)` does the same for a saved keras-hub preset
directory (config.json + model.weights.h5, as `backbone.save_to_preset`
writes), with its tokenizer when the preset has one.

"""

import os

import numpy as np

from keras_ctx import registry
from keras_ctx.convert import config_fields
from keras_ctx.convert.base import CheckpointError, TensorReader, check_floating
from keras_ctx.convert.mapping import Entry, layer_by_name, load_weight_map
from keras_ctx.common.keras_files import check_claimed_sizes, check_weights_fit, read_h5_datasets
from keras_ctx.common.files import read_json


def keras_hub_attention_entries(attention, p):
    """keras-hub CachedMultiHeadAttention's query/key/value/output under `p` -> ours."""
    entries = []
    for ours, theirs in (("query_dense", "query"), ("key_dense", "key"),
                         ("value_dense", "value"), ("output_dense", "attention_output")):
        dense = getattr(attention, ours)
        entries += [Entry(dense.kernel, p + theirs + "/kernel"),
                    Entry(dense.bias, p + theirs + "/bias")]
    return entries


def keras_hub_block_entries(block, prefix, attention_name="self_attention_layer"):
    """keras-hub TransformerEncoder/Decoder layer weights -> one of our blocks."""
    entries = keras_hub_attention_entries(block.self_attention, f"{prefix}/{attention_name}/")
    norms = [(block.self_attention_norm, "self_attention_layer_norm"),
             (block.feedforward_norm, "feedforward_layer_norm")]
    if getattr(block, "use_cross_attention", False):
        entries += keras_hub_attention_entries(block.cross_attention, f"{prefix}/cross_attention/")
        norms.append((block.cross_attention_norm, "cross_attention_layer_norm"))
    for norm, name in norms:
        entries += [Entry(norm.gamma, f"{prefix}/{name}/gamma"),
                    Entry(norm.beta, f"{prefix}/{name}/beta")]
    for dense, name in ((block.feedforward.intermediate_dense, "feedforward_intermediate_dense"),
                        (block.feedforward.output_dense, "feedforward_output_dense")):
        entries += [Entry(dense.kernel, f"{prefix}/{name}/kernel"),
                    Entry(dense.bias, f"{prefix}/{name}/bias")]
    return entries


def keras_hub_embedding_entries(ours, token, position, segment=None):
    """keras-hub's token/position(/segment) tables and embeddings norm -> ours."""
    entries = [Entry(ours.token_embedding.embeddings, token),
               Entry(layer_by_name(ours, "position_embedding").position_embeddings, position)]
    if segment:
        entries.append(Entry(layer_by_name(ours, "segment_embedding").embeddings, segment))
    norm = layer_by_name(ours, "embeddings_norm")
    entries += [Entry(norm.gamma, "embeddings_layer_norm/gamma"),
                Entry(norm.beta, "embeddings_layer_norm/beta")]
    return entries


# Each family's convert module names its keras-hub classes and the function that
# builds ours and its weight map (`keras_ctx.registry.KerasHub`).


def from_keras_hub(backbone):
    """A keras_ctx backbone with the weights of a keras-hub backbone of the same family.

    Args:
        backbone: a keras-hub backbone of a class a family's registry entry names.

    Returns:
        Our backbone, its `family` set.
    """
    name = type(backbone).__name__
    module = type(backbone).__module__
    found = registry.keras_hub(name)
    if found is None or not module.startswith("keras_hub"):
        supported = sorted(spec.class_name for family in map(registry.get, registry.names())
                           for spec in family.keras_hub)
        raise CheckpointError(f"{module}.{name} is not a supported keras-hub backbone; "
                              f"supported: keras_hub.models.{', '.join(supported)}.")
    family, spec = found
    config = backbone.get_config()
    config_fields.check_every_key(spec.convert.config_fields, config, f"keras-hub {name}")
    ours, entries, *ignored = spec.convert(backbone, config)
    for w in backbone.weights:
        check_floating(w.path, w.dtype, f"keras-hub {name}")
    tensors = {w.path: np.asarray(w.numpy(), "float32") for w in backbone.weights}
    if len(tensors) != len(backbone.weights):
        raise CheckpointError(f"{name} has variables with duplicate paths; cannot map them.")
    read = TensorReader(tensors)
    load_weight_map(entries, read)
    read.check_all_used(ignore=ignored[0] if ignored else ())
    ours.family = family.name
    return ours


def from_keras_hub_preset(directory):
    """A keras_ctx backbone (+ `.tokenizer`) from a saved keras-hub preset directory."""
    import keras_hub

    directory = os.fspath(directory)
    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise CheckpointError(f"{directory} has no config.json: not a keras-hub preset.")
    from keras_ctx.convert.base import read_json_object
    from keras_ctx.convert.huggingface_tokenizers import check_tokenizer_fits

    config = read_json_object(os.path.join(directory, "config.json"),
                              "keras-hub preset config.json")
    weights = os.path.join(directory, "model.weights.h5")
    datasets = read_h5_datasets(weights) if os.path.isfile(weights) else None
    if datasets is not None:  # before keras-hub builds what the config claims
        check_claimed_sizes(config, [shape for shape, _ in datasets.values()],
                            os.path.join(directory, "config.json"))
    try:
        source = keras_hub.models.Backbone.from_preset(directory)
    except (ValueError, OSError, KeyError, TypeError, AttributeError) as error:
        raise CheckpointError(f"{directory} is not a loadable keras-hub preset "
                              f"({type(error).__name__}: {error}).") from None
    if datasets is not None:
        check_weights_fit(source, datasets, weights)
    ours = from_keras_hub(source)
    ours.tokenizer = None
    if os.path.isfile(os.path.join(directory, "tokenizer.json")):
        ours.tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(directory)
        check_tokenizer_fits(ours, ours.tokenizer, directory)
    return ours


def is_keras_hub_preset(directory):
    """Whether `directory` holds a keras-hub preset: config.json naming a keras_hub class
    beside metadata.json. A malformed config.json there raises naming the file and the
    parse error (it is never "not a preset", which would blame the format)."""
    path = os.path.join(os.fspath(directory), "config.json")
    if not os.path.isfile(path) or not os.path.isfile(
            os.path.join(os.fspath(directory), "metadata.json")):
        return False
    config = read_json(path, None, "fix or re-download it", error=CheckpointError)
    return isinstance(config, dict) and str(config.get("registered_name", "")).startswith(
        "keras_hub")

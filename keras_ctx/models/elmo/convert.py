"""allennlp / bilm-tf ELMo (options json + hdf5 weights) <-> ElmoBackbone.

The published ELMo files (e.g. elmo_2x4096_512_2048cnn_2xhighway_options.json
and ..._weights.hdf5) are bilm-tf's weight dump, which allennlp reads:

    char_embed                       (261, char_dim)   ids 1..261 (0 = padding, zeros)
    CNN/W_cnn_i                      (1, width, char_dim, count), CNN/b_cnn_i
    CNN_high_k/W_carry, b_carry      gate t = sigmoid(x W_carry + b_carry)
    CNN_high_k/W_transform, b_transform
                                     y = t * relu(x W_transform + b) + (1 - t) * x
    CNN_proj/W_proj, b_proj          (features, projection_dim)
    RNN_d/RNN/MultiRNNCell/Cell{j}/LSTMCell/W_0   (input + proj, 4 * dim), gates [i, j, f, o]
                                            /B     (4 * dim,), forget_bias 1.0 NOT included
                                            /W_P_0 (dim, proj)
    (d = 0 forward, 1 backward)

Conventions (see keras_ctx/layers/char_cnn.py and lstm.py): bilm-tf's
`W_carry` is our transform gate as is (allennlp's own Highway negates it,
because its gate multiplies x); `W_0` splits into our kernel (input rows) and
recurrent kernel (projection rows), gate columns reorder [i, j, f, o] ->
[i, f, j, o], and TF's forget_bias=1.0 is added to the forget bias. The
exporter undoes each step, so the round trip is exact except the forget
bias, which goes through `b - 1 + 1` in float32 (within 1.2e-7).
"""

import json
import os

import numpy as np

from keras_ctx.convert import config_fields
from keras_ctx.convert.base import (
    CheckpointError,
    assign,
    check_finite_tensor,
    check_floating,
    check_settings,
    config_field,
    read_json_object,
)
from keras_ctx.common.files import missing_link, replacing
from keras_ctx.registry import AllenNLP


def _read_options(options_file):
    if not os.path.isfile(options_file):
        raise CheckpointError(missing_link(options_file)
                              or f"No ELMo options file at {options_file}.")
    options = read_json_object(options_file, "ELMo options")
    for section, keys in (("lstm", ("projection_dim", "dim", "n_layers")),
                          ("char_cnn", ("filters", "n_highway", "embedding"))):
        if section not in options:
            raise CheckpointError(f"{options_file} has no {section!r} section; it is not an "
                                  "ELMo options file.")
        missing = [key for key in keys if key not in options[section]]
        if missing:
            raise CheckpointError(f"{options_file}: {section} lacks {', '.join(missing)}.")
    config_fields.ELMO.check(config_fields.flattened(options), options_file, "ELMo options")
    return options


def elmo_config_from_options(options):
    lstm, cnn = options["lstm"], options["char_cnn"]
    return dict(
        projection_dim=lstm["projection_dim"],
        lstm_units=lstm["dim"],
        num_layers=lstm["n_layers"],
        filters=[list(pair) for pair in cnn["filters"]],
        num_highway_layers=cnn["n_highway"],
        cell_clip=lstm.get("cell_clip"),
        projection_clip=lstm.get("proj_clip"),
        use_residual=bool(lstm.get("use_skip_connections", False)),
        max_characters_per_token=cnn.get("max_characters_per_token", 50),
        character_embedding_dim=cnn["embedding"]["dim"],
    )


def elmo_options_from_backbone(backbone):
    c = backbone.get_config()
    return {
        "lstm": {"projection_dim": c["projection_dim"], "dim": c["lstm_units"],
                 "n_layers": c["num_layers"], "cell_clip": c["cell_clip"],
                 "proj_clip": c["projection_clip"],
                 "use_skip_connections": c["use_residual"]},
        "char_cnn": {"activation": "relu", "filters": [list(f) for f in c["filters"]],
                     "n_highway": c["num_highway_layers"],
                     "embedding": {"dim": c["character_embedding_dim"]},
                     "n_characters": 262,
                     "max_characters_per_token": c["max_characters_per_token"]},
    }


def _lstm_path(direction, layer):
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def _gates_tf_to_ours(w, units):
    i, j, f, o = (w[..., k * units:(k + 1) * units] for k in range(4))
    return np.concatenate([i, f, j, o], axis=-1)


def _gates_ours_to_tf(w, units):
    i, f, j, o = (w[..., k * units:(k + 1) * units] for k in range(4))
    return np.concatenate([i, j, f, o], axis=-1)


def _lstm(backbone, direction, layer):
    name = f"{'forward' if direction == 0 else 'backward'}_lstm_{layer}"
    return next(x for x in backbone.layers if x.name == name)


def from_allennlp(options_file, weight_file):
    """An ElmoBackbone with the weights of an allennlp / bilm-tf ELMo (options + hdf5)."""
    import h5py

    from keras_ctx.models.elmo.backbone import ElmoBackbone

    options = _read_options(options_file)
    try:
        settings = elmo_config_from_options(options)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise CheckpointError(f"{options_file} has a field of the wrong type or value "
                              f"({type(error).__name__}: {error}); fix it.") from None
    try:
        handle = h5py.File(os.fspath(weight_file), "r")
    except (OSError, FileNotFoundError) as error:
        raise CheckpointError(f"{weight_file} is not a readable hdf5 file ({error}); the "
                              "download may be incomplete.") from None
    with handle:
        _check_sizes(settings, options, _dataset_shapes(handle), options_file)
        try:
            backbone = ElmoBackbone(**settings)
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"{options_file}: its values do not build an ElmoBackbone "
                                  f"({error}); fix the field.") from None
        used = set()

        def read(name):
            if name not in handle or not isinstance(handle[name], h5py.Dataset):
                raise CheckpointError(f"The hdf5 file has no dataset {name!r}; it does not "
                                      "match its options file.")
            used.add(name)
            check_floating(name, handle[name].dtype, str(weight_file))
            try:
                value = np.asarray(handle[name][...], dtype="float32")
            except OSError as error:
                raise CheckpointError(f"{name}: unreadable data in {weight_file} "
                                      f"({error}).") from None
            check_finite_tensor(name, value)
            return value

        embedder = backbone.token_embedder
        table = read("char_embed")
        if table.shape[0] + 1 != embedder.character_vocabulary_size:
            raise CheckpointError(f"char_embed: checkpoint shape {table.shape} does not fit "
                                  f"{embedder.character_vocabulary_size - 1} characters.")
        assign(embedder.char_embedding.embeddings,
               np.concatenate([np.zeros_like(table[:1]), table]), "char_embed")
        for i, conv in enumerate(embedder.char_convs):
            kernel = read(f"CNN/W_cnn_{i}")
            if kernel.ndim != 4 or kernel.shape[0] != 1:
                raise CheckpointError(f"CNN/W_cnn_{i}: expected (1, width, char_dim, count), "
                                      f"got {kernel.shape}.")
            assign(conv.kernel, kernel[0], f"CNN/W_cnn_{i}")
            assign(conv.bias, read(f"CNN/b_cnn_{i}"), f"CNN/b_cnn_{i}")
        if embedder.highway is not None:
            for k, (gate, transform) in enumerate(zip(embedder.highway.transform_gates,
                                                      embedder.highway.transforms)):
                p = f"CNN_high_{k}"
                assign(gate.kernel, read(p + "/W_carry"), p + "/W_carry")
                assign(gate.bias, read(p + "/b_carry"), p + "/b_carry")
                assign(transform.kernel, read(p + "/W_transform"), p + "/W_transform")
                assign(transform.bias, read(p + "/b_transform"), p + "/b_transform")
        assign(embedder.projection.kernel, read("CNN_proj/W_proj"), "CNN_proj/W_proj")
        assign(embedder.projection.bias, read("CNN_proj/b_proj"), "CNN_proj/b_proj")
        for layer in range(backbone.num_layers):
            for direction in (0, 1):
                lstm, p = _lstm(backbone, direction, layer), _lstm_path(direction, layer)
                units, inputs = lstm.units, lstm.kernel.shape[0]
                w = read(p + "/W_0")
                if w.shape != (inputs + lstm.output_dim, 4 * units):
                    raise CheckpointError(
                        f"{p}/W_0: checkpoint shape {w.shape} does not fit an LSTM with "
                        f"{inputs} inputs, {lstm.output_dim} projections, {units} units "
                        f"(expected {(inputs + lstm.output_dim, 4 * units)}).")
                w = _gates_tf_to_ours(w, units)
                assign(lstm.kernel, w[:inputs], p + "/W_0")
                assign(lstm.recurrent_kernel, w[inputs:], p + "/W_0")
                bias = read(p + "/B").copy()
                if bias.shape != (4 * units,):
                    raise CheckpointError(f"{p}/B: checkpoint shape {bias.shape}, expected "
                                          f"{(4 * units,)}.")
                bias[2 * units:3 * units] += 1.0  # TF LSTMCell's forget_bias
                assign(lstm.bias, _gates_tf_to_ours(bias, units), p + "/B")
                assign(lstm.projection_kernel, read(p + "/W_P_0"), p + "/W_P_0")
        datasets = []
        handle.visititems(lambda name, obj: datasets.append(name)
                          if isinstance(obj, h5py.Dataset) else None)
        unused = sorted(set(datasets) - used)
        if unused:
            raise CheckpointError(f"{len(unused)} hdf5 datasets have no place in the model "
                                  f"(first: {unused[:3]}); options and weights disagree.")
    return backbone


def _dataset_shapes(handle):
    """{name: shape} of every dataset in an hdf5 file, read from its metadata only."""
    import h5py

    shapes = {}
    handle.visititems(lambda name, obj: shapes.__setitem__(name, tuple(obj.shape))
                      if isinstance(obj, h5py.Dataset) else None)
    return shapes


def _check_sizes(settings, options, shapes, source):
    """The options' sizes against the weight file's dataset shapes, before building."""
    flat = {f"{section}.{key}": value for section in ("lstm", "char_cnn")
            for key, value in options[section].items()}
    flat["char_cnn.embedding.dim"] = options["char_cnn"]["embedding"].get("dim")
    sizes = dict(settings, filters=None, cell_clip=None, projection_clip=None,
                 use_residual=None)
    check_settings({k: v for k, v in sizes.items() if v is not None}, flat, source)
    axes = {n for shape in shapes.values() for n in shape}
    for key in ("projection_dim", "lstm_units", "character_embedding_dim"):
        if settings[key] not in axes:
            field = config_field(flat, key, settings[key])
            raise CheckpointError(f"{source}: {field} = {settings[key]} is not the size of any "
                                  "dataset in the weight file; options and weights disagree.")
    for width, count in settings["filters"]:
        if type(width) is not int or type(count) is not int or count not in axes \
                or not 0 < width <= max(axes, default=0):
            raise CheckpointError(f"{source}: char_cnn.filters holds [{width}, {count}], which "
                                  "no CNN kernel in the weight file has.")
    cells = {name.split("/MultiRNNCell/")[1].split("/")[0] for name in shapes
             if name.startswith("RNN_0/RNN/MultiRNNCell/")}
    if settings["num_layers"] != len(cells):
        raise CheckpointError(f"{source}: lstm.n_layers = {settings['num_layers']}, but the "
                              f"weight file holds {len(cells)} LSTM layers "
                              f"({', '.join(sorted(cells))}).")


def to_allennlp(backbone, options_file, weight_file, overwrite=False):
    """Writes an ElmoBackbone as an allennlp / bilm-tf options json + hdf5 weights.

    Each file is written beside and renamed into place; one already there is
    replaced only with `overwrite`.
    """
    import h5py

    from keras_ctx.models.elmo.backbone import ElmoBackbone

    if not isinstance(backbone, ElmoBackbone):
        raise CheckpointError(f"to_allennlp writes an ElmoBackbone, not a "
                              f"{type(backbone).__name__}.")
    config = backbone.get_config()
    if config["projection_dim"] is None:
        raise CheckpointError("bilm-tf ELMo always has a projection_dim.")
    for path in (options_file, weight_file):
        if os.path.isdir(path):
            raise CheckpointError(f"{os.fspath(path)} is a directory; give the path of the "
                                  "file to write.")
        if os.path.lexists(path) and not overwrite:
            raise CheckpointError(f"{os.fspath(path)} already exists; pass overwrite=True "
                                  "to replace it, or choose another path.")
    embedder = backbone.token_embedder

    def value(variable):
        return np.asarray(variable.numpy(), "float32")

    with replacing(weight_file, overwrite=True) as staging, h5py.File(staging, "w") as out:
        out["char_embed"] = value(embedder.char_embedding.embeddings)[1:]
        for i, conv in enumerate(embedder.char_convs):
            out[f"CNN/W_cnn_{i}"] = value(conv.kernel)[None]
            out[f"CNN/b_cnn_{i}"] = value(conv.bias)
        if embedder.highway is not None:
            for k, (gate, transform) in enumerate(zip(embedder.highway.transform_gates,
                                                      embedder.highway.transforms)):
                out[f"CNN_high_{k}/W_carry"] = value(gate.kernel)
                out[f"CNN_high_{k}/b_carry"] = value(gate.bias)
                out[f"CNN_high_{k}/W_transform"] = value(transform.kernel)
                out[f"CNN_high_{k}/b_transform"] = value(transform.bias)
        out["CNN_proj/W_proj"] = value(embedder.projection.kernel)
        out["CNN_proj/b_proj"] = value(embedder.projection.bias)
        for layer in range(backbone.num_layers):
            for direction in (0, 1):
                lstm, p = _lstm(backbone, direction, layer), _lstm_path(direction, layer)
                units = lstm.units
                w = np.concatenate([value(lstm.kernel), value(lstm.recurrent_kernel)])
                out[p + "/W_0"] = _gates_ours_to_tf(w, units)
                bias = _gates_ours_to_tf(value(lstm.bias), units)
                bias[2 * units:3 * units] -= 1.0
                out[p + "/B"] = bias
                out[p + "/W_P_0"] = value(lstm.projection_kernel)
    with replacing(options_file, overwrite=True) as staging:
        with open(staging, "w", encoding="utf-8") as handle:
            json.dump(elmo_options_from_backbone(backbone), handle, indent=2)
    return options_file, weight_file


# What the family entry registers: `keras_ctx.convert.from_allennlp` and `convert`'s
# allennlp format reach these through the registry.
ALLENNLP = AllenNLP(from_allennlp, to_allennlp)

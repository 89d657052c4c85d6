"""Original TensorFlow checkpoints of google-research BERT, ALBERT, ELECTRA and XLNet.

A released model is a directory with a TF1 checkpoint `<prefix>.index` +
`<prefix>.data-*` and its config: `bert_config.json` (BERT),
`albert_config.json` (ALBERT), `xlnet_config.json` (XLNet); ELECTRA ships
none, so its sizes are read from the variables' shapes (heads = H / 64, as
its code sets them). The variables carry the names of the original code, e.g.

    bert/embeddings/word_embeddings                         (V, H)
    bert/encoder/layer_0/attention/self/query/kernel        (H, H), in x out
    bert/encoder/layer_0/attention/output/LayerNorm/gamma   (H,)
    bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel  (ALBERT)

Each name is translated to the Hugging Face name of the same tensor (TF
kernels are the transposes of torch Linear weights) and the Hugging Face
converter of the family does the rest, so both formats share one weight map
and one set of checks. Optimizer slots (adam_m, adam_v), global_step and the
pretraining heads (cls/..., discriminator_predictions, lm_loss) are skipped;
any other unknown variable fails.

ELECTRA checkpoints hold both networks: `electra/...` is the discriminator,
`generator/...` the generator (which reads the shared `electra/embeddings`);
`from_tf_checkpoint(directory, generator=True)` loads the generator.
XLNet keeps its relative-attention biases stacked over layers
(`model/transformer/r_w_bias`, (L, heads, head size)); they are split per layer.
"""

import dataclasses
import glob
import json
import os
import re
from typing import Callable, Optional

import numpy as np

from keras_ctx import registry
from keras_ctx.convert.base import CheckpointError, read_json_object
from keras_ctx.convert.huggingface import huggingface_format

# Module paths: (TF regex, HF replacement), per layout; applied to the name
# without its last part (kernel, bias, gamma, beta) after dropping the root.
_ALBERT_LAYER = "encoder.albert_layer_groups.0.albert_layers.0"
LAYER_TF_TO_HF = ((r"^encoder/layer_(\d+)/", r"encoder.layer.\1."),)
LAYER_HF_TO_TF = ((r"^encoder\.layer\.(\d+)\.", r"encoder/layer_\1/"),)
ALBERT_TF_TO_HF = (
        (r"^encoder/transformer/group_0/inner_group_0/attention_1/self/(query|key|value)$",
         _ALBERT_LAYER + r".attention.\1"),
        (r"^encoder/transformer/group_0/inner_group_0/attention_1/output/dense$",
         _ALBERT_LAYER + ".attention.dense"),
        (r"^encoder/transformer/group_0/inner_group_0/LayerNorm$",
         _ALBERT_LAYER + ".attention.LayerNorm"),
        (r"^encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense$",
         _ALBERT_LAYER + ".ffn"),
        (r"^encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense$",
         _ALBERT_LAYER + ".ffn_output"),
        (r"^encoder/transformer/group_0/inner_group_0/LayerNorm_1$",
         _ALBERT_LAYER + ".full_layer_layer_norm"),
        (r"^pooler/dense$", "pooler"),
)
ALBERT_HF_TO_TF = (
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.attention\.(query|key|value)$",
         r"encoder/transformer/group_0/inner_group_0/attention_1/self/\1"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.attention\.dense$",
         "encoder/transformer/group_0/inner_group_0/attention_1/output/dense"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.attention\.LayerNorm$",
         "encoder/transformer/group_0/inner_group_0/LayerNorm"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.ffn$",
         "encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.ffn_output$",
         "encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense"),
        (r"^" + re.escape(_ALBERT_LAYER) + r"\.full_layer_layer_norm$",
         "encoder/transformer/group_0/inner_group_0/LayerNorm_1"),
        (r"^pooler$", "pooler/dense"),
)
EMBEDDING_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")
SKIPPED = re.compile(r"(^global_step$|/adam_[mv]$|/lamb_[mv]$|^cls/|^output_weights$|"
                     r"^output_bias$|^loss/|/Momentum$|^discriminator_predictions/|"
                     r"^generator_predictions/|^model/lm_loss/)")


def layouts():
    """{layout name: TFLayout} of every family that names one in its registry entry."""
    return {name: family.tf_checkpoint
            for name, family in registry.with_tf_checkpoints().items()}


def _layout(name):
    found = layouts()
    if name not in found:
        raise CheckpointError(f"No TF checkpoint layout {name!r}; supported: "
                              f"{', '.join(sorted(found))}.")
    return found[name]


def tf_name_to_hf(name, family, root=None):
    """(HF name, transpose?) of a TF variable name; None for skipped variables."""
    if SKIPPED.search(name):
        return None
    layout = _layout(family)
    root = root or layout.root
    if not name.startswith(root):
        return f"<unknown TF variable {name}>", False
    path, leaf = name[len(root):].rsplit("/", 1)
    if leaf in EMBEDDING_TABLES:
        return f"{path.replace('/', '.')}.{leaf}.weight", False
    for pattern, replacement in layout.tf_to_hf:
        path = re.sub(pattern, replacement, path)
    path = path.replace("/", ".")
    if leaf == "kernel":
        return path + ".weight", True
    if leaf in ("gamma", "beta"):
        return path + (".weight" if leaf == "gamma" else ".bias"), False
    if leaf == "bias":
        return path + ".bias", False
    return f"<unknown TF variable {name}>", False


def hf_name_to_tf(name, family):
    """(TF name, transpose?) of an exported HF name (inverse of tf_name_to_hf)."""
    layout = _layout(family)
    root = layout.root
    path, leaf = name.rsplit(".", 1)
    parent = path.rsplit(".", 1)[-1]
    if parent in EMBEDDING_TABLES:
        return root + path.replace(".", "/"), False
    for pattern, replacement in layout.hf_to_tf:
        path = re.sub(pattern, replacement, path)
    path = path.replace(".", "/")
    if "LayerNorm" in parent or parent.endswith("layer_norm"):
        return f"{root}{path}/{'gamma' if leaf == 'weight' else 'beta'}", False
    if leaf == "weight":
        return f"{root}{path}/kernel", True
    return f"{root}{path}/bias", False


def _checkpoint_prefix(directory):
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(directory)
    if prefix is None:
        indexes = sorted(glob.glob(os.path.join(directory, "*.index")))
        if not indexes:
            raise CheckpointError(f"{directory} has no TensorFlow checkpoint (*.index + "
                                  "*.data-*).")
        prefix = indexes[0][: -len(".index")]
    return prefix


def find_tf_config(directory):
    """(layout, config path or None) of a google-research checkpoint directory, or None."""
    import tensorflow as tf

    for name, layout in layouts().items():
        path = os.path.join(directory, layout.config_file or "")
        if layout.config_file and os.path.isfile(path):
            return name, path
    try:  # ELECTRA ships no config: recognise its variables.
        names = [n for n, _ in tf.train.list_variables(_checkpoint_prefix(directory))]
    except (CheckpointError, tf.errors.OpError, ValueError):
        return None
    return next(((name, None) for name, layout in layouts().items()
                 if layout.signature and layout.signature in names), None)


def read_tf_checkpoint(prefix):
    """{name: numpy array} of a TF checkpoint, with clear errors for broken files."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        names = reader.get_variable_to_shape_map()
        return {name: reader.get_tensor(name) for name in names}
    except (tf.errors.OpError, ValueError, IndexError, RuntimeError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(f"{prefix} is not a readable TensorFlow checkpoint ({message}); "
                              "the download may be incomplete.") from None


def _electra_config(tensors):
    """An HF ELECTRA config inferred from the variables' shapes (ELECTRA ships none)."""
    try:
        vocabulary, embedding = tensors["embeddings.word_embeddings.weight"].shape
        hidden = tensors["encoder.layer.0.attention.output.dense.weight"].shape[0]
        intermediate = tensors["encoder.layer.0.intermediate.dense.weight"].shape[0]
        positions = tensors["embeddings.position_embeddings.weight"].shape[0]
        segments = tensors["embeddings.token_type_embeddings.weight"].shape[0]
    except KeyError as error:
        raise CheckpointError(f"The ELECTRA checkpoint has no variable for {error}; its sizes "
                              "cannot be read.") from None
    layers = 1 + max(int(m.group(1)) for m in
                     (re.match(r"encoder\.layer\.(\d+)\.", k) for k in tensors) if m)
    # google-research/electra configure_pretraining: heads = max(1, H // 64).
    return {"model_type": "electra", "vocab_size": vocabulary, "embedding_size": embedding,
            "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": max(1, hidden // 64), "intermediate_size": intermediate,
            "max_position_embeddings": positions, "type_vocab_size": segments,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12}


def electra_read(variables, config, generator):
    tensors = _electra_tensors(variables, generator)
    return _electra_config(tensors), tensors


def _electra_tensors(variables, generator):
    """HF-named tensors of the discriminator (or generator) of an ELECTRA checkpoint."""
    own, other = ("generator/", "electra/") if generator else ("electra/", "generator/")
    tensors = {}
    for name, value in variables.items():
        if name.startswith("electra/embeddings/"):
            mapped = tf_name_to_hf(name, "electra")
        elif name.startswith(own):
            mapped = tf_name_to_hf(name, "electra", root=own)
        elif name.startswith(other):
            continue  # the other network
        else:
            mapped = tf_name_to_hf(name, "electra")
        if mapped is not None:
            hf_name, transpose = mapped
            tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
    return tensors


_XLNET_STACKED = ("r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")


def _xlnet_tensors(variables, num_layers):
    """HF XLNet names of the original model/transformer/... variables."""
    tensors = {}
    root = "model/transformer/"
    for name, value in variables.items():
        if SKIPPED.search(name):
            continue
        if not name.startswith(root):
            tensors[f"<unknown TF variable {name}>"] = value
            continue
        path = name[len(root):]
        if path == "word_embedding/lookup_table":
            tensors["word_embedding.weight"] = value
        elif path == "mask_emb/mask_emb":
            tensors["mask_emb"] = value
        elif path in _XLNET_STACKED:
            tied = value.ndim == (3 if path == "seg_embed" else 2)  # untie_r=False
            for i in range(num_layers):
                tensors[f"layer.{i}.rel_attn.{path}"] = value if tied else value[i]
        else:
            match = re.match(r"layer_(\d+)/(rel_attn|ff)/(.+)$", path)
            if match is None:
                tensors[f"<unknown TF variable {name}>"] = value
                continue
            layer, block, rest = match.groups()
            p = f"layer.{layer}.{block}."
            if rest in ("LayerNorm/gamma", "LayerNorm/beta"):
                tensors[p + "layer_norm." + ("weight" if rest.endswith("gamma") else "bias")] = \
                    value
            elif block == "rel_attn" and rest in ("q/kernel", "k/kernel", "v/kernel",
                                                   "o/kernel", "r/kernel"):
                tensors[p + rest[0]] = value
            elif block == "ff" and rest in ("layer_1/kernel", "layer_2/kernel"):
                tensors[p + rest.split("/")[0] + ".weight"] = np.ascontiguousarray(value.T)
            elif block == "ff" and rest in ("layer_1/bias", "layer_2/bias"):
                tensors[p + rest.split("/")[0] + ".bias"] = value
            else:
                tensors[f"<unknown TF variable {name}>"] = value
    return tensors


def _xlnet_variables(tensors, num_layers):
    """Inverse of _xlnet_tensors (untied biases, as every released XLNet)."""
    root = "model/transformer/"
    variables = {root + "word_embedding/lookup_table": tensors["word_embedding.weight"],
                 root + "mask_emb/mask_emb": tensors["mask_emb"]}
    for key in _XLNET_STACKED:
        variables[root + key] = np.stack([tensors[f"layer.{i}.rel_attn.{key}"]
                                          for i in range(num_layers)])
    for i in range(num_layers):
        a, f, out = f"layer.{i}.rel_attn.", f"layer.{i}.ff.", f"{root}layer_{i}/"
        for k in "qkvor":
            variables[f"{out}rel_attn/{k}/kernel"] = tensors[a + k]
        variables[out + "rel_attn/LayerNorm/gamma"] = tensors[a + "layer_norm.weight"]
        variables[out + "rel_attn/LayerNorm/beta"] = tensors[a + "layer_norm.bias"]
        for k in ("layer_1", "layer_2"):
            variables[f"{out}ff/{k}/kernel"] = np.ascontiguousarray(tensors[f"{f}{k}.weight"].T)
            variables[f"{out}ff/{k}/bias"] = tensors[f"{f}{k}.bias"]
        variables[out + "ff/LayerNorm/gamma"] = tensors[f + "layer_norm.weight"]
        variables[out + "ff/LayerNorm/beta"] = tensors[f + "layer_norm.bias"]
    return variables


def _xlnet_config_to_hf(config):
    missing = [k for k in ("n_token", "d_model", "n_layer", "n_head", "d_inner")
               if k not in config]
    if missing:
        raise CheckpointError(f"xlnet_config.json lacks {', '.join(missing)}.")
    return {"model_type": "xlnet", "vocab_size": config["n_token"], "d_model": config["d_model"],
            "n_layer": config["n_layer"], "n_head": config["n_head"],
            "d_head": config.get("d_head"), "d_inner": config["d_inner"],
            "ff_activation": config.get("ff_activation", "gelu"),
            "untie_r": config.get("untie_r", True), "layer_norm_eps": 1e-12}


def xlnet_read(variables, config, generator):
    config = _xlnet_config_to_hf(config)
    return config, _xlnet_tensors(variables, config["n_layer"])


def xlnet_write(config, tensors):
    variables = _xlnet_variables(tensors, config["n_layer"])
    config = {"n_token": config["vocab_size"], "d_model": config["d_model"],
              "n_layer": config["n_layer"], "n_head": config["n_head"],
              "d_head": config["d_head"], "d_inner": config["d_inner"],
              "ff_activation": config["ff_activation"], "untie_r": True}
    return config, variables


def renaming_reader(layout_name):
    """BERT-style layouts: each variable renamed to its Hugging Face name."""
    def read(variables, config, generator):
        tensors = {}
        for name, value in variables.items():
            mapped = tf_name_to_hf(name, layout_name)
            if mapped is not None:
                hf_name, transpose = mapped
                tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
        return dict(config, model_type=layout_name), tensors

    return read


def renaming_writer(layout_name):
    def write(config, tensors):
        variables = {}
        for name, value in tensors.items():
            tf_name, transpose = hf_name_to_tf(name, layout_name)
            variables[tf_name] = np.ascontiguousarray(value.T if transpose else value)
        return {k: v for k, v in config.items() if k not in ("model_type", "architectures")}, \
            variables

    return write


@dataclasses.dataclass(frozen=True)
class TFLayout:
    """One family's google-research checkpoint, declared (a `Family.tf_checkpoint`).

    Args:
        name: the layout's name (`from_tf_checkpoint(family=...)`).
        model_type: the Hugging Face model_type whose names `read` gives the
            tensors (its converter builds the backbone); default: `name`.
        config_file: its config's name; None: sizes come from the variables.
        root: the variable-name prefix of the encoder.
        tf_to_hf, hf_to_tf: module-path rewrites (regex, replacement).
        read: (variables, config, generator) -> (HF config, HF-named tensors).
        write: (HF config, HF-named tensors) -> (its config, its variables).
        checkpoint: the checkpoint prefix `to_tf_checkpoint` writes.
        signature: a variable that identifies a config-less checkpoint.
        generator: whether the checkpoint also holds a generator (ELECTRA).
    """

    name: str
    config_file: Optional[str]
    root: str
    read: Callable
    write: Optional[Callable] = None
    tf_to_hf: tuple = ()
    hf_to_tf: tuple = ()
    checkpoint: str = "model.ckpt"
    signature: Optional[str] = None
    generator: bool = False
    model_type: Optional[str] = None

    @property
    def huggingface_type(self):
        return self.model_type or self.name


def from_tf_checkpoint(directory, family=None, generator=False):
    """A backbone with the weights of a google-research checkpoint directory.

    Args:
        directory: the checkpoint (`checkpoint` file, or a single
            `<prefix>.index`) and its bert_config.json / albert_config.json /
            xlnet_config.json (ELECTRA: none), and the vocabulary (vocab.txt,
            spiece.model / 30k-clean.model) when present.
        family: "bert", "albert", "electra" or "xlnet"; by default from the
            config file's name (or ELECTRA's variable names).
        generator: ELECTRA only: load the generator instead of the discriminator.
    """
    directory = os.fspath(directory)
    found = find_tf_config(directory)
    if found is None and family is None:
        names = [l.config_file for l in layouts().values() if l.config_file]
        raise CheckpointError(f"{directory} has no {' or '.join(names)} "
                              "and no ELECTRA checkpoint.")
    family = family or found[0]
    if family not in layouts():
        raise CheckpointError(f"family {family!r} is not supported for TF checkpoints; "
                              f"supported: {', '.join(sorted(layouts()))}.")
    layout = layouts()[family]
    if generator and not layout.generator:
        raise CheckpointError("generator=True is for ELECTRA checkpoints only.")
    config = {}
    if layout.config_file:
        path = os.path.join(directory, layout.config_file)
        if not os.path.isfile(path):
            raise CheckpointError(f"{directory} has no {layout.config_file}.")
        config = read_json_object(path, layout.config_file)
    prefix = _checkpoint_prefix(directory)
    variables = read_tf_checkpoint(prefix)
    try:
        config, tensors = layout.read(variables, config, generator)
    except (TypeError, ValueError, IndexError) as error:  # e.g. a non-integer n_layer
        raise CheckpointError(f"{path if layout.config_file else prefix} does not fit its "
                              f"checkpoint ({type(error).__name__}: {error}).") from None
    source = path if layout.config_file else prefix + " (sizes read from its variables)"
    _, spec = huggingface_format(layout.huggingface_type)
    backbone = spec.convert(config, tensors, source=source)
    from keras_ctx.convert.huggingface import check_tokenizer_fits, tokenizer_from_huggingface

    backbone.tokenizer = tokenizer_from_huggingface(directory, _vocabulary_is_lowercase(directory))
    check_tokenizer_fits(backbone, backbone.tokenizer, directory)
    backbone.family = registry.with_tf_checkpoints()[family].name
    return backbone


def _vocabulary_is_lowercase(directory):
    """Google's releases say cased/uncased only in their names: read it off vocab.txt.

    An uncased WordPiece vocabulary has no capital letters outside its
    bracketed special tokens ([CLS], [unused0], ...). None without vocab.txt.
    """
    path = os.path.join(directory, "vocab.txt")
    if not os.path.isfile(path) or os.path.isfile(os.path.join(directory,
                                                                "tokenizer_config.json")):
        return None
    from keras_ctx.convert.huggingface import read_vocabulary

    tokens = read_vocabulary(path)
    return not any(t != t.lower() for t in tokens if not (t.startswith("[") and t.endswith("]")))


def to_tf_checkpoint(backbone, directory, family=None, overwrite=False):
    """Writes `backbone` as a google-research checkpoint directory (config + TF1 checkpoint).

    The variables get the original code's names (`bert/encoder/layer_0/...`,
    `electra/...` for an ELECTRA discriminator, `model/transformer/...` for
    XLNet), saved with a tf.compat.v1 Saver as `bert_model.ckpt` (ALBERT,
    ELECTRA, XLNet: `model.ckpt`); `from_tf_checkpoint` reads it back exactly.

    Args:
        backbone: the backbone to write.
        directory: where; other files in it are left alone.
        family: the layout ("bert", "albert", "electra", "xlnet"); default:
            the backbone's family.
        overwrite: replace the config, checkpoint and tokenizer files already
            there (without it, any of them existing is an error); tokenizer
            files the new export does not write are removed.

    Returns:
        The directory.
    """
    import shutil
    import tempfile

    import tensorflow as tf

    from keras_ctx.convert.huggingface import (TOKENIZER_FILES, check_writable,
                                               save_tokenizer_files, tokenizer_file_names,
                                               write_json_file)

    if family is None:  # the layout the backbone's family entry names
        entry = registry.of_backbone(backbone)
        family = (entry.tf_checkpoint.name if entry is not None and entry.tf_checkpoint
                  else type(backbone).__name__)
    if family not in layouts():
        raise CheckpointError(f"No TF checkpoint layout for {family!r}; supported: "
                              f"{', '.join(sorted(layouts()))}.")
    layout = layouts()[family]
    directory = os.fspath(directory)
    ours = ((layout.config_file,) if layout.config_file else ()) + (
        "checkpoint", layout.checkpoint + ".index") + TOKENIZER_FILES
    existing = ours + tuple(os.path.basename(p) for p in glob.glob(
        os.path.join(glob.escape(directory), glob.escape(layout.checkpoint) + ".data-*")))
    check_writable(directory, existing, overwrite)
    spec = huggingface_format(layout.huggingface_type)[1]
    if spec.export is None:
        raise CheckpointError(f"The {family!r} layout's model_type has no exporter.")
    config, tensors = spec.export(backbone)
    config, variables = layout.write(config, tensors)
    os.makedirs(directory, exist_ok=True)
    # Saved beside, then renamed into place file by file: a failed save leaves the
    # directory as it was.
    staging = tempfile.mkdtemp(prefix=".tf-checkpoint-", dir=directory)
    try:
        graph = tf.Graph()
        with graph.as_default():
            made = [tf.compat.v1.Variable(value, name=name) for name, value in variables.items()]
            saver = tf.compat.v1.train.Saver(made)
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                saver.save(session, os.path.join(staging, layout.checkpoint),
                           write_meta_graph=False, write_state=False)
        written = tokenizer_file_names(getattr(backbone, "tokenizer", None))
        for name in set(TOKENIZER_FILES) - set(written):
            if os.path.lexists(os.path.join(directory, name)):
                os.remove(os.path.join(directory, name))
        for old in glob.glob(os.path.join(glob.escape(directory),
                                          glob.escape(layout.checkpoint) + ".data-*")):
            os.remove(old)
        for name in sorted(os.listdir(staging)):
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    with open(os.path.join(directory, ".checkpoint.partial"), "w", encoding="utf-8") as handle:
        handle.write(f'model_checkpoint_path: "{layout.checkpoint}"\n'
                     f'all_model_checkpoint_paths: "{layout.checkpoint}"\n')
    os.replace(os.path.join(directory, ".checkpoint.partial"),
               os.path.join(directory, "checkpoint"))
    if layout.config_file:
        write_json_file(os.path.join(directory, layout.config_file), config)
    save_tokenizer_files(getattr(backbone, "tokenizer", None), directory)
    return directory

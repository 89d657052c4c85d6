"""Original TensorFlow checkpoints of google-research BERT, ALBERT, ELECTRA and XLNet.

The format's machinery; each family's convert module declares its `TFLayout`
(ALBERT's path tables, ELECTRA's and XLNet's readers live there).

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
pretraining heads (cls/..., discriminator_predictions, lm_loss) are skipped by
the backbone; any other unknown variable fails. The heads a layout names
(`TFLayout.heads`: BERT's and ALBERT's cls/predictions and cls/seq_relationship,
ELECTRA's discriminator_predictions) are renamed the same way and read by the
family's Hugging Face head layouts (`from_tf_checkpoint(heads=True)`, what
`keras-ctx convert` keeps with the run).

ELECTRA checkpoints hold both networks: `electra/...` is the discriminator,
`generator/...` the generator (which reads the shared `electra/embeddings`);
`from_tf_checkpoint(directory, generator=True)` loads the generator.
XLNet keeps its relative-attention biases stacked over layers
(`model/transformer/r_w_bias`, (L, heads, head size)); they are split per layer.
"""

import dataclasses
import glob
import os
import re
from typing import Callable, Optional

import numpy as np

from keras_ctx import registry
from keras_ctx.common.files import missing_link
from keras_ctx.convert.base import CheckpointError, read_json_object
from keras_ctx.convert.huggingface import huggingface_format

# Module paths: (TF regex, HF replacement), per layout; applied to the name
# without its last part (kernel, bias, gamma, beta) after dropping the root.
# BERT's encoder/layer_N/ (ELECTRA's too); ALBERT's tables live in models/albert/convert.py.
LAYER_TF_TO_HF = ((r"^encoder/layer_(\d+)/", r"encoder.layer.\1."),)
LAYER_HF_TO_TF = ((r"^encoder\.layer\.(\d+)\.", r"encoder/layer_\1/"),)


# google-research/bert's and /albert's run_pretraining.py heads: the masked-LM transform
# and output bias, and the pair classifier (NSP; ALBERT's SOP kept its name).
CLS_TF_HEADS = ("cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
                "cls/predictions/transform/LayerNorm/gamma",
                "cls/predictions/transform/LayerNorm/beta", "cls/predictions/output_bias",
                "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias")


def cls_heads(masked_lm, pair):
    """(TF variable, Hugging Face name) of a google-research checkpoint's `CLS_TF_HEADS`
    (a `TFLayout`'s `heads`), by the family's masked-LM and pair `HeadLayout`s: the names
    transformers' load_tf_weights_in_bert / _albert give them."""
    names = (f"{masked_lm.dense}.weight", f"{masked_lm.dense}.bias", f"{masked_lm.norm}.weight",
             f"{masked_lm.norm}.bias", masked_lm.bias, *(name for name, _ in pair.tensors))
    return tuple(zip(CLS_TF_HEADS, names, strict=True))
EMBEDDING_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")
SKIPPED = re.compile(r"(^global_step$|/adam_[mv]$|/lamb_[mv]$|^cls/|^output_weights$|"
                     r"^output_bias$|^loss/|/Momentum$|^discriminator_predictions/|"
                     r"^generator_predictions/|^model/lm_loss/)")


def layouts():
    """{layout name: TFLayout} of every family that names one in its registry entry."""
    return {name: family.tf_checkpoint
            for name, family in registry.with_tf_checkpoints().items()}


def _layout(name):
    """The TFLayout named `name` (a layout passes through)."""
    if isinstance(name, TFLayout):
        return name
    found = layouts()
    if name not in found:
        raise CheckpointError(f"No TF checkpoint layout {name!r}; supported: "
                              f"{', '.join(sorted(found))}.")
    return found[name]


def tf_name_to_hf(name, family, root=None):
    """(HF name, transpose?) of a TF variable name; None for skipped variables.

    `family`: a TFLayout or its name."""
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
        if len(indexes) > 1:  # no `checkpoint` file says which is the latest
            raise CheckpointError(
                f"{directory} holds {len(indexes)} TensorFlow checkpoints ("
                f"{', '.join(os.path.basename(i) for i in indexes[:3])}) and no `checkpoint` "
                "file naming the one to read; keep one (or write the `checkpoint` file).")
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
    """{name: numpy array} of a TF checkpoint, with clear errors for broken files: the
    index (`PREFIX.index`) or its data (`PREFIX.data-*`), whichever is damaged, is named."""
    import tensorflow as tf

    index = prefix + ".index"
    data = sorted(glob.glob(glob.escape(prefix) + ".data-*"))
    for path in [index, *data]:
        if missing_link(path):
            raise CheckpointError(missing_link(path))
    if not data:
        raise CheckpointError(f"{index} has no data file beside it ({os.path.basename(prefix)}"
                              ".data-00000-of-00001 ...); the download is incomplete.")
    errors = (tf.errors.OpError, ValueError, IndexError, RuntimeError)

    def refuse(files, error):
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(f"{files} is not a readable TensorFlow checkpoint ({message}); "
                              "the download may be incomplete.") from None

    try:
        reader = tf.train.load_checkpoint(prefix)
        names = reader.get_variable_to_shape_map()
    except errors as error:  # the index is read first; a missing data shard is named here
        refuse(index, error)
    try:
        return {name: reader.get_tensor(name) for name in names}
    except errors as error:  # the index was read: what it points into is damaged
        refuse(" / ".join(data), error)


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
        read: (variables, config, generator) -> (HF config, HF-named tensors);
            default: each variable renamed to its Hugging Face name (BERT-style).
        write: (HF config, HF-named tensors) -> (its config, its variables);
            default: each tensor renamed back.
        checkpoint: the checkpoint prefix `to_tf_checkpoint` writes.
        signature: a variable that identifies a config-less checkpoint.
        generator: whether the checkpoint also holds a generator (ELECTRA).
        heads: (TF variable, Hugging Face name) of the pretraining heads it holds
            beside the encoder (its `kernel`s transposed into torch's layout), which
            the family's Hugging Face head layouts read
            (`keras_ctx.convert.heads.pretraining_heads`).
    """

    name: str
    config_file: Optional[str]
    root: str
    tf_to_hf: tuple = ()
    hf_to_tf: tuple = ()
    read: Optional[Callable] = None
    write: Optional[Callable] = None
    checkpoint: str = "model.ckpt"
    signature: Optional[str] = None
    generator: bool = False
    model_type: Optional[str] = None
    heads: tuple = ()

    @property
    def huggingface_type(self):
        return self.model_type or self.name

    def to_huggingface(self, variables, config, generator=False):
        """(HF config, HF-named tensors) of the checkpoint's variables."""
        if self.read is not None:
            return self.read(variables, config, generator)
        tensors = {}
        for name, value in variables.items():
            mapped = tf_name_to_hf(name, self)
            if mapped is not None:
                hf_name, transpose = mapped
                tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
        return dict(config, model_type=self.huggingface_type), tensors

    def head_tensors(self, variables):
        """{Hugging Face name: tensor} of the pretraining heads among `variables`."""
        return {hf_name: np.ascontiguousarray(variables[name].T if name.endswith("/kernel")
                                              else variables[name])
                for name, hf_name in self.heads if name in variables}

    def from_huggingface(self, config, tensors):
        """(its config, its variables) of an HF config and HF-named tensors."""
        if self.write is not None:
            return self.write(config, tensors)
        variables = {}
        for name, value in tensors.items():
            tf_name, transpose = hf_name_to_tf(name, self)
            variables[tf_name] = np.ascontiguousarray(value.T if transpose else value)
        return {k: v for k, v in config.items() if k not in ("model_type", "architectures")}, \
            variables


def from_tf_checkpoint(directory, family=None, generator=False, heads=False):
    """A backbone with the weights of a google-research checkpoint directory.

    Args:
        directory: the checkpoint (`checkpoint` file, or a single
            `<prefix>.index`) and its bert_config.json / albert_config.json /
            xlnet_config.json (ELECTRA: none), and the vocabulary (vocab.txt,
            spiece.model / 30k-clean.model) when present.
        family: "bert", "albert", "electra" or "xlnet"; by default from the
            config file's name (or ELECTRA's variable names).
        generator: ELECTRA only: load the generator instead of the discriminator.
        heads: also return the pretraining heads the checkpoint holds for the
            discriminator or encoder (`TFLayout.heads`): (backbone, {role: arrays}),
            as `keras_ctx.convert.heads.pretraining_heads` gives them.
    """
    directory = os.fspath(directory)
    layout, config, variables, source = _read_checkpoint(directory, family, generator)
    try:
        config, tensors = layout.to_huggingface(variables, config, generator)
    except (TypeError, ValueError, IndexError) as error:  # e.g. a non-integer n_layer
        raise CheckpointError(f"{source} does not fit its checkpoint "
                              f"({type(error).__name__}: {error}).") from None
    _, spec = huggingface_format(layout.huggingface_type)
    backbone = spec.convert(config, tensors, source=source if layout.config_file else
                            source + " (sizes read from its variables)")
    from keras_ctx.convert.huggingface_tokenizers import (check_tokenizer_fits,
                                                          tokenizer_from_huggingface)

    backbone.tokenizer = tokenizer_from_huggingface(directory, _vocabulary_is_lowercase(directory))
    check_tokenizer_fits(backbone, backbone.tokenizer, directory)
    backbone.family = registry.with_tf_checkpoints()[layout.name].name
    if not heads:
        return backbone
    # The layout's heads are the discriminator's (ELECTRA) or the encoder's.
    return backbone, {} if generator else _heads(layout, config, variables, backbone, source)


def tf_checkpoint_heads(directory, backbone):
    """{role: arrays} of the pretraining heads a google-research checkpoint directory holds
    for `backbone`, the encoder (ELECTRA: discriminator) `from_tf_checkpoint` read from it."""
    layout, config, variables, source = _read_checkpoint(os.fspath(directory), None, False)
    config, _ = layout.to_huggingface(variables, config, False)
    return _heads(layout, config, variables, backbone, source)


def _heads(layout, config, variables, backbone, source):
    from keras_ctx.convert.heads import pretraining_heads

    found = layout.head_tensors(variables)
    return pretraining_heads(backbone, config, found, source) if found else {}


def _read_checkpoint(directory, family, generator):
    """(TFLayout, its config file's fields, {variable: array}, the config file or the
    checkpoint prefix) of a google-research checkpoint directory."""
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
    return layout, config, read_tf_checkpoint(prefix), (path if layout.config_file
                                                        else prefix)


def _vocabulary_is_lowercase(directory):
    """Google's releases say cased/uncased only in their names: read it off vocab.txt.

    An uncased WordPiece vocabulary has no capital letters outside its
    bracketed special tokens ([CLS], [unused0], ...). None without vocab.txt.
    """
    path = os.path.join(directory, "vocab.txt")
    if not os.path.isfile(path) or os.path.isfile(os.path.join(directory,
                                                                "tokenizer_config.json")):
        return None
    from keras_ctx.convert.huggingface_tokenizers import read_vocabulary

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

    from keras_ctx.common.files import write_json
    from keras_ctx.convert.huggingface_export import check_writable
    from keras_ctx.convert.huggingface_tokenizers import (TOKENIZER_FILES, save_tokenizer_files,
                                                          tokenizer_file_names)

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
    config, variables = layout.from_huggingface(config, tensors)
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
        write_json(os.path.join(directory, layout.config_file), config, sort_keys=True)
    save_tokenizer_files(getattr(backbone, "tokenizer", None), directory)
    return directory

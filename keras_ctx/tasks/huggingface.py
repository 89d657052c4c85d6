"""Hugging Face classifier checkpoints as task models: *ForSequenceClassification and
*ForTokenClassification read into `SequenceClassifier` / `TokenClassifier`.

Here, above the models, not in `keras_ctx.convert` (whose machinery imports no
model, so that the model handles below the models can read every format).
"""

from keras_ctx import registry
from keras_ctx.convert.base import CheckpointError, TensorReader
from keras_ctx.convert.huggingface import from_huggingface, read_config, read_tensors
from keras_ctx.convert.mapping import Entry, LINEAR, load_weight_map
from keras_ctx.tasks.heads import SequenceClassifier, TokenClassifier


# *ForSequenceClassification heads: each family's `HuggingFace.sequence_classifier`
# names its (transform, logits) Linear prefixes. BERT, ALBERT: one Linear on the
# pooled output; BART: BartClassificationHead, dense + tanh then out_proj on the
# decoder state at the last </s>. The pooling (and the transform's tanh) comes
# from the family (SequenceClassifier(pooling="auto")). *ForTokenClassification:
# one `classifier` Linear, where `HuggingFace.token_classifier` says so.


def _num_labels(config, read, logits):
    if read.has(logits + ".weight"):
        return int(read(logits + ".weight").shape[0])
    raise CheckpointError(f"The checkpoint has no '{logits}.weight': it has no "
                          f"classification head (architectures: {config.get('architectures')}).")


def _classifier_dropout(config):
    for key in ("classifier_dropout", "hidden_dropout_prob", "dropout"):
        if config.get(key) is not None:
            return config[key]
    return 0.1


def classifier_from_huggingface(directory):
    """A keras_ctx task model with the classification head of a HF checkpoint.

    `*ForSequenceClassification` (BERT, ALBERT: one Linear on the pooled
    output; BART: dense + tanh + out_proj on the decoder's last </s>) ->
    `keras_ctx.tasks.SequenceClassifier(pooling="auto")`;
    `*ForTokenClassification` (BERT, ALBERT, RoBERTa, ELECTRA) ->
    `keras_ctx.tasks.TokenClassifier`. The model's `.backbone.tokenizer` is
    the checkpoint's tokenizer.
    """
    config = read_config(directory)
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    kind = next((a for a in architectures if a.endswith(("ForSequenceClassification",
                                                          "ForTokenClassification"))), None)
    if kind is None:
        raise CheckpointError(f"config.json architectures {architectures} name no "
                              "*ForSequenceClassification / *ForTokenClassification model.")
    sequence = kind.endswith("ForSequenceClassification")

    def head_of(model_type):
        found = registry.huggingface(model_type)
        if found is None:
            return None
        spec = found[1]
        if sequence:
            return spec.sequence_classifier
        return (None, "classifier") if spec.token_classifier else None

    if head_of(model_type) is None:
        supported = [t for t in registry.huggingface_model_types() if head_of(t) is not None]
        raise CheckpointError(f"{kind}: the {model_type!r} head is not supported; supported: "
                              f"{', '.join(supported)}.")
    backbone = from_huggingface(directory)
    read = TensorReader(read_tensors(directory))
    transform, logits = head_of(model_type)
    labels = _num_labels(config, read, logits)
    dropout = _classifier_dropout(config)
    if sequence:
        model = SequenceClassifier(backbone, labels, pooling="auto", dropout=dropout)
    else:
        model = TokenClassifier(backbone, labels, dropout=dropout)
    layers = [(model.get_layer("logits"), logits)]
    if transform is not None:
        layers.append((model.get_layer("transform"), transform))
    load_weight_map([entry for layer, prefix in layers
                     for entry in (Entry(layer.kernel, prefix + ".weight", LINEAR),
                                   Entry(layer.bias, prefix + ".bias"))], read)
    return model

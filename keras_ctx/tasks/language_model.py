"""A backbone and its output layer: the id-level model of the text generators."""

import keras


@keras.saving.register_keras_serializable(package="keras_ctx")
class LanguageModel(keras.Model):
    """A backbone and its output layer: inputs -> next-token logits (float32).

    Args:
        backbone: a backbone with `logits(hidden)` (its tied token embedding).
        output: the backbone output the logits read ("sequence_output";
            encoder-decoders "decoder_sequence_output").
    """

    def __init__(self, backbone, output="sequence_output", **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.output_name = output

    def call(self, inputs, training=None):
        hidden = self.backbone(inputs, training=training)[self.output_name]
        return keras.ops.cast(self.backbone.logits(hidden), "float32")

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone),
                "output": self.output_name, "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)

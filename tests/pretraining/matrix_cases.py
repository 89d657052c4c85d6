"""Every pretraining objective as a (make_pretrainer, make_batch) pair for the matrix.

Tiny backbones (hidden 16-32, 1-2 layers, short sequences), dropout off so
that one step is deterministic, global batch 4 (two rows per replica under a
two-replica MirroredStrategy). Batches are hand-made numpy structures in each
objective's own format (a dict, or (inputs, labels[, weights])).
"""

import numpy as np
from keras_ctx.common.optional import tensorflow as tf  # imported when a case uses it

BATCH, LENGTH, V = 4, 12, 40
PREDICT = 3  # masked positions per row


def _random_ids(rng, shape, low=5, high=V):
    return rng.integers(low, high, size=shape).astype("int32")


def _mlm_batch(seed=0, pair_labels=None):
    rng = np.random.default_rng(seed)
    ids = _random_ids(rng, (BATCH, LENGTH))
    ids[:, 0], ids[:, -1] = 2, 3
    padding = np.ones_like(ids)
    padding[1, -3:] = 0  # one padded row: the weights must keep it out
    ids[padding == 0] = 0
    positions = np.stack([rng.choice(np.arange(1, LENGTH - 3), PREDICT, replace=False)
                          for _ in range(BATCH)]).astype("int32")
    weights = np.ones((BATCH, PREDICT), "float32")
    weights[2, -1] = 0.0  # a padded prediction slot
    batch = {"token_ids": ids.copy(), "padding_mask": padding,
             "segment_ids": np.zeros_like(ids), "mask_positions": positions,
             "mask_ids": np.take_along_axis(ids, positions, 1), "mask_weights": weights}
    np.put_along_axis(batch["token_ids"], positions, 4, 1)  # [MASK]
    if pair_labels:
        batch[pair_labels] = rng.integers(0, 2, BATCH).astype("int32")
    return batch


def _bert_config(**extra):
    return dict(vocabulary_size=V, num_layers=2, num_heads=2, hidden_size=32,
                intermediate_size=64, max_sequence_length=16, dropout=0.0, **extra)


def bert():
    from keras_ctx.models import BertBackbone
    from keras_ctx.pretraining import BertPretrainer

    return BertPretrainer(BertBackbone(**_bert_config()))


def roberta():
    from keras_ctx.models import BertBackbone
    from keras_ctx.pretraining import RobertaPretrainer

    return RobertaPretrainer(BertBackbone(**_bert_config()))


def albert():
    from keras_ctx.models import AlbertBackbone
    from keras_ctx.pretraining import AlbertPretrainer

    return AlbertPretrainer(AlbertBackbone(embedding_size=16, **_bert_config()))


def span_bert():
    from keras_ctx.models import BertBackbone
    from keras_ctx.pretraining import SpanBertPretrainer

    return SpanBertPretrainer(BertBackbone(**_bert_config()), max_span_length=8)


def span_bert_batch():
    batch = _mlm_batch(3)
    positions = batch["mask_positions"]
    batch["span_left_positions"] = positions - 1
    batch["span_right_positions"] = positions + 1
    batch["span_offsets"] = np.ones_like(positions)
    return batch


def _electra(stage):
    from keras_ctx.models import ElectraBackbone, electra_generator
    from keras_ctx.pretraining import ElectraPretrainer

    discriminator = ElectraBackbone(**_bert_config(embedding_size=16))
    # A near-zero temperature makes the Gumbel-max sample the generator's
    # argmax: the same tokens whether the batch is on one device or split.
    return ElectraPretrainer(electra_generator(discriminator, 1.0 if stage != "joint" else 0.5),
                             discriminator, temperature=1e-6, stage=stage, seed=0)


def electra():
    return _electra("joint")


def electra_discriminator_stage():
    return _electra("discriminator")


XLNET_MEMORY = 6
XLNET_REUSE = 6  # XLNet's released layout: the first half is reused, half the rows backwards


def xlnet():
    from keras_ctx.models import XLNetBackbone
    from keras_ctx.pretraining import XLNetPretrainer

    backbone = XLNetBackbone(V, 2, 2, 32, 64, dropout=0.0, attention_dropout=0.0,
                             mem_len=XLNET_MEMORY)
    return XLNetPretrainer(backbone, batch_size=BATCH, reuse_len=XLNET_REUSE)


def xlnet_batch(seed=0):
    from keras_ctx.data.permutation import permutation_masks

    ids = _random_ids(np.random.default_rng(seed), (BATCH, LENGTH))
    ids[:, 8], ids[:, -2], ids[:, -1] = 2, 2, 3  # [reuse, A] <sep> B <sep> <cls>
    segments = np.array([[0] * 9 + [1] * 2 + [2]] * BATCH, "int32")
    element = {"token_ids": ids, "segment_ids": segments,
               "is_backward": np.array([0, 1] * (BATCH // 2), "int32")}
    data = permutation_masks(tf.data.Dataset.from_tensors(element), num_predict=4, seed=seed,
                             functional_ids=(2, 3), reuse_len=XLNET_REUSE)
    return next(data.as_numpy_iterator())


BILM_WORDS = "red green blue cyan pink gold grey teal".split()


def bilm(num_sampled=None):
    from keras_ctx.models.elmo.backbone import ElmoBackbone
    from keras_ctx.pretraining.bilm import BiLMPretrainer

    backbone = ElmoBackbone(projection_dim=8, lstm_units=16, filters=[[1, 8], [2, 8]],
                            num_highway_layers=1)
    return BiLMPretrainer(backbone, len(BILM_WORDS) + 4, num_sampled=num_sampled)


def bilm_sampled():
    return bilm(num_sampled=5)


def bilm_batch():
    from keras_ctx.data.vocabulary import bilm_inputs, make_vocabulary

    sentences = ["red green blue", "cyan pink", "gold grey teal red", "blue"]
    out = bilm_inputs(tf.constant(sentences), make_vocabulary(BILM_WORDS), 8)
    return {k: v.numpy() for k, v in out.items()}


def _gpt():
    from keras_ctx.models.gpt.backbone import GPTBackbone

    return GPTBackbone(vocabulary_size=V, num_layers=2, num_heads=2, hidden_size=32,
                       intermediate_size=64, max_sequence_length=16, dropout=0.0)


def causal_lm():
    from keras_ctx.pretraining import CausalLMPretrainer

    return CausalLMPretrainer(_gpt())


def causal_lm_batch():
    rng = np.random.default_rng(5)
    ids = _random_ids(rng, (BATCH, LENGTH))
    padding = np.ones_like(ids)
    padding[0, -4:] = 0
    return {"token_ids": ids * padding, "padding_mask": padding}



def _xlm(causal):
    from keras_ctx.models import XLMBackbone

    return XLMBackbone(V, 2, 2, 32, 64, num_languages=2, causal=causal, dropout=0.0,
                       attention_dropout=0.0, max_sequence_length=16)


def xlm_mlm():
    from keras_ctx.pretraining import MaskedLMPretrainer

    # XLM's MLM/TLM (Lample & Conneau 2019, Sec. 3.3): XLM's PredLayer, no BERT transform.
    return MaskedLMPretrainer(_xlm(causal=False), head_transform=False)


def xlm_clm():
    from keras_ctx.pretraining import CausalLMPretrainer

    # XLM's CLM (Sec. 3.2): causal attention, language ids an input, the tied PredLayer + bias.
    return CausalLMPretrainer(_xlm(causal=True), output_bias=True)


def _with_languages(batch):
    """`batch` with XLM's position ids and one language per row (rows alternate 0, 1)."""
    ids = batch["token_ids"]
    batch["position_ids"] = np.tile(np.arange(ids.shape[1], dtype="int32"), (ids.shape[0], 1))
    batch["language_ids"] = (np.arange(ids.shape[0], dtype="int32")[:, None] % 2
                             * np.ones_like(ids, "int32"))
    return batch

def gpt_fine_tuner():
    from keras_ctx.tasks import GPTFineTuner

    return GPTFineTuner(_gpt(), num_classes=3, dropout=0.0)


def gpt_fine_tuner_batch():
    return causal_lm_batch(), np.array([0, 2, 1, 2], "int32")


def _seq2seq_batch(seed=6):
    rng = np.random.default_rng(seed)
    x = {"encoder_token_ids": _random_ids(rng, (BATCH, LENGTH)),
         "encoder_padding_mask": np.ones((BATCH, LENGTH), "int32"),
         "decoder_token_ids": _random_ids(rng, (BATCH, 8)),
         "decoder_padding_mask": np.ones((BATCH, 8), "int32")}
    x["encoder_padding_mask"][3, -2:] = 0
    x["decoder_padding_mask"][1, -3:] = 0
    labels = _random_ids(rng, (BATCH, 8))
    return x, labels, x["decoder_padding_mask"].astype("float32")


SEQ2SEQ = dict(vocabulary_size=V, num_layers=1, num_heads=2, hidden_size=32,
               intermediate_size=64, dropout=0.0)


def t5():
    from keras_ctx.models.t5.backbone import T5Backbone
    from keras_ctx.pretraining import Seq2SeqPretrainer

    return Seq2SeqPretrainer(T5Backbone(**SEQ2SEQ))


def t5_v1_1():
    from keras_ctx.models.t5.backbone import T5Backbone
    from keras_ctx.pretraining import Seq2SeqPretrainer

    # T5 v1.1: gated GELU, untied output, heads x head_size != hidden_size.
    return Seq2SeqPretrainer(T5Backbone(**SEQ2SEQ, head_size=8, gated_feedforward=True,
                                        activation="gelu_approximate", tie_embeddings=False))


def bart():
    from keras_ctx.models.bart.backbone import BartBackbone
    from keras_ctx.pretraining import Seq2SeqPretrainer

    return Seq2SeqPretrainer(BartBackbone(**SEQ2SEQ, max_sequence_length=16))


def translation():
    from keras_ctx.models.cove.backbone import CoveBackbone
    from keras_ctx.pretraining import TranslationPretrainer

    return TranslationPretrainer(CoveBackbone(V, embedding_size=8, hidden_size=8),
                                 target_vocabulary_size=V, target_embedding_dim=8,
                                 decoder_units=16)


def translation_batch():
    x, labels, weights = _seq2seq_batch(7)
    return x, labels * x["decoder_padding_mask"]


def awd_lstm_lm():
    from keras_ctx.models import AwdLstmBackbone
    from keras_ctx.pretraining import AwdLstmLMPretrainer

    return AwdLstmLMPretrainer(AwdLstmBackbone(
        V, embedding_size=8, hidden_size=16, num_layers=2, embedding_dropout=0.0,
        input_dropout=0.0, hidden_dropout=0.0, weight_dropout=0.0, output_dropout=0.0,
        lstm_implementation="loop"))


def awd_lstm_lm_carried(batch_size=BATCH):
    """The LM with its LSTM states carried over the stream (truncated BPTT)."""
    from keras_ctx.pretraining import AwdLstmLMPretrainer

    return AwdLstmLMPretrainer(awd_lstm_lm().backbone, batch_size=batch_size,
                               carry_state=True)


def awd_lstm_stream_batch():
    """A `BpttStream` batch: explicit next tokens, their weights, the LR scale."""
    x = causal_lm_batch()
    x["learning_rate_scale"] = np.full((BATCH,), 0.75, "float32")
    return x, np.roll(x["token_ids"], -1, axis=1), x["padding_mask"].astype("float32")


def cvt():
    from keras_ctx.models import CvtEncoder
    from keras_ctx.pretraining import CrossViewTrainer

    return CrossViewTrainer(CvtEncoder(V, embedding_size=8, first_layer_size=8,
                                       second_layer_size=6, filters=[[2, 4]],
                                       character_embedding_size=4, max_characters_per_token=6,
                                       dropout=0.0, lstm_implementation="loop"),
                            {"a": 3, "b": 2}, hidden_size=8,
                            unlabelled_dropout=0.0)  # random masks differ under XLA


def cvt_batch():
    rng = np.random.default_rng(8)

    def inputs():
        padding = np.ones((BATCH, LENGTH), "int32")
        padding[1, -3:] = 0
        x = {"token_ids": _random_ids(rng, (BATCH, LENGTH)) * padding, "padding_mask": padding}
        x["character_ids"] = rng.integers(1, 262, x["token_ids"].shape + (6,)).astype("int32")
        x["character_ids"][x["padding_mask"] == 0] = 0
        return x

    x, u, tags = inputs(), inputs(), rng.integers(0, 3, (BATCH, LENGTH)).astype("int32")
    return {"labelled": {"a": (x, tags), "b": (x, tags % 2)}, "unlabelled": {"a": u, "b": x}}


def mad_x_language_adapter():
    from keras_ctx.models import BertBackbone
    from keras_ctx.peft import AdapterMaskedLMPretrainer, add_adapter, train_only

    backbone = BertBackbone(**_bert_config())
    add_adapter(backbone, "lang", "madx_language")  # with the invertible adapter
    pretrainer = AdapterMaskedLMPretrainer(backbone)
    train_only(pretrainer, adapters=["lang"])  # MAD-X: the backbone frozen
    return pretrainer


# ELECTRA's lambda = 50 overflows float16 gradients at Keras' first loss scale
# (2^15): the LossScaleOptimizer skips steps and halves the scale until 2^9;
# start there to check the step that is applied.
OPTIONS = {"electra": {"initial_loss_scale": 2**9},
           "electra_discriminator_stage": {"initial_loss_scale": 2**9}}
# XLA draws other random numbers than TensorFlow's kernels for the same seed:
# the sampled-softmax candidates (and so the update) differ by design.
NOT_CHECKED = {"bilm_sampled_softmax": ("xla",)}

CASES = {
    "bert": (bert, lambda: _mlm_batch(0, "next_sentence_labels")),
    "roberta": (roberta, lambda: _mlm_batch(1)),
    "albert": (albert, lambda: _mlm_batch(2, "sentence_order_labels")),
    "span_bert": (span_bert, span_bert_batch),
    "electra": (electra, lambda: _mlm_batch(4)),
    "electra_discriminator_stage": (electra_discriminator_stage, lambda: _mlm_batch(4)),
    "xlnet": (xlnet, xlnet_batch),
    "bilm": (bilm, bilm_batch),
    "bilm_sampled_softmax": (bilm_sampled, bilm_batch),
    "causal_lm": (causal_lm, causal_lm_batch),
    "gpt_fine_tuner": (gpt_fine_tuner, gpt_fine_tuner_batch),
    "t5": (t5, _seq2seq_batch),
    "t5_v1_1": (t5_v1_1, _seq2seq_batch),
    "bart": (bart, _seq2seq_batch),
    "translation": (translation, translation_batch),
    "awd_lstm_lm": (awd_lstm_lm, causal_lm_batch),
    "awd_lstm_lm_carried": (awd_lstm_lm_carried, causal_lm_batch),
    "awd_lstm_lm_stream": (awd_lstm_lm_carried, awd_lstm_stream_batch),
    "cvt": (cvt, cvt_batch),
    "mad_x_language_adapter": (mad_x_language_adapter, lambda: _mlm_batch(1)),
    "xlm_mlm": (xlm_mlm, lambda: _with_languages(_mlm_batch(3))),
    "xlm_clm": (xlm_clm, lambda: _with_languages(causal_lm_batch())),
}
# One case per way of computing losses: the default runs; the variants (RoBERTa,
# ALBERT, BART, ELECTRA's second stage, XLM's MLM and CLM, ...) with -m slow.
FAST = ("bert", "span_bert", "electra", "xlnet", "bilm", "causal_lm", "gpt_fine_tuner", "t5",
        "translation")


def _carried_under_replicas(strategy, batches, make, carried, axis):
    """A carried variable after `batches` under `strategy` vs one device per half-batch.

    `make(rows)` builds the pretrainer for batches of `rows`; `carried(model)`
    is its carried variable, whose axis `axis` runs over the batch rows. The
    learning rate is 0, so that the weights stay equal and only the carried
    variable moves on. Returns (max |difference|, max |value|).
    """
    import keras

    def run(rows, strategy_):
        keras.utils.set_random_seed(0)
        with strategy_.scope():
            model = make(rows.stop - rows.start)
            model.compile(optimizer=keras.optimizers.SGD(0.0))
        data = tf.data.Dataset.from_tensor_slices(
            {k: np.stack([b[k][rows] for b in batches]) for k in batches[0]})
        model.fit(data, epochs=1, verbose=0, shuffle=False)
        return keras.ops.convert_to_numpy(carried(model))

    default = tf.distribute.get_strategy()
    half = BATCH // 2
    want = np.concatenate([run(slice(0, half), default), run(slice(half, BATCH), default)],
                          axis=axis)
    got = run(slice(0, BATCH), strategy)
    return float(np.abs(got - want).max()), float(np.abs(want).max())


def xlnet_memory_under_replicas(strategy, steps=2):
    """XLNet's carried memory under `strategy` vs one device per half-batch."""
    from keras_ctx.models import XLNetBackbone
    from keras_ctx.pretraining import XLNetPretrainer

    def make(rows):
        backbone = XLNetBackbone(V, 2, 2, 32, 64, dropout=0.0, attention_dropout=0.0,
                                 mem_len=XLNET_MEMORY)
        return XLNetPretrainer(backbone, batch_size=rows, reuse_len=XLNET_REUSE)

    return _carried_under_replicas(strategy, [xlnet_batch(seed) for seed in range(steps)],
                                   make, lambda model: model.memory, axis=1)


def awd_lstm_state_under_replicas(strategy, steps=2):
    """AwdLstmLMPretrainer's carried LSTM states under `strategy` vs one device per half."""
    return _carried_under_replicas(strategy, [causal_lm_batch() for _ in range(steps)],
                                   awd_lstm_lm_carried, lambda model: model.state, axis=0)


def xla_under_replicas(strategy):
    """(TensorFlow's own error for a jit-compiled replica step, or None; the Pretrainer's)."""
    with strategy.scope():
        variable = tf.Variable(1.0)

    @tf.function
    def step(x):
        def replica(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(x * variable)
            return tape.gradient(loss, variable)

        return strategy.run(tf.function(replica, jit_compile=True), (x,))

    try:  # no Keras, no keras_ctx
        step(tf.ones(4))
        tensorflow_error = None
    except tf.errors.InvalidArgumentError as error:
        tensorflow_error = [line for line in str(error).splitlines()
                            if "Trying to access resource" in line or "known_issues" in line]
    try:
        with strategy.scope():
            causal_lm().compile(optimizer="sgd", jit_compile=True)
        ours = None
    except ValueError as error:
        ours = str(error)
    return tensorflow_error, ours


def main():
    """Measures every case under MirroredStrategy over two logical CPUs; prints JSON."""
    import json
    import sys

    from keras_ctx import testing

    testing.use_logical_cpus(2)

    names = sys.argv[1:] or list(CASES)
    out = {}
    for name in names:
        out[name] = testing.measure_pretrainer(*CASES[name], checks=("mirrored",))
    strategy = testing.mirrored_cpu_strategy()
    if "awd_lstm_lm_carried" in names:
        out["awd_lstm_state"] = awd_lstm_state_under_replicas(strategy)
    if "xlnet" not in names:  # the variants' run: no extras
        print(json.dumps(out))
        return
    out["xlnet_memory"] = xlnet_memory_under_replicas(strategy)
    out["xla"] = xla_under_replicas(strategy)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

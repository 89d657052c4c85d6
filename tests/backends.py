"""Runs keras_ctx's model side on one Keras backend in a subprocess, for tests comparing backends.

Keras picks its backend once, at import, and the test process runs TensorFlow:
a test reaches JAX or PyTorch through `run_on_backend("jax" or "torch", job, ...)`, which starts
`python -m tests.backends` with KERAS_BACKEND set (and, with
`without_tensorflow=True`, a meta-path finder that makes `tensorflow`
unimportable, as if it were not installed). Each job writes its arrays to an
.npz the test reads back.
"""

import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BlockTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import tensorflow` (and tensorflow_text, tensorflow_datasets) fails as if absent.

    `importlib.util.find_spec` gets a spec without a file (torch's dynamo asks it for
    every library it skips, TensorFlow among them, at import); importing it raises
    ModuleNotFoundError as an absent package does.
    """

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text", "tensorflow_datasets"):
            return importlib.machinery.ModuleSpec(name, self, origin=None)
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)

    def exec_module(self, module):
        raise ModuleNotFoundError(f"No module named {module.__name__!r}")


def run_on_backend(backend, job, arguments, without_tensorflow=False, timeout=600, devices=1):
    """Runs `JOBS[job](**arguments)` under KERAS_BACKEND=`backend` (on JAX over `devices`
    virtual CPU devices); its stdout's last line."""
    # XLA:CPU's compile time is most of a tiny model's run on JAX (each op and
    # initializer compiles once per shape): skip LLVM's expensive passes.
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=ROOT,
               TF_CPP_MIN_LOG_LEVEL="2", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_backend_optimization_level=0 "
                         "--xla_llvm_disable_expensive_passes=true "
                         f"--xla_force_host_platform_device_count={devices}")
    command = [sys.executable, "-m", "tests.backends", job, json.dumps(arguments)]
    if without_tensorflow:
        command.append("--without-tensorflow")
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (
        f"{job} on {backend} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""


def slow_on(*backends):
    """`pytest.mark.slow` when the suite runs on one of `backends` (a learning test that
    fits for minutes there: torch runs the step eagerly), else no mark. The cheaper form
    on every backend: tests/pretraining/test_matrix.py's one step per objective."""
    import keras
    import pytest

    if keras.backend.backend() in backends:
        return pytest.mark.slow
    return lambda test: test


def first_batch(dataset):
    """The first batch of a tf.data `dataset` as writable NumPy arrays: what a model on any
    Keras backend takes (a torch model refuses TensorFlow tensors)."""
    import keras

    return keras.tree.map_structure(np.array, next(iter(dataset)))


def run_script(backend, script, *arguments, timeout=600):
    """Runs the Python source `script` (argv: `arguments`) under KERAS_BACKEND=`backend`;
    the JSON its stdout's last line holds."""
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
               TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script, *arguments], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"on {backend}:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the jobs

def numpy_initial_values():
    """Keras' JAX random draws for initial values replaced by numpy's (this process only).

    For jobs that overwrite every weight: XLA compiles Keras' JAX random
    number generator once per weight shape (57 of 100 s for the tiny
    backbones); numpy draws none.
    """
    import keras

    if keras.backend.backend() != "jax":
        return  # compiles nothing per shape
    import jax.numpy as jnp
    import keras.src.backend.jax.random as jax_random

    def draw(shape, *args, dtype=None, seed=None, **kwargs):
        values = np.random.default_rng(0).standard_normal(shape) * 0.02
        return jnp.asarray(values, dtype=dtype or "float32")

    for name in ("normal", "uniform", "truncated_normal"):
        setattr(jax_random, name, draw)


def tiny_family_backbone(family, seed=0):
    """The family's first preset shrunk to `tests.models.test_backbones.TINY`, seeded."""
    import keras

    from keras_ctx import families
    from keras_ctx.models.presets import preset_config
    from tests.tiny_backbones import TINY

    preset = next(iter(families.get(family).presets))
    backbone_cls, config = preset_config(preset)
    config.update(TINY[family])
    keras.utils.set_random_seed(seed)
    return backbone_cls, config, backbone_cls(**config)


def float_outputs(outputs):
    """{name: numpy} of a backbone's outputs; lists (hidden_states) as name/i."""
    import keras

    flat = {}
    for name, value in outputs.items():
        for i, tensor in enumerate(value if isinstance(value, (list, tuple)) else [value]):
            key = f"{name}/{i}" if isinstance(value, (list, tuple)) else name
            flat[key] = np.asarray(keras.ops.convert_to_numpy(tensor), "float32")
    return flat


PROMPT = np.array([[5, 7, 9, 0], [11, 3, 0, 0]], "int32")  # right-padded, ids < 50


def greedy_tokens(backbone):
    """Greedy continuations of `PROMPT` by a decoder (GPT) or an encoder-decoder (T5,
    BART) backbone; None for a backbone that does not generate."""
    from keras_ctx import generation

    if hasattr(backbone, "call_with_cache"):
        out = generation.generate(backbone, PROMPT, PROMPT > 0, max_length=10)
    elif hasattr(backbone, "decode_with_cache"):
        out = generation.generate_seq2seq(backbone, PROMPT, PROMPT > 0, max_length=8)
    else:
        return None
    return np.asarray(out["token_ids"])


def backbone_outputs(weights, out, generating=None):
    """Every registered family's tiny backbone with the weights in `weights` (.npz written
    by the TensorFlow side: family/i for i-th weight, family/input/name): its outputs,
    and its greedy tokens where it generates (only `generating` families if given), to `out`."""
    from keras_ctx import families

    numpy_initial_values()
    stored = np.load(weights)
    arrays = {}
    for family in families.names():
        _, _, backbone = tiny_family_backbone(family)
        inputs = {k.split("/", 2)[2]: stored[k] for k in stored.files
                  if k.startswith(f"{family}/input/")}
        backbone(inputs)  # built
        backbone.set_weights([stored[f"{family}/{i}"] for i in range(len(backbone.weights))])
        for name, value in float_outputs(backbone(inputs)).items():
            arrays[f"{family}/{name}"] = value
        tokens = greedy_tokens(backbone) if family in (generating or [family]) else None
        if tokens is not None:
            arrays[f"{family}/greedy_tokens"] = tokens
    np.savez(out, **arrays)


def backbone_contracts(families_to_test):
    """`keras_ctx.testing.run_backbone_test` for each family, on this process's backend."""
    from keras_ctx.testing import run_backbone_test
    from tests.tiny_backbones import backbone_inputs

    for family in families_to_test:
        backbone_cls, config, backbone = tiny_family_backbone(family)
        run_backbone_test(backbone_cls, config, backbone_inputs(backbone, np.random.default_rng(0)))
        print("contract", family, flush=True)


MINILM_IDS = np.array([[101, 7592, 2088, 1012, 102, 0], [101, 2023, 2003, 1037, 3231, 102]],
                      "int32")


def model_side(minilm, weights, out):
    """What works without TensorFlow: a preset, a converted safetensors checkpoint
    (`minilm`, all-MiniLM-L6-v2), a task on token ids, greedy generation of the tiny
    GPT-2 with the weights in `weights`. Arrays to `out`."""
    import keras

    import keras_ctx

    preset = keras_ctx.models.from_preset("bert-tiny")
    assert preset.count_params() == 4385920  # the preset's published size
    converted = keras_ctx.convert.from_huggingface(minilm)
    mask = (MINILM_IDS > 0).astype("int32")
    inputs = {"token_ids": MINILM_IDS, "padding_mask": mask,
              "segment_ids": np.zeros_like(MINILM_IDS)}
    arrays = {"minilm/sequence_output": float_outputs(converted(inputs))["sequence_output"]}
    # Eager id checks hold on JAX too (XLA would clamp an id past the table to its last row).
    for bad in (converted.vocabulary_size, -1):
        try:
            converted(dict(inputs, token_ids=np.where(MINILM_IDS == 1012, bad, MINILM_IDS)))
        except ValueError as error:
            assert f"must be in [0, {converted.vocabulary_size})" in str(error), error
        else:
            raise AssertionError(f"token id {bad} was not refused")
    keras.utils.set_random_seed(0)
    classifier = keras_ctx.tasks.SequenceClassifier(converted, num_classes=3, dropout=0.0)
    arrays["classifier/logits"] = np.asarray(keras.ops.convert_to_numpy(classifier(inputs)))
    arrays["classifier/kernel"], arrays["classifier/bias"] = classifier.get_weights()[-2:]
    stored = np.load(weights)
    _, _, gpt2 = tiny_family_backbone("gpt2")
    gpt2.set_weights([stored[f"gpt2/{i}"] for i in range(len(gpt2.weights))])
    arrays["gpt2/greedy_tokens"] = greedy_tokens(gpt2)
    np.savez(out, **arrays)


def layer_outputs(out):
    """`tests.layers.jax_cases`' outputs on this backend, which of them ran
    `keras.ops.dot_product_attention` (counted by a wrapper), and its texts as
    inputs (strings through TensorFlow's tokenizer, numpy ids out)."""
    import keras

    from tests.layers import jax_cases

    fused = []
    original = keras.ops.dot_product_attention

    def counted(*args, **kwargs):
        fused.append(1)
        return original(*args, **kwargs)

    keras.ops.dot_product_attention = counted
    arrays = {}
    for name in jax_cases.CASES:
        before = len(fused)
        arrays[name] = jax_cases.run(name)
        arrays[f"{name}/fused"] = np.array(len(fused) > before)
    arrays.update(jax_cases.texts_as_inputs())
    np.savez(out, **arrays)


# Token ids of the peft / quantization / task jobs: (2, 6), the second row padded.
TASK_IDS = np.array([[2, 5, 7, 9, 3, 11], [4, 8, 6, 12, 0, 0]], "int32")
QUANTIZATION_MODES = ("int8", "int4", "float8")


def _task_inputs():
    return {"token_ids": TASK_IDS, "padding_mask": (TASK_IDS > 0).astype("int32"),
            "segment_ids": np.zeros_like(TASK_IDS)}


def peft_task_models(modes=QUANTIZATION_MODES):
    """Tiny BERT models on token ids, built alike on any backend: {name: model}.

    MAD-X's language (invertible) and task adapters under a sequence
    classifier, LoRA on the attention's query/value under a token classifier,
    Houlsby adapters under a span answerer, and one plain backbone per
    quantization mode in `modes`.
    """
    from keras_ctx import peft, tasks

    def bert():
        return tiny_family_backbone("bert")[2]

    with_adapters, with_houlsby = bert(), bert()
    peft.add_adapter(with_adapters, "lang", "madx_language")
    peft.add_adapter(with_adapters, "task", "madx_task")
    peft.add_adapter(with_houlsby, "task", "houlsby")
    with_lora = bert()
    peft.enable_lora(with_lora, 2, ["*self_attention/query", "*self_attention/value"])
    models = {"adapters": tasks.SequenceClassifier(with_adapters, 3, dropout=0.0),
              "lora": tasks.TokenClassifier(with_lora, 4, dropout=0.0),
              "span": tasks.SpanQuestionAnswerer(with_houlsby)}
    models.update({mode: bert() for mode in modes})
    return models


def _outputs(model, inputs):
    import keras

    value = model(inputs)
    if isinstance(value, dict):
        value = value["sequence_output"]
    return np.asarray(keras.ops.convert_to_numpy(value), "float32")


def string_task_refusal():
    """What a string-in task's `predict` says on this backend ("" when it runs)."""
    from keras_ctx.tasks import text
    from tests.tasks.text_fixtures import backbone, tokenizer

    classifier = text.TextClassifier(backbone("bert"), tokenizer("bert"), num_classes=2,
                                     sequence_length=8)
    try:
        classifier.predict(["a fine film", "a dull film"], verbose=0)
    except RuntimeError as error:
        return str(error)
    return ""


def peft_task_outputs(out, weights=None, fit=False, modes=QUANTIZATION_MODES):
    """Outputs of `peft_task_models` on `TASK_IDS` to `out`: with the weights in `weights`
    (an .npz of name/i), else with their own, written to out's `weights.npz` beside it.
    The quantization models quantize after their float weights are set.

    With `fit`: fine-tunes only the adapters (and the classifier) and only the LoRA
    factors (and the classifier) on numpy batches, recording each epoch's loss and
    the largest change of any frozen weight, and what a string-in task says."""
    import keras

    from keras_ctx import peft

    numpy_initial_values() if weights else None
    models, inputs = peft_task_models(modes), _task_inputs()
    stored = np.load(weights) if weights else None
    arrays, written = {}, {}
    for name, model in models.items():
        if stored is not None:
            model.set_weights([stored[f"{name}/{i}"] for i in range(len(model.weights))])
        else:  # LoRA's B starts at zero, adapters near identity: moved so they count
            rng = np.random.default_rng(1)
            model.set_weights([w + rng.standard_normal(w.shape).astype(w.dtype) * 0.05
                               for w in model.get_weights()])
            written.update({f"{name}/{i}": w for i, w in enumerate(model.get_weights())})
        if name in modes:
            model.quantize(name)
        arrays[name] = _outputs(model, inputs)
    if written:
        np.savez(os.path.join(os.path.dirname(out), "weights.npz"), **written)
    if fit:
        arrays.update(_fine_tune(models["adapters"], peft.train_only(
            models["adapters"], adapters=["task"], keep=[models["adapters"].get_layer("logits")]),
            "adapters", np.array([0, 2]), keras.losses.SparseCategoricalCrossentropy(True)))
        arrays.update(_fine_tune(models["lora"], peft.train_only(
            models["lora"], lora=True, keep=[models["lora"].get_layer("logits")]),
            "lora", TASK_IDS % 4, keras.losses.SparseCategoricalCrossentropy(True)))
        arrays["strings/refusal"] = np.array(string_task_refusal())
    np.savez(out, **arrays)


def _fine_tune(model, trainable_count, name, labels, loss):
    """`fit` on numpy inputs: {name/losses, name/frozen_change, name/trainable}."""
    import keras

    frozen = [(v, np.array(v.numpy())) for v in model.weights if not v.trainable]
    model.compile(keras.optimizers.Adam(3e-2), loss)
    history = model.fit(_task_inputs(), labels, epochs=8, batch_size=2, verbose=0)
    change = max(float(np.max(np.abs(np.asarray(v.numpy()) - before))) for v, before in frozen)
    return {f"{name}/losses": np.array(history.history["loss"]),
            f"{name}/frozen_change": np.array(change),
            f"{name}/trainable": np.array(trainable_count)}


def export_classifier(weights, out):
    """`export_saved_model` of the adapters' classifier of `peft_task_models` with the
    weights in `weights`, its length fixed to TASK_IDS'; a free length and `generation`
    refused on JAX (their messages to `out`/refusals.json)."""
    from keras_ctx.export import ExportError, Generation, export_saved_model

    numpy_initial_values()
    model = peft_task_models(modes=())["adapters"]
    stored = np.load(weights)
    model.set_weights([stored[f"adapters/{i}"] for i in range(len(model.weights))])
    refusals = []
    for kwargs in ({}, {"sequence_length": TASK_IDS.shape[1], "generation": Generation(4)}):
        try:
            export_saved_model(model, os.path.join(out, "refused"), **kwargs)
        except ExportError as error:
            refusals.append(str(error))
    with open(os.path.join(out, "refusals.json"), "w") as handle:
        json.dump(refusals, handle)
    export_saved_model(model, os.path.join(out, "jax"), sequence_length=TASK_IDS.shape[1])


def transfer_outputs(weights, out):
    """tests/tasks/transfer_cases.py from `weights`' start: the weights after each
    unfreezing epoch, the layer-rate AdamW changes, a plain Keras model's refusal."""
    from tests.tasks import transfer_cases

    stored = np.load(weights)
    start = [stored[str(i)] for i in range(len(stored.files))]
    _, after, _ = transfer_cases.snapshots(start)
    _, changes = transfer_cases.layer_rate_updates(start)
    np.savez(out, **{f"{epoch}/{i}": w for epoch, weights in enumerate(after)
                     for i, w in enumerate(weights)},
             **{f"layer_rates/{i}": change for i, change in enumerate(changes)},
             refusal=np.array(transfer_cases.plain_keras_refusal()))


def evaluation_scores(out):
    """score_continuations against the token-by-token numpy log-likelihoods of
    tests/evaluation/test_evaluation.py, jitted and not: the largest differences."""
    from keras_ctx.evaluation import score_continuations
    from tests.evaluation_cases import SHAPES, by_hand, numpy_model

    contexts = [[3, 7, 1, 4, 9, 2], [5], [8, 8, 2, 6, 1, 0, 11, 12, 13]]
    continuations = [[12, 4, 4], [7, 19], [2]]
    errors = {}
    for kind in sorted(SHAPES):
        backbone, log_probs = numpy_model(kind)
        want = [by_hand(log_probs, c, t) for c, t in zip(contexts, continuations)]
        for jit_compile in (True, False):
            got = score_continuations(backbone, contexts, continuations, batch_size=2,
                                      jit_compile=jit_compile)
            errors[f"{kind}/{jit_compile}"] = max(
                abs(got["log_likelihood"][i] - total) for i, (total, _) in enumerate(want))
            errors[f"{kind}/{jit_compile}/greedy"] = float(
                got["is_greedy"].tolist() != [greedy for _, greedy in want])
    with open(out, "w") as handle:
        json.dump(errors, handle)


def token_id_refusals(out):
    """What a compiled backbone, task and pretrainer say to a token id past the vocabulary
    in each way data enters (JAX's gathers fill such a row with NaN: nothing may pass)."""
    import keras

    from keras_ctx import generation
    from keras_ctx.pretraining import MaskedLMPretrainer
    from keras_ctx.tasks import SequenceClassifier

    class _Batches(keras.utils.PyDataset):
        def __init__(self, batches):
            super().__init__()
            self.batches = batches

        def __len__(self):
            return len(self.batches)

        def __getitem__(self, index):
            return self.batches[index]

    _, _, gpt2 = tiny_family_backbone("gpt2")
    _, _, t5 = tiny_family_backbone("t5")
    backbone_cls, config, _ = tiny_family_backbone("bert")
    inputs = _task_inputs()
    bad = dict(inputs, token_ids=np.where(TASK_IDS == 7, config["vocabulary_size"], TASK_IDS))
    labels = np.array([0, 1])
    classifier = SequenceClassifier(backbone_cls(**config), num_classes=2)
    classifier.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    pretrainer = MaskedLMPretrainer(backbone_cls(**config))
    pretrainer.compile("adam")
    positions = np.array([[1, 2], [1, 3]], "int32")
    masked = {"mask_positions": positions, "mask_ids": np.take_along_axis(TASK_IDS, positions, 1),
              "mask_weights": np.ones((2, 2), "float32")}
    calls = {
        "backbone/predict": lambda: classifier.backbone.predict(bad, verbose=0),
        "task/predict": lambda: classifier.predict(bad, verbose=0),
        "task/fit": lambda: classifier.fit(bad, labels, verbose=0),
        "task/validation": lambda: classifier.fit(inputs, labels, verbose=0,
                                                  validation_data=(bad, labels)),
        "task/evaluate": lambda: classifier.evaluate(bad, labels, verbose=0),
        "task/generator": lambda: classifier.fit(iter([(bad, labels)]), steps_per_epoch=1,
                                                 verbose=0),
        "pretrainer/fit": lambda: pretrainer.fit(dict(bad, **masked), batch_size=2, verbose=0),
        # The *_on_batch twins, a keras.utils.PyDataset, float ids (NaN, a fraction, one
        # past the table) and generation's prompt.
        "task/train_on_batch": lambda: classifier.train_on_batch(bad, labels),
        "task/test_on_batch": lambda: classifier.test_on_batch(bad, labels),
        "task/predict_on_batch": lambda: classifier.predict_on_batch(bad),
        "pretrainer/train_on_batch": lambda: pretrainer.train_on_batch(dict(bad, **masked)),
        "task/py_dataset": lambda: classifier.fit(_Batches([(inputs, labels), (bad, labels)]),
                                                  verbose=0),
        "task/nan_ids": lambda: classifier.predict(
            dict(inputs, token_ids=np.where(TASK_IDS == 7, np.nan, TASK_IDS)), verbose=0),
        "task/fraction_ids": lambda: classifier.predict(
            dict(inputs, token_ids=np.where(TASK_IDS == 7, 2.5, TASK_IDS)), verbose=0),
        "task/float_ids": lambda: classifier.predict(
            dict(inputs, token_ids=bad["token_ids"].astype("float32")), verbose=0),
        "generate/prompt": lambda: generation.generate(
            gpt2, np.where(TASK_IDS == 7, 50, TASK_IDS), TASK_IDS > 0, max_length=8),
        "generate_seq2seq/prompt": lambda: generation.generate_seq2seq(
            t5, np.where(TASK_IDS == 7, 50, TASK_IDS), TASK_IDS > 0, max_length=4),
    }
    said = {}
    for name, call in calls.items():
        try:
            call()
            said[name] = ""
        except ValueError as error:
            said[name] = str(error)
    # A refusal mid-stream (the second batch) leaves the weights as they were (on JAX they
    # live in the step's state during the call: get_weights raised after one).
    before = [np.array(w) for w in classifier.get_weights()]
    for name, call in (("predict", classifier.predict), ("evaluate", classifier.evaluate)):
        try:
            call(_Batches([(inputs, labels), (bad, labels)]), verbose=0)
        except ValueError:
            pass
        said[f"intact_after_{name}"] = str(all(
            np.array_equal(a, b) for a, b in zip(before, classifier.get_weights())))
    said["in_range"] = str(np.asarray(classifier.predict(inputs, verbose=0)).shape)
    with open(out, "w") as handle:
        json.dump(said, handle)


def _pretraining_job(name):
    """tests/pretraining/jax_jobs.py's function `name`, imported when the job runs."""
    def run(**arguments):
        from tests.pretraining import jax_jobs

        return getattr(jax_jobs, name)(**arguments)

    return run


JOBS = {"backbone_outputs": backbone_outputs, "backbone_contracts": backbone_contracts,
        "model_side": model_side, "layer_outputs": layer_outputs,
        "peft_task_outputs": peft_task_outputs, "export_classifier": export_classifier,
        **{f"pretraining_{name}": _pretraining_job(name)
           for name in ("learning", "resume", "strategies")},
        "transfer_outputs": transfer_outputs, "evaluation_scores": evaluation_scores,
        "token_id_refusals": token_id_refusals}


if __name__ == "__main__":
    if "--without-tensorflow" in sys.argv:
        sys.meta_path.insert(0, BlockTensorFlow())
    import keras_ctx  # noqa: F401  (imports what a user's `import keras_ctx` does)

    JOBS[sys.argv[1]](**json.loads(sys.argv[2]))
    if "--without-tensorflow" in sys.argv:
        assert "tensorflow" not in sys.modules, "TensorFlow was imported"
    print("done")

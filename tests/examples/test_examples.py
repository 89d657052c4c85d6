"""Every example script runs end to end in its fast mode (`--fast`), as a reader runs it.

The default run starts ONE Python process that runs all the scripts in turn
(`runpy`, as `python examples/X.py --fast` would; TensorFlow loads once) and
checks what each printed: the numbers a reader looks at are there, finite and
in range, and the facts a script demonstrates hold (frozen weights unchanged,
adapters reload to the same outputs, ...). `pytest -m slow` also runs each
script as its own `python examples/X.py --fast` subprocess.
"""

import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
NUMBER = r"([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf)"


def fraction(value):
    return 0.0 <= value <= 1.0


def finite(value):
    return math.isfinite(value)


# script -> [(pattern, check of each number it captures)]: each pattern must
# match the script's output at least once, and every match must pass.
EXPECTED = {
    "bert_pretrain_finetune.py": [
        (rf"bert pretraining \({NUMBER} tokens\)", lambda n: n > 5),
        (rf"  loss +{NUMBER} -> {NUMBER} -> {NUMBER}", finite),
        # Even --fast learns the two topics (chance is 0.5; measured 1.000).
        (rf"held-out accuracy: {NUMBER}", lambda accuracy: 0.75 <= accuracy <= 1)],
    "cove_translate.py": [
        (r"GloVe: (10)/(12) source words found, dim (16)", finite),  # all but 2 specials
        (rf"token accuracy by epoch: \[{NUMBER}\]", fraction),
        # [GloVe(x); CoVe(x)]: 16 + 2 x 32 (both directions of the top biLSTM).
        (r"Cove features: \(None, None, (80)\)", lambda n: n == 80),
        (r"'white gold red' -> '(.*)'", None)],
    "cvt_tagging.py": [
        (rf"tagged data only +token accuracy {NUMBER}", fraction),
        (rf"cross-view training +token accuracy {NUMBER}", fraction)],
    "electra_pretrain_finetune.py": [
        (rf"ELECTRA pretraining \({NUMBER} tokens, generator hidden {NUMBER}, "
         rf"discriminator hidden {NUMBER}\)", lambda n: n >= 16),
        (rf"  loss +{NUMBER} -> {NUMBER} -> {NUMBER}", finite),
        (rf"held-out accuracy: {NUMBER}", fraction)],
    "elmo_features.py": [
        (rf"biLM perplexity \(full softmax\): {NUMBER} -> {NUMBER}", lambda n: 1 <= n < 1e4),
        (rf"sense of 'bank' from ELMo: accuracy {NUMBER}", fraction),
        (rf"ScalarMix weights .*: \[{NUMBER} +{NUMBER} +{NUMBER}\]", fraction),
        (rf"cosine\(bank as river side, bank as money\): {NUMBER}", lambda n: -1 <= n <= 1)],
    "gpt2_generate.py": [
        (rf"{name:>12}: '(?:Return the |If the file )", None)
        for name in ("greedy", "TopKSampler", "TopPSampler", "BeamSampler")],
    "lora_finetune.py": [
        (r"(lora|houlsby): frozen weights bit-identical: True", None),
        (rf"lora: {NUMBER} trainable of {NUMBER} parameters", lambda n: n > 0),
        (rf"saved {NUMBER} bytes \(the backbone alone holds {NUMBER} bytes\)", finite)],
    "madx_adapters.py": [
        (rf"language 2 with its own adapter swapped in \(zero-shot\): {NUMBER}", fraction),
        (r"adapters reloaded into a fresh base: \['lang1', 'task'\] same outputs: True",
         None)],
    "mbert_zero_shot.py": [
        (rf"language 1 accuracy: {NUMBER} \(trained\)", fraction),
        (rf"language 2 accuracy: {NUMBER} \(zero-shot\)", fraction)],
    "monolingual_transfer.py": [
        (rf"step 2 trains {NUMBER} of {NUMBER} parameters", lambda n: n > 0),
        (rf"L1 accuracy: {NUMBER}", fraction),
        (rf"L2 accuracy with L2's embeddings swapped in \(zero-shot\): {NUMBER}", fraction)],
    "t5_span_corruption.py": [
        (r"original : (.+)", None), (r"inputs   : .*(<X0>)", None),
        (r"predicted: (.*)", None),
        (r"translate English to German: The house is small\.", None)],
    "ulmfit_classify.py": [
        (rf"classifier from scratch: +accuracy {NUMBER}", fraction),
        (rf"ULMFiT \(target LM, gradual unfreezing\): accuracy {NUMBER}", fraction)],
    "xlm_tlm.py": [
        (rf"MLM: retrieval accuracy {NUMBER} \(chance 0.01\)", fraction),
        (rf"MLM\+TLM: retrieval accuracy {NUMBER} \(chance 0.01\)", fraction)],
    "xlnet_pretrain_finetune.py": [
        (rf"PLM accuracy per epoch: \[{NUMBER}\]", fraction),
        (rf"Final accuracy \(chance 0.5\): {NUMBER}", fraction)],
}


def check_output(script, output):
    for pattern, check in EXPECTED[script]:
        matches = list(re.finditer(pattern, output))
        assert matches, f"{script}: no line matches {pattern!r} in:\n{output[-3000:]}"
        for match in matches:
            for value in match.groups():
                if check is not None:
                    assert check(float(value)), f"{script}: {match.group(0)!r}"


@pytest.mark.backend_neutral("reads the scripts' text")
def test_every_example_has_a_fast_mode_and_is_checked():
    scripts = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py"))
    assert scripts == sorted(EXPECTED)
    for script in scripts:
        with open(os.path.join(EXAMPLES, script), encoding="utf-8") as handle:
            assert "scripts.parse_args(parser" in handle.read(), script


RUN_ALL = """
import os, runpy, sys, time, traceback
import keras
for path in sys.argv[1:]:
    print("\\n### " + os.path.basename(path), flush=True)
    sys.argv = [path, "--fast"]
    began, cpu = time.time(), time.process_time()
    try:
        runpy.run_path(path, run_name="__main__")
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        print("EXAMPLE FAILED", flush=True)
    print(f"(took {time.time() - began:.1f} s, {time.process_time() - cpu:.1f} s CPU)",
          flush=True)
    keras.backend.clear_session()
"""


@pytest.fixture(scope="module")
def fast_outputs(tmp_path_factory):
    """script -> what it printed, all scripts run in one process (in a temporary directory)."""
    cwd = tmp_path_factory.mktemp("examples")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT,
               PYTHONUNBUFFERED="1")
    paths = [os.path.join(EXAMPLES, script) for script in sorted(EXPECTED)]
    process = subprocess.run([sys.executable, "-c", RUN_ALL, *paths], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             timeout=900)
    assert process.returncode == 0, process.stdout[-3000:]
    sections = process.stdout.split("\n### ")[1:]
    outputs = {section.split("\n", 1)[0]: section for section in sections}
    # They write only under temporary directories of their own.
    assert os.listdir(cwd) == []
    return outputs


# ~130 s for all scripts; README's and the guides' code runs in tests/repository/test_readme.py
@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs_in_fast_mode(script, fast_outputs):
    assert script in fast_outputs, "the run stopped before this script"
    output = fast_outputs[script]
    assert "EXAMPLE FAILED" not in output, output[-3000:]
    check_output(script, output)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs_in_fast_mode_as_its_own_process(script, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    process = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), "--fast"],
                             cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=600)
    assert process.returncode == 0, process.stderr[-3000:]
    check_output(script, process.stdout)
    assert os.listdir(tmp_path) == []
    assert "UserWarning" not in process.stderr, process.stderr[-3000:]

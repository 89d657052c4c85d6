"""MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 train as one process does."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tests.pretraining.workers import ROOT, free_ports

STEPS = 3

pytestmark = pytest.mark.tensorflow_only("tf.distribute.MultiWorkerMirroredStrategy")

# Runs STEPS SGD steps of a tiny causal LM over the same global batches (4 rows)
# under the strategy named in argv[1]; prints the per-step losses.
WORKER = r"""
import json, sys
import tensorflow as tf
strategy = (tf.distribute.MultiWorkerMirroredStrategy() if sys.argv[1] == "multi_worker"
            else tf.distribute.get_strategy())
import keras
import numpy as np
from tests.pretraining import matrix_cases as cases

batches = []
for step in range(int(sys.argv[2])):
    batch = cases.causal_lm_batch()
    batch["token_ids"] = (batch["token_ids"] + step) % cases.V * batch["padding_mask"]
    batches.append(batch)
data = tf.data.Dataset.from_tensor_slices({k: np.stack([b[k] for b in batches])
                                           for k in batches[0]})
options = tf.data.Options()
# Each global batch is split by rows between the workers, as on one device.
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = data.with_options(options)
keras.utils.set_random_seed(0)
with strategy.scope():
    model = cases.causal_lm()
    model.compile(optimizer=keras.optimizers.SGD(0.5))
history = model.fit(data, epochs=len(batches), steps_per_epoch=1, verbose=0, shuffle=False)
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"]}))
"""


def _run_workers(strategy, tf_config=None):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen([sys.executable, "-c", WORKER, strategy, str(STEPS)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process):
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # two TensorFlow processes talking gRPC: ~1 min on 2 cores
def test_two_workers_on_localhost_match_one_process():
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = [_run_workers("multi_worker", {"cluster": {"worker": workers},
                                               "task": {"type": "worker", "index": i}})
                 for i in range(2)]
    results = [_result(p) for p in processes]
    single = _result(_run_workers("default"))
    assert [r["replicas"] for r in results] == [2, 2]
    for result in results:
        np.testing.assert_allclose(result["loss"], single["loss"], rtol=1e-4)
    # Three steps of SGD at 0.5 move the loss: the runs agree on a changing model.
    assert abs(single["loss"][-1] - single["loss"][0]) > 1e-3, single

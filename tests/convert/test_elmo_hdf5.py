"""allennlp / bilm-tf ELMo weights (options json + hdf5), written here in the real layout."""

import json

import h5py
import numpy as np
import pytest
from keras import ops

from keras_ctx.convert import CheckpointError
from keras_ctx.models.elmo.convert import from_allennlp, to_allennlp
from tests.convert.elmo_files import OPTIONS, elmo_datasets, write_elmo
from tests.references import sigmoid


def numpy_elmo(w, options, char_ids):
    """bilm-tf's biLM (Peters et al. 2018) read from the hdf5 datasets: all 2L+1 layers."""
    w = {k: v.astype("float64") for k, v in w.items()}
    lstm_opts, cnn = options["lstm"], options["char_cnn"]
    table = np.concatenate([np.zeros((1, w["char_embed"].shape[1])), w["char_embed"]])
    chars = table[char_ids]  # (batch, time, chars, c)
    pieces = []
    for i, (width, count) in enumerate(cnn["filters"]):
        kernel = w[f"CNN/W_cnn_{i}"][0]  # (width, c, count)
        positions = chars.shape[2] - width + 1
        conv = np.stack([np.einsum("btwc,wcn->btn", chars[:, :, s:s + width], kernel)
                         for s in range(positions)], axis=2) + w[f"CNN/b_cnn_{i}"]
        pieces.append(np.maximum(conv.max(axis=2), 0))  # max over positions, then relu
    x = np.concatenate(pieces, -1)
    for k in range(cnn["n_highway"]):
        h = f"CNN_high_{k}/"
        carry_gate = sigmoid(x @ w[h + "W_carry"] + w[h + "b_carry"])  # multiplies transform
        transform = np.maximum(x @ w[h + "W_transform"] + w[h + "b_transform"], 0)
        x = carry_gate * transform + (1 - carry_gate) * x
    token = x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"]
    lengths = (char_ids != 0).any(-1).sum(1)
    layers = [np.concatenate([token, token], -1)]
    inputs = [token, token]
    d, clip, pclip = lstm_opts["dim"], lstm_opts["cell_clip"], lstm_opts["proj_clip"]
    for layer in range(lstm_opts["n_layers"]):
        outputs = []
        for direction in (0, 1):
            q = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/"
            out = np.zeros(inputs[direction].shape[:2] + (lstm_opts["projection_dim"],))
            for b, length in enumerate(lengths):
                steps = range(length) if direction == 0 else reversed(range(length))
                hstate = np.zeros(lstm_opts["projection_dim"])
                cell = np.zeros(d)
                for t in steps:
                    z = np.concatenate([inputs[direction][b, t], hstate]) @ w[q + "W_0"]
                    z = z + w[q + "B"]
                    i, j, f, o = np.split(z, 4)
                    cell = sigmoid(f + 1.0) * cell + sigmoid(i) * np.tanh(j)  # forget_bias 1
                    cell = np.clip(cell, -clip, clip)
                    hstate = np.clip((sigmoid(o) * np.tanh(cell)) @ w[q + "W_P_0"], -pclip, pclip)
                    out[b, t] = hstate
            if layer > 0 and lstm_opts["use_skip_connections"]:
                out = out + inputs[direction]
            outputs.append(out)
        inputs = outputs
        layers.append(np.concatenate(outputs, -1))
    return layers


def test_allennlp_elmo_matches_numpy_and_round_trips(tmp_path):
    datasets = elmo_datasets()
    options_file, weight_file = write_elmo(tmp_path, OPTIONS, datasets)
    backbone = from_allennlp(options_file, weight_file)
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 262, (2, 5, 8)).astype("int32")
    ids[:, :, 6:] = 0  # short tokens
    ids[1, 3:] = 0     # the second sentence has 3 tokens
    got = [ops.convert_to_numpy(h) for h in backbone({"character_ids": ids})["hidden_states"]]
    want = numpy_elmo(datasets, OPTIONS, ids)
    assert len(got) == len(want) == 3
    real = (ids != 0).any(-1)
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g[real], w_[real], atol=1e-4)

    out_options, out_weights = to_allennlp(backbone, tmp_path / "o.json", tmp_path / "w.hdf5")
    with h5py.File(out_weights, "r") as handle:
        names = []

        def collect(name, obj):  # returning a value would stop the visit
            if isinstance(obj, h5py.Dataset):
                names.append(name)

        handle.visititems(collect)
        assert set(names) == set(datasets)
        for name in names:
            # The forget bias goes through (b + 1) - 1 in float32.
            np.testing.assert_allclose(handle[name][...], datasets[name], rtol=0,
                                       atol=2.5e-7 if name.endswith("/B") else 0)
    again = from_allennlp(out_options, out_weights)
    for ours, theirs in zip(backbone.weights, again.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs))


def test_broken_elmo_files_fail_clearly(tmp_path):
    datasets = elmo_datasets()
    missing = dict(datasets)
    del missing["CNN_high_1/b_carry"]
    with pytest.raises(CheckpointError, match="CNN_high_1/b_carry"):
        from_allennlp(*write_elmo(tmp_path, OPTIONS, missing))
    wrong = dict(datasets)
    wrong["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"] = np.zeros((12, 8), "float32")
    pattern = r"RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0.*\(12, 8\)"
    with pytest.raises(CheckpointError, match=pattern):
        from_allennlp(*write_elmo(tmp_path, OPTIONS, wrong))
    options = json.loads(json.dumps(OPTIONS))
    options["lstm"]["n_layers"] = 1
    with pytest.raises(CheckpointError, match="Cell1"):
        from_allennlp(*write_elmo(tmp_path, options, datasets))
    options_file, weight_file = write_elmo(tmp_path, OPTIONS, datasets)
    payload = open(weight_file, "rb").read()
    with open(weight_file, "wb") as handle:
        handle.write(payload[:1000])
    with pytest.raises(CheckpointError, match="not a readable hdf5"):
        from_allennlp(options_file, weight_file)
    with pytest.raises(CheckpointError, match="'lstm'"):
        from_allennlp(write_elmo(tmp_path, {"char_cnn": {}}, datasets)[0], weight_file)

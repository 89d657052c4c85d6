"""bilm-tf's ELMo files (options JSON and weights HDF5) written by hand for the converter
tests.
"""

import json
import h5py
import numpy as np


OPTIONS = {
    "lstm": {"use_skip_connections": True, "projection_dim": 6, "cell_clip": 3,
             "proj_clip": 3, "dim": 10, "n_layers": 2},
    "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 2,
                 "embedding": {"dim": 5}, "n_characters": 262,
                 "max_characters_per_token": 8},
}


def elmo_datasets(seed=0):
    """The datasets of bilm-tf's dump_weights, as allennlp's ELMo files hold them."""
    rng = np.random.default_rng(seed)
    lstm, cnn = OPTIONS["lstm"], OPTIONS["char_cnn"]
    d, p, c = lstm["dim"], lstm["projection_dim"], cnn["embedding"]["dim"]
    features = sum(n for _, n in cnn["filters"])
    shapes = {"char_embed": (261, c), "CNN_proj/W_proj": (features, p), "CNN_proj/b_proj": (p,)}
    for i, (width, count) in enumerate(cnn["filters"]):
        shapes[f"CNN/W_cnn_{i}"] = (1, width, c, count)
        shapes[f"CNN/b_cnn_{i}"] = (count,)
    for k in range(cnn["n_highway"]):
        for name in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{name}"] = (features, features)
            shapes[f"CNN_high_{k}/b_{name}"] = (features,)
    for direction in (0, 1):
        for layer in range(lstm["n_layers"]):
            q = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/"
            shapes.update({q + "W_0": (p + p, 4 * d), q + "B": (4 * d,), q + "W_P_0": (d, p)})
    return {name: rng.normal(0, 0.5, shape).astype("float32") for name, shape in shapes.items()}


def write_elmo(directory, options, datasets):
    options_file, weight_file = directory / "options.json", directory / "weights.hdf5"
    options_file.write_text(json.dumps(options))
    with h5py.File(weight_file, "w") as handle:
        for name, value in datasets.items():
            handle[name] = value
    return str(options_file), str(weight_file)

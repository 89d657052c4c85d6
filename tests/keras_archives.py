"""Hand edits of a saved `.keras` file (a zip of config.json and model.weights.h5), for the
tests that check a damaged or mismatched file is refused."""

import json
import zipfile

import h5py


def rewrite_keras(path, edit_config=None, edit_weights=None):
    """Rewrites a `.keras` zip with its config.json and/or model.weights.h5 edited."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    if edit_config is not None:
        config = json.loads(members["config.json"])
        edit_config(config)
        members["config.json"] = json.dumps(config).encode()
    if edit_weights is not None:
        weights = path.parent / "weights.h5"
        weights.write_bytes(members["model.weights.h5"])
        with h5py.File(weights, "r+") as handle:
            edit_weights(handle)
        members["model.weights.h5"] = weights.read_bytes()
        weights.unlink()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def h5_datasets(handle):
    """The names of the datasets (arrays) in an open h5 file, in its order."""
    found = []
    handle.visititems(lambda name, item: found.append(name)
                      if isinstance(item, h5py.Dataset) else None)
    return found

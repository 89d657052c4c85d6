"""Pre-filled download caches of huggingface_hub and kagglehub, built in tmp for tests.

Hugging Face's layout (huggingface_hub's cache docs):

    HF_HUB_CACHE/models--ORG--NAME/blobs/<sha256 of the file>
    HF_HUB_CACHE/models--ORG--NAME/snapshots/<commit>/<path> -> ../../blobs/<sha256>
    HF_HUB_CACHE/models--ORG--NAME/refs/<branch or tag>      (holds the commit)

kagglehub's (kagglehub/cache.py, `_get_model_path` and the completion marker):

    KAGGLEHUB_CACHE/models/OWNER/MODEL/FRAMEWORK/VARIATION/<version>/<files>
    KAGGLEHUB_CACHE/models/OWNER/MODEL/FRAMEWORK/VARIATION/<version>.complete
"""

import hashlib
import os
import shutil


def add_hf_repo(cache, repo, source, revision="main", commit=None):
    """Puts every file under the directory `source` into `cache` as `repo` at `revision`.

    Returns the snapshot directory.
    """
    commit = commit or hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()
    folder = os.path.join(cache, "models--" + repo.replace("/", "--"))
    snapshot = os.path.join(folder, "snapshots", commit)
    os.makedirs(os.path.join(folder, "blobs"), exist_ok=True)
    for root, _, names in os.walk(source):
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), source)
            with open(os.path.join(root, name), "rb") as handle:
                data = handle.read()
            blob = os.path.join(folder, "blobs", hashlib.sha256(data).hexdigest())
            with open(blob, "wb") as handle:
                handle.write(data)
            link = os.path.join(snapshot, relative)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            # Relative, as huggingface_hub makes them: ../../blobs/<sha> from the top.
            os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
    with open(os.path.join(folder, "refs", revision), "w") as handle:
        handle.write(commit)
    return snapshot


def add_kaggle_model(cache, handle, source):
    """Puts the directory `source` into the kagglehub cache as `OWNER/MODEL/FW/VAR/VERSION`."""
    owner, model, framework, variation, version = handle.split("/")
    base = os.path.join(cache, "models", owner, model, framework, variation)
    shutil.copytree(source, os.path.join(base, version))
    open(os.path.join(base, f"{version}.complete"), "w").close()
    return os.path.join(base, version)

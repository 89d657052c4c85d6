"""A Hugging Face cache snapshot whose blob is missing, for the loaders' refusals."""

import os


def snapshot_with_missing_blob(tmp_path, name):
    """huggingface_hub's layout, snapshots/REV/`name` -> ../../blobs/HASH, the blob gone:
    (the snapshot directory, the blob's path)."""
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    os.symlink("../../blobs/0123abcd", snapshot / name)
    return snapshot, repo / "blobs" / "0123abcd"

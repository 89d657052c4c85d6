"""Work done once per test session and shared by pytest-xdist's workers (each a process).

`once_per_session(tmp_path_factory, name, make)` returns a directory that `make(path)`
filled: the first worker to ask makes it (the others wait on a lock), later ones read it.
The directory belongs to this session: under pytest-xdist the parent of the workers'
temporary directories, else this process's own (the parent of that, shared by every
pytest run on the machine, once kept a result of an older checkout for later runs).
"""

import fcntl
import os
import shutil

import numpy as np


def session_root(tmp_path_factory):
    """This test session's temporary directory, the same in every xdist worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_session(tmp_path_factory, name, make):
    """The directory `session_root/name`, filled by `make(path)` once per session; a
    failed `make` leaves nothing behind, so the next worker tries again (and fails the same
    way, in its own tests)."""
    root = session_root(tmp_path_factory)
    done = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            partial = root / f"{name}.partial"
            if partial.exists():  # a make that failed in an earlier test
                shutil.rmtree(partial)
            partial.mkdir()
            make(partial)
            os.replace(partial, done)  # whole or absent
    return done


def arrays_once(tmp_path_factory, name, compute):
    """`compute()`'s {key: array}, computed once per session (`once_per_session`), as read
    back from its .npz: e.g. TensorFlow's reference that the JAX and the torch test share."""
    def make(directory):
        np.savez(directory / "arrays.npz", **compute())

    return dict(np.load(once_per_session(tmp_path_factory, name, make) / "arrays.npz"))


def listed(arrays, prefix):
    """[arrays[f"{prefix}/0"], arrays[f"{prefix}/1"], ...]: a list stored in `arrays_once`."""
    count = sum(key.rsplit("/", 1)[0] == prefix for key in arrays)
    return [arrays[f"{prefix}/{i}"] for i in range(count)]

"""Files the user can see: written beside and renamed into place; one process per run dir.

`replacing(path)` yields a temporary name beside `path` (same directory, so
the final `os.replace` is an atomic rename on one file system) and moves it
into place only when the block finished without error: a killed or failed
write leaves the previous file whole. `replacing_directory` does the same for
a directory. Both refuse to replace an existing target unless `overwrite`.

`RunLock(directory)` is an exclusive `flock` on `directory/.keras_ctx.lock`,
which also names the holder's pid for the error a second process gets. The
kernel drops the lock when its process dies, so a lock left by a killed run
(a "stale" lock naming a dead pid) is simply taken over.
"""

import contextlib
import json
import os
import shutil
import socket

from keras_ctx.common.errors import DataError, RunDirectoryError, RunLocked

LOCK_FILE = ".keras_ctx.lock"


def _beside(path, tag):
    directory, name = os.path.split(os.path.abspath(path))
    # Keep the whole extension (`.weights.h5` too): Keras picks the format from it.
    stem, dot, extension = name.partition(".")
    extension = dot + extension
    return os.path.join(directory, f".{stem}.{tag}-{os.getpid()}{extension}")


def _remove_stale(path):
    """Deletes what killed writers of `path` left beside it (their pid is dead)."""
    import glob

    directory, name = os.path.split(os.path.abspath(path))
    stem, extension = os.path.splitext(name)
    for tag in ("partial", "replaced"):
        for leftover in glob.glob(os.path.join(glob.escape(directory),
                                               f".{glob.escape(stem)}.{tag}-*{extension}")):
            pid = os.path.basename(leftover)[len(f".{stem}.{tag}-"):]
            pid = pid[: len(pid) - len(extension)] if extension else pid
            if pid.isdigit() and not pid_alive(int(pid)):
                if tag == "replaced" and not os.path.lexists(path):
                    # Killed between moving the old one aside and the new one in:
                    # the old one is all there is, so it goes back.
                    os.replace(leftover, path)
                elif os.path.isdir(leftover):
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    os.remove(leftover)


def remove_dead_staging(directory, prefix):
    """Deletes `directory/PREFIX<pid>-*` staging directories whose writer pid is dead.

    A writer that names its staging directory this way (`prefix` + its pid +
    "-") and is killed leaves it behind; the next writer calls this first.
    """
    import glob

    for leftover in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*")):
        pid = os.path.basename(leftover)[len(prefix):].partition("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)) and os.path.isdir(leftover):
            shutil.rmtree(leftover, ignore_errors=True)


def _refuse(path, overwrite, flag):
    if os.path.lexists(path) and not overwrite:
        raise RunDirectoryError(f"{path} already exists; pass {flag} to replace it, or "
                                "choose another path.")


@contextlib.contextmanager
def replacing(path, overwrite=False, flag="--overwrite"):
    """Yields a temporary file path; renames it onto `path` when the block succeeds."""
    path = os.fspath(path)
    _refuse(path, overwrite, flag)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _remove_stale(path)
    staging = _beside(path, "partial")
    try:
        yield staging
        if not os.path.isfile(staging):
            raise RunDirectoryError(f"Nothing was written for {path}.")
        _fsync(staging)
        os.replace(staging, path)
    finally:
        if os.path.lexists(staging):
            os.remove(staging)


@contextlib.contextmanager
def replacing_directory(path, overwrite=False, flag="--overwrite"):
    """Yields a new empty directory; swaps it in for `path` when the block succeeds.

    The old directory (if any) is moved aside, the new one renamed into place,
    then the old one deleted: at every moment `path` is either whole-old or
    whole-new.
    """
    path = os.fspath(path)
    _refuse(path, overwrite, flag)
    _remove_stale(path)
    staging = _beside(path, "partial")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        yield staging
        if os.path.lexists(path):
            aside = _beside(path, "replaced")
            os.replace(path, aside)
            os.replace(staging, path)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def naming_decode_errors(path):
    """Turns a UnicodeDecodeError inside the block into a DataError naming `path`.

    Example:
    >>> with naming_decode_errors("train.tsv"):
    ...     rows = read_tsv("train.tsv")
    """
    try:
        yield
    except UnicodeDecodeError as error:
        raise DataError(
            f"{path} is not UTF-8 text (byte {error.start}: {error.object[error.start:error.start + 1]!r}); "
            "convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) and run the command again."
        ) from None


def missing_link(path):
    """A line for a `path` that is a symbolic link to nothing (a Hugging Face cache whose
    blob is gone: `snapshots/REV/file -> ../../blobs/HASH`), naming the link and its
    target; None when `path` is not one.
    """
    path = os.fspath(path)
    if not os.path.lexists(path) or os.path.exists(path):
        return None
    link, seen = path, set()
    while os.path.islink(link):  # the last link of a chain is the one that points nowhere
        target = os.path.join(os.path.dirname(link), os.readlink(link))
        if not os.path.lexists(target) or not os.path.islink(target):
            break
        if os.path.abspath(target) in seen:
            return f"{path} is a link in a loop of links ({target}); replace it with the file."
        seen.add(os.path.abspath(target))
        link = target
    target = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
    cache = os.path.basename(os.path.dirname(target)) == "blobs"
    what = "the blob it links to" if cache else "the file it links to"
    return (f"{path} is a link to {target}, which is missing: {what} was deleted or never "
            "downloaded; download the model again (or copy the file in).")


class DuplicateKey(ValueError):
    """A JSON object that names one key twice (json keeps the last value without a word)."""

    def __init__(self, key):
        super().__init__(f"the key {key!r} appears twice in one object")
        self.key = key


def unique_keys(pairs):
    """`json.load`'s object_pairs_hook: the object as a dict; DuplicateKey for a key
    given twice (`json.loads('{"a": 1, "a": 2}', object_pairs_hook=unique_keys)`)."""
    result = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKey(key)
        result[key] = value
    return result


def read_json(path, what="a keras-ctx file", fix="write it again", error=DataError):
    """The JSON value in `path`; `error` (DataError) naming the file and `fix` when it is
    not JSON. The one JSON reader of keras_ctx: run files, prepared data and the
    checkpoints `convert` reads (`keras_ctx.convert.base.read_json_object`, which passes
    CheckpointError and no `what`: the file's name says it).

    Deep nesting (a hand-made `[[[[...]]]]`) is refused like any other
    damage instead of ending in a RecursionError; a key given twice too (json
    would keep the last value without a word).
    """
    path = os.fspath(path)
    named = f"{path} ({what})" if what else path
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle, object_pairs_hook=unique_keys)
    except RecursionError:
        problem = "nests too deeply"
    except UnicodeDecodeError as caught:
        problem = f"is not UTF-8 (byte {caught.start})"
    except DuplicateKey as caught:  # the fix is the user's choice, not a rewrite
        raise error(f"{named}: {caught}; which value holds is ambiguous: keep one and "
                    "remove the other.") from None
    except ValueError as caught:  # json.JSONDecodeError: truncated or edited
        problem = f"is not valid JSON ({caught})"
    except OSError as caught:
        gone = missing_link(path)  # a cache link whose blob is gone: say so, and how to fix it
        if gone:
            raise error(gone) from None
        problem = f"cannot be read ({caught.strerror})"
    raise error(f"{named} {problem}: {fix}.")


def die_with_parent():
    """Makes the calling (child) process end when its parent dies, even by kill -9.

    Linux' PR_SET_PDEATHSIG sends SIGKILL then; elsewhere a thread checks
    the parent every second. A `prepare` worker must not write shards for a
    command that no longer exists (the next run would redo them anyway).
    """
    import signal
    import sys
    import threading

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)

    def watch():
        import time

        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def write_text(path, text, overwrite=True):
    """Atomically writes a UTF-8 text file."""
    with replacing(path, overwrite=overwrite) as staging:
        with open(staging, "w", encoding="utf-8") as handle:
            handle.write(text)


def write_json(path, value, overwrite=True, indent=2, sort_keys=False):
    """Atomically writes `value` as JSON (the one JSON writer of keras_ctx)."""
    write_text(path, json.dumps(value, indent=indent, sort_keys=sort_keys), overwrite=overwrite)


def save_npz(path, overwrite=False, **arrays):
    """np.savez, atomically; returns the real file name (numpy adds `.npz`)."""
    import numpy as np

    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    with replacing(path, overwrite=overwrite) as staging:
        np.savez(staging, **arrays)
    return path


def check_free_space(directory, size):
    """Raises OSError(ENOSPC) naming `directory` when it has fewer than `size` bytes free.

    For writers whose library does not survive a full disk (HDF5): the
    command then ends in its one-line "no space left" error, nothing written.
    """
    import errno

    free = shutil.disk_usage(directory).free
    if free < size:
        raise OSError(errno.ENOSPC, f"No space left on device ({size:,} bytes needed, "
                                    f"{free:,} free)", directory)


def _fsync(path):
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock on a run directory, held while a process writes to it.

    Example:
    >>> with RunLock("runs/bert"):
    ...     train_and_save()
    """

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, LOCK_FILE)
        self._handle = None

    def holder(self):
        """The pid written in the lock file, or None."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                return int(json.load(handle)["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def acquire(self):
        import fcntl

        os.makedirs(self.directory, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            pid = self.holder()
            who = f"process {pid}" if pid is not None else "another process"
            alive = "" if pid is None or pid_alive(pid) else " (on another machine?)"
            raise RunLocked(
                f"{self.directory} is in use by {who}{alive} (lock {self.path}): wait for "
                "it to finish, or choose another --out.") from None
        # Ours now, whatever pid a dead holder left behind.
        handle.seek(0)
        handle.truncate()
        json.dump({"pid": os.getpid(), "host": socket.gethostname()}, handle)
        handle.flush()
        self._handle = handle
        return self

    def release(self):
        if self._handle is not None:
            import fcntl

            self._handle.seek(0)
            self._handle.truncate()
            self._handle.flush()
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


@contextlib.contextmanager
def writing(directory):
    """Holds the run lock of `directory` while the block writes it (see RunLock).

    A directory the block created but left with nothing but the lock file
    (the command failed before writing) is removed again.
    """
    directory = os.fspath(directory)
    existed = os.path.isdir(directory)
    try:
        with RunLock(directory):
            yield directory
    finally:
        if not existed and os.path.isdir(directory) and set(os.listdir(directory)) <= {
                LOCK_FILE}:
            shutil.rmtree(directory, ignore_errors=True)


def write_files(out, writers):
    """Writes {name: writer(path)} into the new directory `out`, each file atomically."""
    os.makedirs(out, exist_ok=True)
    for name, write in writers.items():
        with replacing(os.path.join(out, name)) as staging:
            write(staging)


def json_writer(data):
    def write(path):
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)

    return write


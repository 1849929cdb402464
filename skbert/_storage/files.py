"""Files and folders written atomically, and the check of a folder to write into.

One way to replace a file: :func:`atomic_write` writes it under a temporary name in the same
folder and renames it over the old one, so a reader, or a run that crashes half way, sees the
old file or the whole new one, never part of either. Used by the training checkpoint
(:mod:`skbert._training.checkpoint`), the feature cache's shards
(:mod:`skbert._storage.shards`) and the data set downloads (:mod:`skbert._storage.fetch`).
:func:`replace_folder` does the same for a whole folder, written under a temporary name by
``save`` (:mod:`skbert._estimator.persistence`). :func:`check_output_dir` refuses a file where
a folder is to be written.

Temporary names start with a dot and end in ``.tmp`` (``.{name}.{random}.tmp``), so readers
that list a folder for finished files (the feature cache's) never pick one up. New files get
the permissions of a plain ``open(path, "w")`` (``0o666`` less the umask).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

__all__ = ["atomic_write", "check_output_dir", "fsync_folder", "replace_folder", "replaceable"]


def atomic_write(path, write, *, durable: bool = True):
    """Write the file ``path`` through ``write(handle)``, so that it is either old or new, whole.

    The bytes go to a temporary file in ``path``'s folder (``.{name}.{random}.tmp``), which is
    flushed, made durable when ``durable`` (:func:`os.fsync`), and renamed over ``path``
    (:func:`os.replace`); then the folder is synced too, where the OS allows, so that the
    rename survives a power cut. On any failure, a ``KeyboardInterrupt`` included, the
    temporary file is removed, ``path`` is left as it was, and the error propagates.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write; its folder must exist.
    write : callable ``(handle) -> object``
        Writes the content to ``handle``, a binary file open for writing.
    durable : bool, default=True
        Sync the file and its folder to disk. False for data that is checked when read and can
        be computed again (the feature cache): the rename is then atomic for other processes,
        but a power cut may leave a damaged file behind.

    Returns
    -------
    object
        What ``write`` returned.
    """
    folder, name = os.path.split(os.fspath(path))
    folder = folder or "."
    temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:16]}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(temporary, flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            result = write(handle)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if durable:
        fsync_folder(folder)
    return result


def fsync_folder(folder) -> None:
    """Make the renames in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def replaceable(target: Path, is_previous) -> bool:
    """Whether :func:`replace_folder` may replace ``target``: it does not exist, is an empty
    folder, or ``is_previous(target)`` says it is an earlier one of the same kind (a file of
    the right name alone is not enough: the folder and all in it are deleted). ``target``
    being a file is left to :func:`check_output_dir`."""
    if target.is_symlink():  # renaming it would leave the folder it names as it was
        return False
    if not target.is_dir() or not any(target.iterdir()):
        return True
    return bool(is_previous(target))


def sibling(target: Path, kind: str) -> Path:
    """A new hidden name beside ``target``, ``.{name}.{kind}-{random}``, for a folder written
    or kept aside while ``target`` is replaced (see :func:`sibling_prefix`)."""
    return target.parent / f"{sibling_prefix(target, kind)}{uuid.uuid4().hex[:16]}"


def sibling_prefix(target: Path, kind: str) -> str:
    """``.{name}.{kind}-``, the name cut to 100 bytes of UTF-8 (not characters: 84 CJK
    characters are a valid name of 252 bytes), so that a target of a long but valid name
    gets a valid sibling name."""
    name = target.name.encode("utf-8", "surrogateescape")[:100]
    return f".{name.decode('utf-8', 'ignore')}.{kind}-"


def replace_folder(partial: Path, target: Path) -> None:
    """Rename the finished folder ``partial`` to ``target``, replacing an empty folder or a
    previous one (kept aside, as ``.{name}.old-{random}``, until the rename succeeds)."""
    if not target.exists():
        os.replace(partial, target)
        return
    if not any(target.iterdir()):
        target.rmdir()
        os.replace(partial, target)
        return
    old = sibling(target, "old")
    os.replace(target, old)
    try:
        os.replace(partial, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def check_output_dir(
    path,
    name: str,
    folder: str = "an existing folder (its files of the same names are overwritten)",
) -> str:
    """``path`` as a str, if a folder can be written there.

    Hugging Face's ``save_pretrained`` only logs an error and returns when ``path`` is an
    existing file, so a save would report success while writing nothing: refuse it first.

    Parameters
    ----------
    path : str or os.PathLike
        The folder to write (created if missing).
    name : str
        The parameter's name, for the error message.
    folder : str
        Which existing folders the caller writes into, and how, for the error message.

    Returns
    -------
    str
        ``os.fspath(path)``, ``~`` expanded.

    Raises
    ------
    NotADirectoryError
        If ``path`` exists and is not a folder, or lies under a file.
    """
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(
            f"{name} must be a folder path (a str or os.PathLike), got {type(path).__name__}."
        ) from None
    if path == "":  # os.makedirs('') fails only when the writing starts (after the work)
        raise ValueError(
            f"{name}='' is not a folder path; give a folder (created if missing), e.g. "
            f"{name}='out'."
        )
    if isinstance(path, bytes):  # os.fspath passes bytes through; the writers join str
        raise TypeError(
            f"{name} must be a folder path (a str or os.PathLike), got bytes {path!r}; "
            "decode it with os.fsdecode."
        )
    path = os.path.expanduser(path)  # as model= reads it: '~/m' is not a folder named '~'
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(
            f"{name}={path!r} is an existing file, and this writes a folder; give a new path "
            f"or {folder}."
        )
    # up the path as given (not normalised: the system resolves '..' after symbolic links)
    above = os.path.dirname(os.path.join(os.getcwd(), path))
    while not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    # the folder could not be made (after the work: a model trained, an export traced, then
    # "[Errno 20] Not a directory")
    if os.path.exists(above) and not os.path.isdir(above):
        raise NotADirectoryError(
            f"{name}={path!r} lies under {above!r}, an existing file, so the folder cannot be "
            "made; give a path under a folder."
        )
    return path

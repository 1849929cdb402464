"""One shard of the feature cache: its three files, written atomically, verified, read by row.

Used by :class:`skbert._storage.feature_cache.FeatureStore`, which keeps the shards of one
cache key. A shard is three files: ``<name>.vals.npy`` (float32 vectors, one row per text),
``<name>.keys.npy`` (16-byte BLAKE2 digests of the texts, dtype ``S16``) and
``<name>.sum.json``, its checksum: the format version, row count, row shape and dtype, and the
size and BLAKE2b digest of the exact bytes of both ``.npy`` files. Each file is written to a
temporary name (a dot first, ``.tmp`` last) and renamed into place
(:func:`skbert._storage.files.atomic_write`): values, then checksum, then keys. The keys file
is what makes a shard visible, so a reader never sees half a shard.

:func:`verify` checks a shard before its first use: checksum file, file sizes, ``.npy``
headers (float32 values and ``S16`` keys, C order, matching row counts, the expected row
shape; never an object array: every load passes ``allow_pickle=False``, and only after the
header was checked), then the BLAKE2b digests of both files. It records the identity of both
files (device, inode, size, ``mtime_ns``, ``ctime_ns``) as it found them before the checks;
:func:`write` records them as it left them.

Reading: values are never memory-mapped. :meth:`Shard.read` reads the rows a call needs with
plain reads of the values file, between two comparisons of the open file's identity with the
recorded one, and :meth:`Shard.changed` compares both files' identities by path. A shard
whose file changed since it was verified (overwritten, truncated, replaced, deleted) is thus
never served: the store forgets it and verifies it again. A file truncated while a read is
under way makes that read come up short (it reports the change) rather than killing the
process, as touching a memory map beyond a truncated end does (SIGBUS). What stays unseen:
an overwrite that leaves size, ``mtime_ns`` and ``ctime_ns`` as they were. Setting the
modification time back (``os.utime``) changes ``ctime``, which no user can set; but file
systems advance timestamps in clock ticks (a few milliseconds on Linux), so an overwrite of
the same size within one tick of the recorded identity, or on a file system that keeps no
``ctime``, goes unnoticed. Values are not hashed again at every read: that would cost every
transform the verification's time (0.7 s for 323 MB).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from .files import atomic_write

__all__ = [
    "BadShard",
    "Shard",
    "FORMAT_VERSION",
    "delete",
    "file_digest",
    "read_spans",
    "verify",
    "write",
]

#: version of the on-disk layout, part of every key (2: shards carry a checksum file)
FORMAT_VERSION = 2
VALUES, CHECKSUM, KEYS = ".vals.npy", ".sum.json", ".keys.npy"
#: the order in which a shard's files are renamed into place: keys last (they make it visible)
WRITE_ORDER = (VALUES, CHECKSUM, KEYS)
VALUE_DTYPE, KEY_DTYPE = np.dtype(np.float32), np.dtype("S16")
#: the entry of each .npy file in a checksum file
RECORD_FIELD = {VALUES: "vals", KEYS: "keys"}
#: a checksum file is a few hundred bytes; anything far larger is not one
MAX_CHECKSUM_BYTES = 1 << 16
_HASH_CHUNK = 1 << 20
#: the most bytes read at once, and the largest scratch buffer of a read
_READ_BYTES = 8 << 20
#: positioned reads in one call (POSIX); elsewhere a seek, then a read
_PREADV = hasattr(os, "preadv")


class BadShard(Exception):
    """Why a shard cannot be served (caught inside the store)."""


def file_digest(path) -> str:
    """BLAKE2b of a file's bytes, as hex (read in 1 MiB chunks)."""
    digest = hashlib.blake2b()
    buffer = bytearray(_HASH_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while n := handle.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


class _HashingWriter:
    """A binary file that hashes what goes through it (:func:`numpy.save` writes to it)."""

    def __init__(self, handle):
        self.handle = handle
        self.digest = hashlib.blake2b()
        self.size = 0

    def write(self, data) -> int:
        self.digest.update(data)
        self.size += memoryview(data).nbytes
        return self.handle.write(data)


def _save(handle, array: np.ndarray) -> dict:
    """``np.save`` without pickling; returns the size and BLAKE2b of the bytes written."""
    writer = _HashingWriter(handle)
    np.save(writer, array, allow_pickle=False)
    return {"bytes": writer.size, "blake2b": writer.digest.hexdigest()}


def _identity(stat: os.stat_result) -> tuple:
    """What tells a file apart from itself changed: device, inode, size, mtime and ctime."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _check_header(path: Path, dtype: np.dtype, shape: tuple, size: int) -> int:
    """Raise :class:`BadShard` unless the ``.npy`` file holds a C-ordered ``dtype`` array of
    ``shape`` and is exactly ``size`` bytes long; returns the header's length. Reads the
    header only: nothing is unpickled."""
    fmt = np.lib.format
    with open(path, "rb") as handle:
        actual = os.fstat(handle.fileno()).st_size
        if actual != size:
            raise BadShard(f"{path.name} is {actual} bytes long, its checksum says {size}")
        try:
            version = fmt.read_magic(handle)
            read_header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
            if version not in read_header:
                raise ValueError(f"unsupported .npy version {version}")
            found_shape, fortran, found_dtype = read_header[version](handle)
        except ValueError as error:
            raise BadShard(f"{path.name} is not a valid .npy file ({error})") from error
        if found_dtype.hasobject or found_dtype != dtype:
            raise BadShard(f"{path.name} holds dtype {found_dtype}, expected {dtype}")
        if fortran:
            raise BadShard(f"{path.name} is in Fortran order, expected C order")
        if tuple(found_shape) != shape:
            raise BadShard(f"{path.name} has shape {tuple(found_shape)}, expected {shape}")
        offset = handle.tell()
        if offset + int(np.prod(shape)) * dtype.itemsize != size:
            raise BadShard(f"{path.name}: its length does not match its header")
    return offset


def read_spans(handle, starts: np.ndarray, span: int, destination: np.ndarray) -> bool:
    """Read ``span`` bytes at each offset of ``starts`` (ascending) into consecutive spans of
    the flat byte array ``destination``, one read per run of adjacent spans. False when the
    file ends early (it was truncated)."""
    breaks = np.flatnonzero(np.diff(starts) != span) + 1
    begins = [0, *breaks.tolist()]
    ends = [*breaks.tolist(), len(starts)]
    offsets = starts[begins].tolist()
    view = memoryview(destination)
    fd = handle.fileno()
    for begin, end, offset in zip(begins, ends, offsets, strict=True):
        part = view[begin * span : end * span]
        while len(part):
            n = _pread_into(fd, handle, part[:_READ_BYTES], offset)
            if not n:
                return False
            part, offset = part[n:], offset + n
    return True


def _pread_into(fd: int, handle, buffer, offset: int) -> int:
    """Read into ``buffer`` from ``offset``: one ``preadv`` where the OS has it."""
    if _PREADV:
        return os.preadv(fd, [buffer], offset)
    handle.seek(offset)
    return handle.readinto(buffer)


class Shard:
    """A verified shard (or one written here): where its rows lie, and its files' identity.

    Parameters
    ----------
    directory : pathlib.Path
        The key's folder.
    name : str
        The shard's name (its files are ``<name>.vals.npy`` and so on).
    row_shape : tuple of int
        Shape of one stored row.
    offset : int
        Length of the values file's ``.npy`` header: where row 0 begins.
    identities : dict
        ``{".vals.npy": ..., ".keys.npy": ...}``, as :func:`_identity` gives them.
    """

    def __init__(self, directory: Path, name: str, row_shape: tuple, offset: int, identities):
        self.directory, self.name = directory, name
        self.row_shape, self.offset = tuple(row_shape), offset
        self.identities = dict(identities)

    def path(self, suffix: str) -> Path:
        return self.directory / f"{self.name}{suffix}"

    def changed(self) -> bool:
        """Whether its values or keys file differs from the file that was verified (or is
        gone)."""
        try:
            return any(
                _identity(os.stat(self.path(suffix))) != self.identities[suffix]
                for suffix in (VALUES, KEYS)
            )
        except OSError:
            return True

    def read(self, rows: np.ndarray, index=None) -> np.ndarray | None:
        """The stored rows ``rows`` (ascending), or None when its values file changed.

        Parameters
        ----------
        rows : ndarray of int
            Row numbers in the shard, in ascending order.
        index : tuple or None
            A ``(pooling, layers)`` index of ``(3, n_hidden_states, hidden)`` rows
            (:func:`skbert._storage.feature_cache.readout_index`): only ``row[pooling,
            layers]`` is read, giving ``(len(rows), len(layers), hidden)``.

        Returns
        -------
        ndarray of float32 or None
            None when the file is not the one verified, before or after the read, or came up
            short: the shard must be verified again.
        """
        itemsize = VALUE_DTYPE.itemsize
        row_bytes = int(np.prod(self.row_shape)) * itemsize
        pick = None
        if index is None:
            out = np.empty((len(rows), *self.row_shape), dtype=VALUE_DTYPE)
            first, span = 0, row_bytes
        else:
            pooling, layers = index
            n_states, hidden = self.row_shape[1:]
            layers = np.arange(n_states)[layers]  # numpy's bounds and negative indices
            low, high = int(layers.min()), int(layers.max()) + 1
            vector = hidden * itemsize
            first, span = (int(pooling) * n_states + low) * vector, (high - low) * vector
            out = np.empty((len(rows), len(layers), hidden), dtype=VALUE_DTYPE)
            if not np.array_equal(layers, np.arange(low, high)):
                pick = layers - low  # read layers low..high-1, keep those asked
        starts = self.offset + first + np.asarray(rows, dtype=np.int64) * row_bytes
        with open(self.path(VALUES), "rb", buffering=0) as handle:
            identity = self.identities[VALUES]
            if _identity(os.fstat(handle.fileno())) != identity:
                return None
            if pick is None:
                whole = read_spans(handle, starts, span, out.reshape(-1).view(np.uint8))
            else:
                whole, step = True, max(1, _READ_BYTES // span)
                for begin in range(0, len(rows), step):
                    chunk = starts[begin : begin + step]
                    scratch = np.empty((len(chunk), high - low, hidden), dtype=VALUE_DTYPE)
                    whole = read_spans(handle, chunk, span, scratch.reshape(-1).view(np.uint8))
                    if not whole:
                        break
                    out[begin : begin + len(chunk)] = scratch[:, pick]
            if not whole or _identity(os.fstat(handle.fileno())) != identity:
                return None
        return out


def _read_checksum(path: Path) -> dict:
    with open(path, "rb") as handle:
        text = handle.read(MAX_CHECKSUM_BYTES + 1)
    try:
        record = json.loads(text)
        rows = record["rows"]
        row_shape = tuple(record["row_shape"])
        sizes = {suffix: record[field]["bytes"] for suffix, field in RECORD_FIELD.items()}
        digests = {suffix: record[field]["blake2b"] for suffix, field in RECORD_FIELD.items()}
        valid = (
            len(text) <= MAX_CHECKSUM_BYTES
            and record["format"] == FORMAT_VERSION
            and isinstance(rows, int)
            and all(isinstance(n, int) and n >= 0 for n in (rows, *row_shape, *sizes.values()))
            and all(isinstance(d, str) for d in digests.values())
        )
    except (ValueError, TypeError, KeyError) as error:
        raise BadShard(f"{path.name} is not a checksum file ({error!r})") from error
    if not valid:
        raise BadShard(f"{path.name} is not a checksum file of format {FORMAT_VERSION}")
    return {"rows": rows, "row_shape": row_shape, "bytes": sizes, "blake2b": digests}


def verify(directory: Path, name: str, row_shape=None) -> tuple:
    """The keys and the :class:`Shard` of a shard that passes every check.

    Returns ``(None, None)`` when a file changed while it was checked: the shard is then
    checked again at the next read. Raises :class:`BadShard` (or the ``OSError``,
    ``ValueError`` or ``EOFError`` of a damaged file) when it fails a check.
    """
    paths = {suffix: directory / f"{name}{suffix}" for suffix in WRITE_ORDER}
    before = {suffix: _identity(os.stat(paths[suffix])) for suffix in (VALUES, KEYS)}
    record = _read_checksum(paths[CHECKSUM])
    found_shape = record["row_shape"]
    if row_shape is not None and found_shape != row_shape:
        raise BadShard(f"rows of shape {found_shape}, expected {row_shape}")
    shapes = {VALUES: (record["rows"], *found_shape), KEYS: (record["rows"],)}
    dtypes = {VALUES: VALUE_DTYPE, KEYS: KEY_DTYPE}
    offsets = {
        suffix: _check_header(
            paths[suffix], dtypes[suffix], shapes[suffix], record["bytes"][suffix]
        )
        for suffix in (KEYS, VALUES)
    }
    for suffix in (KEYS, VALUES):
        if file_digest(paths[suffix]) != record["blake2b"][suffix]:
            raise BadShard(f"{paths[suffix].name} does not match its checksum")
    keys = np.load(paths[KEYS], allow_pickle=False)
    if any(_identity(os.stat(paths[s])) != before[s] for s in (VALUES, KEYS)):
        return None, None
    return keys, Shard(directory, name, found_shape, offsets[VALUES], before)


def write(directory: Path, name: str, digests: np.ndarray, values: np.ndarray) -> Shard | None:
    """Write a shard with its checksum: values, checksum, keys, each renamed into place.

    Returns its :class:`Shard`, or None when one of its files was changed by someone else
    the moment it was renamed (then it is verified when next read). A failed write removes
    every file of the shard, keys first, and raises.
    """
    paths = {suffix: directory / f"{name}{suffix}" for suffix in WRITE_ORDER}
    record = {
        "format": FORMAT_VERSION,
        "rows": len(digests),
        "row_shape": list(values.shape[1:]),
        "dtype": VALUE_DTYPE.str,
    }
    written = {}

    def save(suffix, array_or_bytes):
        def write_file(handle):
            if isinstance(array_or_bytes, np.ndarray):
                result = _save(handle, array_or_bytes)
            else:
                result = handle.write(array_or_bytes)
            handle.flush()
            written[suffix] = os.fstat(handle.fileno())
            return result

        return write_file

    keys_bytes = io.BytesIO()  # hashed before the checksum is written, written after it
    try:
        keys_record = _save(keys_bytes, digests)
        record[RECORD_FIELD[VALUES]] = atomic_write(
            paths[VALUES], save(VALUES, values), durable=False
        )
        record[RECORD_FIELD[KEYS]] = keys_record
        checksum = json.dumps(record, indent=1).encode()
        atomic_write(paths[CHECKSUM], save(CHECKSUM, checksum), durable=False)
        atomic_write(paths[KEYS], save(KEYS, keys_bytes.getbuffer()), durable=False)
        now = {suffix: os.stat(paths[suffix]) for suffix in (VALUES, KEYS)}
    except BaseException:  # leave nothing behind, keys file first
        for suffix in WRITE_ORDER[::-1]:
            with contextlib.suppress(OSError):
                paths[suffix].unlink(missing_ok=True)
        raise
    # a rename changes ctime, nothing else: the files renamed are those written if the rest holds
    if any(_identity(now[s])[:4] != _identity(written[s])[:4] for s in (VALUES, KEYS)):
        return None
    offset = now[VALUES].st_size - values.nbytes
    identities = {suffix: _identity(stat) for suffix, stat in now.items()}
    return Shard(directory, name, values.shape[1:], offset, identities)


def delete(directory: Path, name: str) -> None:
    """Delete a shard's files, keys first (they make it visible); raises ``OSError``."""
    for suffix in WRITE_ORDER[::-1]:
        (directory / f"{name}{suffix}").unlink(missing_ok=True)

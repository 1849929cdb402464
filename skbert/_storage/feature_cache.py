"""On-disk cache of frozen-encoder features, shared by every readout of one forward pass.

With a frozen encoder, every weight-free pooling ([CLS], mean, max) of every layer comes out of
one forward pass.
The cache stores, per text, those ``3 x n_hidden_states`` vectors, under a key made of everything
that changes the forward pass: a fingerprint of the model's weights and tokenizer, the
truncation settings, the device type and precision. Any ``pooling x layer x layer_combine``
candidate is then assembled from the stored vectors (see :func:`decomposable` for the few
combinations that are not, which are cached as final vectors under their own key).

Storage: one folder per key, holding shards written by one transform each
(:mod:`skbert._storage.shards`). A shard is three files: ``<name>.vals.npy`` (float32
vectors), ``<name>.keys.npy`` (16-byte BLAKE2 digests of the texts, dtype ``S16``) and
``<name>.sum.json``, its checksum: the format version, row count, row shape and dtype, and the
size and BLAKE2b digest of the exact bytes of both ``.npy`` files. Each file is written to a
temporary name and renamed into place: values, then checksum, then keys. The keys file is what
makes a shard visible, so a reader never sees half a shard, and files without one (a shard
being written, or one whose writer was killed) are never read nor removed. Processes that run
at once (``GridSearchCV(n_jobs>1)``, Dask workers sharing the folder) never corrupt the cache,
and they encode a text once: a process encodes missing texts while holding the key's lock
(``.encoding.lock``, a :mod:`filelock` lock), and the others, once they hold it, first read
what it wrote. Threads of one process (a Dask worker with ``nthreads>1``) share one store per
key, which keeps what it knows under a lock of its own, and wait on the same file lock. A text
repeated within one call is encoded and stored once.

Verification: before its first use in a process, a shard is checked: checksum file, file
sizes, ``.npy`` headers (float32 values and ``S16`` keys, C order, matching row counts, the
row shape the readout expects; never an object array: every load passes
``allow_pickle=False``, and only after the header was checked), then the BLAKE2b digests of
both files. Each store remembers the shards it checked or wrote, so a shard is hashed once per
process as long as its files stay as they were (stores are memoised; :func:`clear_memo`
forgets them). Cost, measured on a 2-core development machine: BLAKE2b runs at 520 MB/s on
one idle core (300 MB/s when the machine was busy), so a cache of 10,000 texts of a 6-layer,
384-wide model (10,000 x 3 x 7 x 384 float32 = 323 MB, three shards) is verified in 0.7 s
(1.2-1.4 s busy), once per process; writing a shard pays the same once, next to the encoding
that produced it. Stored values are not scanned for NaN: a verified shard holds exactly what
the model produced.

Changes after verification: rows are read with plain file reads, never through a memory map,
each read between two checks that the values file is still the one verified (device, inode,
size, ``mtime_ns`` and ``ctime_ns``); both files are checked so at every lookup. A shard whose
files changed (overwritten, truncated, replaced or deleted, say by a user clearing the cache)
is forgotten and verified again: a damaged one is handled as below, a deleted one's texts are
encoded again, and a truncation never kills the process (a memory map does, with SIGBUS,
when a page past the new end is touched). A key folder deleted while a process runs is made
again at the next transform. What stays unseen, an overwrite that keeps size, ``mtime`` and
``ctime`` (within one timestamp tick of the check), is described in
:mod:`skbert._storage.shards`.

A shard that fails a check is never served: it is deleted (keys file first, so that no other
reader picks it up half-deleted) with a :class:`FeatureCacheWarning` that names it, its folder
and what was wrong, and its texts are encoded again into a new shard. Deleted rather than moved
aside: the cache holds only recomputable data, and a copy kept aside would only grow the
folder. A folder that cannot be used at all (a file in its place, no permission, a full disk)
raises :class:`FeatureCacheError`, which names it and says that it can be deleted.

``FORMAT_VERSION`` is part of every key: format 2 added the checksums, so shards of format 1
(unverifiable) lie in other key folders and are never read; deleting those folders reclaims
their space.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import filelock
import numpy as np

from .._core.locks import ForkSafeLock
from .._core.messages import user_stacklevel
from .._core.names import FROZEN_POOLINGS
from ..exceptions import FeatureCacheError, FeatureCacheWarning
from . import shards as _shards
from .shards import FORMAT_VERSION, KEY_DTYPE, KEYS, VALUE_DTYPE, BadShard

if TYPE_CHECKING:  # annotations only: the read-out is a layer above (the torch modules)
    from .._nn.readout import Readout

__all__ = [
    "FORMAT_VERSION",
    "POOLING_INDEX",
    "FeatureCacheError",
    "FeatureCacheWarning",
    "FeatureStore",
    "assemble",
    "cache_key",
    "cached_vectors",
    "clear_memo",
    "decomposable",
    "readout_index",
    "select",
    "get_store",
    "text_digests",
]

#: order of the poolings along axis 1 of a stored "layers" entry
POOLING_INDEX = {name: i for i, name in enumerate(FROZEN_POOLINGS)}
#: texts looked up and encoded at a time, so that memory stays bounded for large inputs
BLOCK = 4096
#: the lock file of a key's folder (see FeatureStore.encoding)
LOCK_NAME = ".encoding.lock"


def _folder_error(directory, error: OSError) -> FeatureCacheError:
    return FeatureCacheError(
        f"The feature cache folder {directory} (memory=) cannot be used: {error}. It holds "
        "only features that can be computed again: delete it (or whatever is in its place) "
        "and run again, or pass memory=None."
    )


def decomposable(readout: Readout) -> bool:
    """Whether the readout can be assembled from per-layer pooled vectors.

    Pooling then combining layers equals combining then pooling when the combination is a
    concatenation (or there is one layer), when both are means (or [CLS] and a mean), or both
    maxima (or [CLS] and a max); chunk pooling must commute the same way. A pooling with
    weights (a CNN) never is.
    """
    if readout.pooling not in POOLING_INDEX:
        return False
    combine = readout.layer_combine
    if len(readout.layers) == 1 or combine == "concat":
        return True
    token_ok = readout.pooling in ("cls", combine)
    chunk_ok = not readout.chunked or readout.chunk_pooling == combine
    return token_ok and chunk_ok


def readout_index(pooling: str, layers) -> tuple:
    """The index into stored ``(n, 3, n_hidden_states, hidden)`` features that a readout reads:
    its pooling and its layers, giving ``(n, len(layers), hidden)``."""
    return (POOLING_INDEX[pooling], np.asarray(layers, dtype=np.intp))


def select(stored: np.ndarray, index: tuple) -> np.ndarray:
    """``stored[:, pooling, layers]`` for an :func:`readout_index`."""
    pooling, layers = index
    return stored[:, pooling][:, layers]


def assemble(picked: np.ndarray, layer_combine: str) -> np.ndarray:
    """Readout vectors from the ``(n, k, hidden)`` pooled vectors of its ``k`` layers."""
    if picked.shape[1] == 1:
        return np.ascontiguousarray(picked[:, 0])
    if layer_combine == "concat":
        return picked.reshape(len(picked), -1)
    return picked.mean(axis=1) if layer_combine == "mean" else picked.max(axis=1)


def text_digests(first, second=None) -> np.ndarray:
    """A 16-byte BLAKE2 digest per text (or pair), as an ``(n,)`` array of dtype ``S16``."""

    def raw(text):
        return text.encode("utf-8", "surrogatepass")

    # pairs are "4" and "5" since pairs longer than max_length are split as transformers'
    # "longest_first" splits them (the odd token of an odd budget moved to the longer side):
    # the rows of "2" and "3", the prefixes before, are not read as this version's
    def pair(a, b):
        a, b = raw(a), raw(b)
        if b"\x00" in a or b"\x00" in b:  # the first text's length marks where it ends
            return b"5\x00" + len(a).to_bytes(8, "little") + a + b
        return b"4\x00" + a + b"\x00" + b  # one NUL: where the first text ends

    if second is None:
        items = (b"1\x00" + raw(a) for a in first)
    else:
        items = (pair(a, b) for a, b in zip(first, second, strict=True))
    return np.array([hashlib.blake2b(item, digest_size=16).digest() for item in items], dtype="S16")


class FeatureStore:
    """The shards of one cache key: lookup by text digest, append new shards.

    Every shard is verified before its first use, and again whenever its files changed since
    (see the module's description); a shard that fails is deleted with a
    :class:`FeatureCacheWarning`, and its texts are missing.

    Parameters
    ----------
    directory : path-like
        The key's folder (created on first write).
    row_shape : tuple of int or None, default=None
        Shape of one stored row (a text's vectors), when known; shards of another row shape
        are refused. See :meth:`expect`.

    Notes
    -----
    Thread-safe: :func:`get_store` hands one store per key folder to every thread (a Dask
    worker with ``nthreads=k`` runs ``k`` transforms at once), so what the store remembers
    (its index and shards) is read and changed under a lock of its own. Rows are read from
    disk outside it, and a shard is verified by one thread at a time. Processes coordinate
    through :meth:`encoding` instead.
    """

    def __init__(self, directory, row_shape=None):
        self.directory = Path(directory)
        self.row_shape = None if row_shape is None else tuple(row_shape)
        self._index: dict = {}  # digest -> (shard name, row)
        self._shards: dict = {}  # shard name -> shards.Shard, verified or written here
        self._refused: set = set()  # bad shards that could not be deleted
        # guards the three above and row_shape; never held while waiting for the file lock
        # of encoding() (whose holder takes it), and made anew in a forked child
        self._lock = ForkSafeLock()

    def _path(self, name: str, suffix: str) -> Path:
        return self.directory / f"{name}{suffix}"

    def expect(self, row_shape) -> None:
        """Set the shape of one stored row; shards already read with another are discarded.

        Parameters
        ----------
        row_shape : tuple of int
            ``(3, n_hidden_states, hidden)`` for all-layer features, ``(dim,)`` for a
            readout's final vectors.
        """
        row_shape = tuple(int(n) for n in row_shape)
        with self._lock.held():
            if row_shape == self.row_shape:
                return
            self.row_shape = row_shape
            wrong = {n: s.row_shape for n, s in self._shards.items() if s.row_shape != row_shape}
            self._forget(wrong)
            for name, shape in wrong.items():
                self._discard(name, f"rows of shape {shape}, expected {row_shape}")

    def _names_on_disk(self) -> list:
        """Names of the shards whose keys file exists (complete shards), sorted."""
        try:
            entries = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        except OSError as error:
            raise _folder_error(self.directory, error) from error
        return sorted(
            entry[: -len(KEYS)]
            for entry in entries
            if entry.endswith(KEYS) and not entry.startswith(".")
        )

    def _discard(self, name: str, reason: str) -> None:
        """Delete a bad shard, keys file first (it makes the shard visible), and warn."""
        keys_path = self._path(name, KEYS)
        try:
            _shards.delete(self.directory, name)
            done = "it was deleted"
        except OSError as error:  # e.g. no write permission: never served, left in place
            self._refused.add(name)
            done = f"it could not be deleted ({error}), so the folder can be deleted"
        warnings.warn(
            f"The feature cache shard {keys_path} in the folder {self.directory} is corrupt "
            f"({reason}): {done}, and its texts are encoded again.",
            FeatureCacheWarning,
            stacklevel=user_stacklevel(),
        )

    def _add(self, name: str, keys: np.ndarray, shard: _shards.Shard) -> None:
        # callers hold self._lock, as for _forget
        self._shards[name] = shard
        for row, digest in enumerate(keys.tolist()):
            self._index[digest] = (name, row)

    def _forget(self, names) -> None:
        """Drop shards from memory (their texts are then missing, until verified again)."""
        names = {name for name in names if name in self._shards}  # another thread's done
        if not names:
            return
        for name in names:
            del self._shards[name]
        self._index = {d: w for d, w in self._index.items() if w[0] not in names}

    def _refresh(self):
        # a shard whose files changed since it was verified (or are gone) is verified again;
        # under the lock, so that one thread at a time verifies a shard
        with self._lock.held():
            self._forget({name for name, shard in self._shards.items() if shard.changed()})
            for name in self._names_on_disk():
                if name in self._shards or name in self._refused:
                    continue
                try:
                    keys, shard = _shards.verify(self.directory, name, self.row_shape)
                except FileNotFoundError as error:
                    if not self._path(name, KEYS).exists():
                        continue  # deleted meanwhile by another process that found it bad
                    self._discard(name, f"{Path(error.filename).name} is missing")
                except (BadShard, OSError, ValueError, EOFError) as error:
                    self._discard(name, str(error))
                else:
                    if shard is not None:  # else it changed while checked: checked next time
                        self._add(name, keys, shard)

    def read(self, digests: np.ndarray, index=None):
        """Stored vectors of the digests found; returns ``(values or None, missing indices)``.

        ``values`` has one row per digest (rows of missing digests are zeros); None when
        nothing is stored yet. With ``index`` (a :func:`readout_index`), only that part of
        each stored row is read from disk. Shards not seen before, or changed since they
        were seen, are verified first; the rows of a shard that changes during the read are
        missing (the shard is verified again at the next read).
        """
        with self._lock.held():  # what the store knows now; the rows are read outside
            self._refresh()
            where = [self._index.get(d) for d in digests.tolist()]
            missing = [i for i, w in enumerate(where) if w is None]
            if len(missing) == len(digests):
                return None, np.array(missing, dtype=np.intp)
            by_shard: dict = {}
            for i, w in enumerate(where):
                if w is not None:
                    by_shard.setdefault(w[0], (self._shards[w[0]], [], []))
                    by_shard[w[0]][1].append(i)
                    by_shard[w[0]][2].append(w[1])
        values = None
        for name, (shard, positions, rows) in by_shard.items():
            order = np.argsort(rows)  # read the file in order
            rows_sorted = np.asarray(rows)[order]
            try:  # only the pooling and layers wanted, with an index: (n, k, hidden)
                part = shard.read(rows_sorted, index)
            except OSError:  # gone or unreadable since the check: verified again
                part = None
            if part is None:  # changed since it was verified: verified again next time
                with self._lock.held():
                    if self._shards.get(name) is shard:  # not one verified anew meanwhile
                        self._forget({name})
                missing += positions
                continue
            if values is None:
                values = np.zeros((len(digests), *part.shape[1:]), dtype=np.float32)
            values[np.asarray(positions)[order]] = part
        return values, np.array(sorted(missing), dtype=np.intp)

    @contextlib.contextmanager
    def encoding(self):
        """Hold the key's encoding lock: one process (or thread) at a time encodes texts missing
        from this store, and the others, waiting, then read what it wrote instead of encoding
        the same texts again (processes of ``GridSearchCV(n_jobs>1)`` or of Dask workers
        sharing the folder). The lock is :mod:`filelock`'s (an OS file lock on
        ``.encoding.lock`` in the key's folder, across hosts where the shared file system
        supports locks, as NFSv4 does); the OS releases it if its holder dies. The store's own
        thread lock is not held while waiting for it."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = filelock.FileLock(self.directory / LOCK_NAME)
            lock.acquire()
        except OSError as error:
            raise _folder_error(self.directory, error) from error
        try:
            yield
        finally:
            lock.release()

    def write(self, digests: np.ndarray, values: np.ndarray):
        """Add a shard of ``values`` (one row per digest), with its checksum.

        Atomic: each file is renamed into place, the keys file last; a failed write leaves
        nothing behind and raises :class:`FeatureCacheError`.
        """
        if len(digests) == 0:
            return
        digests = np.asarray(digests, dtype=KEY_DTYPE)
        values = np.ascontiguousarray(values, dtype=VALUE_DTYPE)
        if len(values) != len(digests) or values.ndim < 2:
            raise ValueError(
                f"values must have one row per digest: got shape {values.shape} for "
                f"{len(digests)} digests."
            )
        row_shape = self.row_shape
        if row_shape is not None and values.shape[1:] != row_shape:
            raise ValueError(
                f"values rows have shape {values.shape[1:]}; this store holds rows of shape "
                f"{row_shape}."
            )
        name = f"{os.getpid()}-{uuid.uuid4().hex}"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            shard = _shards.write(self.directory, name, digests, values)
        except OSError as error:
            raise _folder_error(self.directory, error) from error
        if shard is not None:  # else changed the moment it was written: verified when read
            with self._lock.held():
                self._add(name, digests, shard)


def cache_key(
    readout: Readout,
    *,
    model: str,
    device: str,
    precision,
    attention: str | None = None,
    products: str | None = None,
) -> dict:
    """Everything that changes the stored vectors, for :func:`get_store`.

    Parameters
    ----------
    readout : Readout
        Its encoding settings; and for a readout that is not :func:`decomposable`, its own
        pooling and layers (stored as final vectors under their own key).
    model : str
        The model's fingerprint (:mod:`skbert._storage.fingerprint`).
    device : str
        The device type (``"cpu"``, ``"cuda"``, ...).
    precision : torch.dtype, "int8" or None
        The inference precision (None for float32).
    attention : str or None, default=None
        Which attention kernel the CPU's tiled layers run (``"compiled"`` or ``"torch"``:
        :func:`~skbert._inference.cpu.attention.attention_kind`; their vectors differ in the
        last bits), None off the CPU.
    products : str or None, default=None
        Which matrix products the CPU's tiled layers run (``"blas"`` or ``"onednn"``:
        :func:`~skbert._inference.cpu.products.products_for_this_cpu`; ``SKBERT_CPU_PRODUCTS``
        may force either, and their vectors differ in the last bits), None off the CPU.

    Returns
    -------
    dict
        The key's description, written to the key's folder as ``key.json``.
    """
    if decomposable(readout):
        what = "all layers"
    else:
        what = [readout.pooling, list(readout.layers), readout.layer_combine]
    return {
        "model": model,
        **readout.encoding_key(),
        "device": device,
        "precision": str(precision),
        "attention": attention,
        "products": products,
        "readout": what,
        "software": software(),
    }


#: skbert's version of how texts become vectors, raised by a change that alters the token
#: rows or the vectors of some texts, so that the cache keys them anew (2: special tokens in
#: a text are read as the tokenizer reads them, split_special_tokens; the cache served the
#: vectors of the earlier rows; 3: the last layer is last_hidden_state, where transformers 4.5x
#: gave ModernBERT's last hidden state before its final norm; 4: each side of a head+tail
#: pair keeps head_length's proportion of its share, where it kept its head only)
ENCODING_VERSION = 4


@functools.lru_cache(maxsize=1)
def software() -> dict:
    """What else makes the vectors: skbert's :data:`ENCODING_VERSION` and the versions of
    torch, transformers and tokenizers (an upgrade may tokenize or sum otherwise)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"skbert encoding": ENCODING_VERSION}
    for name in ("torch", "transformers", "tokenizers"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def get_store(root, description: dict) -> FeatureStore:
    """The store for the cache key that ``description`` spells out.

    Memoised per process for the 32 most recently used keys (a store holds what it verified
    of its shards and an index of their digests): every thread gets the same store. The key's
    folder is made again here if it was deleted since (a user clearing the cache while the
    process runs). ``root`` may start with ``~`` (the home folder).

    Raises
    ------
    FeatureCacheError
        When the key's folder cannot be created or written to.
    """
    text = json.dumps({"format": FORMAT_VERSION, **description}, sort_keys=True, default=str)
    key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    # absolute: a relative `memory` names another folder after os.chdir (a notebook's %cd)
    root = os.path.abspath(os.path.expanduser(os.fspath(root)))
    directory = Path(root) / "skbert-features" / key
    try:
        with _MEMO_LOCK.held():  # one store per folder, even for threads that come at once
            store = _store(str(directory))
        directory.mkdir(parents=True, exist_ok=True)  # again, if it was deleted meanwhile
        description_file = directory / "key.json"
        if not description_file.exists():  # for people browsing the cache
            tmp = directory / f".key.{uuid.uuid4().hex}.tmp"
            tmp.write_text(text)
            os.replace(tmp, description_file)
    except OSError as error:
        raise _folder_error(directory, error) from error
    return store


#: held while a store is looked up in (or added to) the memo of _store
_MEMO_LOCK = ForkSafeLock()


@functools.lru_cache(maxsize=32)
def _store(directory: str) -> FeatureStore:
    Path(directory).mkdir(parents=True, exist_ok=True)
    return FeatureStore(directory)


def clear_memo() -> None:
    """Forget the memoised stores (benchmarks time a cold start with it)."""
    with _MEMO_LOCK.held():
        _store.cache_clear()


def cached_vectors(store: FeatureStore, digests, readout: Readout, compute) -> tuple:
    """The readout's vectors of the texts ``digests``: stored ones read, missing ones computed.

    Parameters
    ----------
    store : FeatureStore
        The store of the cache key (see :func:`get_store`).
    digests : ndarray of S16
        One digest per text (:func:`text_digests`).
    readout : Readout
        What to read: with a :func:`decomposable` readout the store holds every weight-free
        pooling of every layer, else the readout's own vectors.
    compute : callable ``(positions, all_layers) -> ndarray``
        Encodes the texts at ``positions``: all-layer features (``all_layers=True``) or the
        readout's vectors.

    Returns
    -------
    vectors : ndarray of shape (n_texts, readout.output_dim), float32
    n_missing : int
        Texts that were not in the store.
    n_encoded : int
        Texts encoded: the distinct ones among the missing (a text repeated in ``digests`` is
        encoded and stored once, and its vectors copied to each of its rows).
    """
    whole = decomposable(readout)
    index = readout_index(readout.pooling, readout.layers) if whole else None
    if whole:
        store.expect((len(POOLING_INDEX), readout.n_hidden_states, readout.hidden_size))
    else:
        store.expect((readout.output_dim,))
    out = np.empty((len(digests), readout.output_dim), dtype=np.float32)
    n_missing = n_encoded = 0
    for start in range(0, len(digests), BLOCK):
        block = np.arange(start, min(start + BLOCK, len(digests)))
        values, missing = store.read(digests[block], index)
        if len(missing):
            with store.encoding():  # one process at a time: what it writes, others read
                values, missing = store.read(digests[block], index)
                if len(missing):
                    distinct, rows = _distinct(digests[block[missing]])
                    computed = compute(block[missing[distinct]], whole)
                    store.write(digests[block[missing[distinct]]], computed)
                    if whole:
                        computed = select(computed, index)
                    if values is None:
                        values = np.empty((len(block), *computed.shape[1:]), dtype=np.float32)
                    values[missing] = computed[rows]
                    n_missing += len(missing)
                    n_encoded += len(distinct)
        out[block] = assemble(values, readout.layer_combine) if whole else values
    return out, n_missing, n_encoded


def _distinct(digests: np.ndarray) -> tuple:
    """The first position of each distinct digest, in the order given, and for each digest
    the index of its own among those: ``digests[distinct][rows]`` equals ``digests``."""
    _, first, inverse = np.unique(digests, return_index=True, return_inverse=True)
    order = np.argsort(first)  # distinct digests in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]

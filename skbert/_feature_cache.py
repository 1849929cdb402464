"""On-disk cache of frozen-encoder features, shared by every readout of one forward pass.

With a frozen encoder, every weight-free pooling ([CLS], mean, max) of every layer comes out of
one forward pass.
The cache stores, per text, those ``3 x n_hidden_states`` vectors, under a key made of everything
that changes the forward pass: a fingerprint of the model's weights and tokenizer, the
truncation settings, the device type and precision. Any ``pooling x layer x layer_combine``
candidate is then assembled from the stored vectors (see :func:`decomposable` for the few
combinations that are not, which are cached as final vectors under their own key).

Storage: one folder per key, holding shards written by one transform each, a ``.keys.npy``
(16-byte BLAKE2 digests of the texts) and a ``.vals.npy`` (float32 vectors, read memory-mapped).
Shards are written to a temporary name and renamed, values before keys, so a reader never sees
half a shard; processes that run at once (``GridSearchCV(n_jobs>1)``) may compute a text
twice, never corrupt the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import uuid
from pathlib import Path

import numpy as np

from ._readout import Readout
from .pooling import FROZEN_POOLINGS

__all__ = [
    "FORMAT_VERSION",
    "POOLING_INDEX",
    "FeatureStore",
    "assemble",
    "cache_key",
    "cached_vectors",
    "decomposable",
    "readout_index",
    "select",
    "get_store",
    "text_digests",
]

FORMAT_VERSION = 1
#: order of the poolings along axis 1 of a stored "layers" entry
POOLING_INDEX = {name: i for i, name in enumerate(FROZEN_POOLINGS)}
#: texts looked up and encoded at a time, so that memory stays bounded for large inputs
BLOCK = 4096


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

    if second is None:
        items = (b"1\x00" + raw(a) for a in first)
    else:
        items = (b"2\x00" + raw(a) + b"\x00" + raw(b) for a, b in zip(first, second, strict=True))
    return np.array([hashlib.blake2b(item, digest_size=16).digest() for item in items], dtype="S16")


class FeatureStore:
    """The shards of one cache key: lookup by text digest, append new shards.

    Parameters
    ----------
    directory : path-like
        The key's folder (created on first write).
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self._index: dict = {}  # digest -> (shard name, row)
        self._shards: dict = {}  # shard name -> memory-mapped values

    def _refresh(self):
        if not self.directory.is_dir():
            return
        for keys_path in self.directory.glob("*.keys.npy"):
            name = keys_path.name[: -len(".keys.npy")]
            if name in self._shards:
                continue
            keys = np.load(keys_path)
            self._shards[name] = np.load(self.directory / f"{name}.vals.npy", mmap_mode="r")
            for row, digest in enumerate(keys.tolist()):
                self._index[digest] = (name, row)

    def read(self, digests: np.ndarray, index=None):
        """Stored vectors of the digests found; returns ``(values or None, missing indices)``.

        ``values`` has one row per digest (rows of missing digests are zeros); None when
        nothing is stored yet. With ``index`` (a :func:`readout_index`), only that part of
        each stored row is read from disk.
        """
        self._refresh()
        where = [self._index.get(d) for d in digests.tolist()]
        missing = np.array([i for i, w in enumerate(where) if w is None], dtype=np.intp)
        if len(missing) == len(digests):
            return None, missing
        by_shard: dict = {}
        for i, w in enumerate(where):
            if w is not None:
                by_shard.setdefault(w[0], ([], []))
                by_shard[w[0]][0].append(i)
                by_shard[w[0]][1].append(w[1])
        values = None
        for name, (positions, rows) in by_shard.items():
            order = np.argsort(rows)  # read the memory map in file order
            rows_sorted = np.asarray(rows)[order]
            shard = self._shards[name]
            if index is None:
                part = shard[rows_sorted]
            else:  # gather only the pooling and layers wanted: (n, k, hidden)
                pooling, layers = index
                part = shard[rows_sorted[:, None], pooling, layers[None, :]]
            if values is None:
                values = np.zeros((len(digests), *part.shape[1:]), dtype=np.float32)
            values[np.asarray(positions)[order]] = part
        return values, missing

    def write(self, digests: np.ndarray, values: np.ndarray):
        """Add a shard; atomic: values are renamed into place before their keys."""
        if len(digests) == 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex}"
        for suffix, array in ((".vals.npy", values.astype(np.float32)), (".keys.npy", digests)):
            tmp = self.directory / f".{name}{suffix}.tmp"
            with open(tmp, "wb") as handle:
                np.save(handle, array)
            os.replace(tmp, self.directory / f"{name}{suffix}")
        self._shards[name] = np.load(self.directory / f"{name}.vals.npy", mmap_mode="r")
        for row, digest in enumerate(digests.tolist()):
            self._index[digest] = (name, row)


def cache_key(readout: Readout, *, model: str, device: str, precision) -> dict:
    """Everything that changes the stored vectors, for :func:`get_store`.

    Parameters
    ----------
    readout : Readout
        Its encoding settings; and for a readout that is not :func:`decomposable`, its own
        pooling and layers (stored as final vectors under their own key).
    model : str
        The model's fingerprint (:mod:`skbert._fingerprint`).
    device : str
        The device type (``"cpu"``, ``"cuda"``, ...).
    precision : torch.dtype or None
        The inference precision (None for float32).

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
        "readout": what,
    }


def get_store(root, description: dict) -> FeatureStore:
    """The store for the cache key that ``description`` spells out.

    Memoised per process for the 32 most recently used keys (a store holds its shards'
    memory maps and an index of their digests).
    """
    text = json.dumps({"format": FORMAT_VERSION, **description}, sort_keys=True, default=str)
    key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    # absolute: a relative `memory` names another folder after os.chdir (a notebook's %cd)
    directory = Path(os.path.abspath(root)) / "skbert-features" / key
    store = _store(str(directory))
    description_file = directory / "key.json"
    if not description_file.exists():  # for people browsing the cache
        tmp = directory / f".key.{uuid.uuid4().hex}.tmp"
        tmp.write_text(text)
        os.replace(tmp, description_file)
    return store


@functools.lru_cache(maxsize=32)
def _store(directory: str) -> FeatureStore:
    Path(directory).mkdir(parents=True, exist_ok=True)
    return FeatureStore(directory)


def clear_memo() -> None:
    """Forget the memoised stores (benchmarks time a cold start with it)."""
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
    n_computed : int
        Texts that were not in the store.
    """
    whole = decomposable(readout)
    index = readout_index(readout.pooling, readout.layers) if whole else None
    out = np.empty((len(digests), readout.output_dim), dtype=np.float32)
    n_computed = 0
    for start in range(0, len(digests), BLOCK):
        block = np.arange(start, min(start + BLOCK, len(digests)))
        values, missing = store.read(digests[block], index)
        if len(missing):
            computed = compute(block[missing], whole)
            store.write(digests[block[missing]], computed)
            if whole:
                computed = select(computed, index)
            if values is None:
                values = np.empty((len(block), *computed.shape[1:]), dtype=np.float32)
            values[missing] = computed
            n_computed += len(missing)
        out[block] = assemble(values, readout.layer_combine) if whole else values
    return out, n_computed

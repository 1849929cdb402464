"""On-disk cache of frozen-encoder features, shared by every readout of one forward pass.

With a frozen encoder, [CLS], mean and max pooling of every layer come out of one forward pass.
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

import hashlib
import json
import os
import uuid
from pathlib import Path

import numpy as np

__all__ = [
    "FORMAT_VERSION",
    "POOLING_INDEX",
    "FeatureStore",
    "assemble",
    "decomposable",
    "readout_index",
    "select",
    "directory_fingerprint",
    "get_store",
    "state_fingerprint",
    "text_digests",
]

FORMAT_VERSION = 1
#: order of the poolings along axis 1 of a stored "layers" entry
POOLING_INDEX = {"cls": 0, "mean": 1, "max": 2}
_WEIGHT_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model", ".pt")


def decomposable(pooling, n_layers, layer_combine, chunks, chunk_pooling) -> bool:
    """Whether the readout can be assembled from per-layer pooled vectors.

    Pooling then combining layers equals combining then pooling when the combination is a
    concatenation (or there is one layer), when both are means (or [CLS] and a mean), or both
    maxima (or [CLS] and a max); chunk pooling must commute the same way.
    """
    if n_layers == 1 or layer_combine == "concat":
        return True
    token_ok = pooling == "cls" or pooling == layer_combine
    chunk_ok = not chunks or chunk_pooling == layer_combine
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


_DIR_FINGERPRINTS: dict = {}


def directory_fingerprint(path) -> str:
    """Hash of the contents of a checkpoint directory's files (weights, config, tokenizer).

    Memoised per process on each file's size and modification time, so a changed file is hashed
    again and an unchanged checkpoint costs a ``stat`` per file.
    """
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    key = (str(path.resolve()), stats)
    if key not in _DIR_FINGERPRINTS:
        digest = hashlib.blake2b(digest_size=20)
        for p in files:
            digest.update(p.name.encode() + b"\x00")
            with open(p, "rb") as handle:
                for block in iter(lambda h=handle: h.read(1 << 22), b""):
                    digest.update(block)
        _DIR_FINGERPRINTS[key] = digest.hexdigest()
    return _DIR_FINGERPRINTS[key]


def state_fingerprint(backbone, tokenizer) -> str:
    """Hash of a loaded encoder's weights and its tokenizer (for models not on disk)."""
    digest = hashlib.blake2b(digest_size=20)
    for name, tensor in sorted(backbone.state_dict().items()):
        digest.update(name.encode() + b"\x00")
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=_bytes()).numpy())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        vocab = sorted(tokenizer.get_vocab().items())
        digest.update(json.dumps([type(tokenizer).__name__, vocab], default=str).encode())
    digest.update(json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _bytes():
    import torch

    return torch.uint8


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


_STORES: dict = {}


def get_store(root, description: dict) -> FeatureStore:
    """The (per-process, memoised) store for the cache key that ``description`` spells out."""
    text = json.dumps({"format": FORMAT_VERSION, **description}, sort_keys=True, default=str)
    key = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    directory = Path(root) / "skbert-features" / key
    store = _STORES.get(str(directory))
    if store is None:
        store = _STORES[str(directory)] = FeatureStore(directory)
        directory.mkdir(parents=True, exist_ok=True)
        description_file = directory / "key.json"
        if not description_file.exists():  # for people browsing the cache
            tmp = directory / f".key.{uuid.uuid4().hex}.tmp"
            tmp.write_text(text)
            os.replace(tmp, description_file)
    return store

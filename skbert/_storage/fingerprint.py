"""A model's identity as a hash: of a checkpoint folder's files, or of loaded weights.

The frozen-feature cache keys stored vectors on it, and loaders memoise on it, so that a
checkpoint overwritten in place is never mistaken for the one that was there before.
"""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import torch

from .._core.locks import ForkSafeLock

__all__ = ["directory_fingerprint", "state_fingerprint", "weights_fingerprint"]

#: the files of a checkpoint folder that make its identity: weights, config and tokenizer
_WEIGHT_SUFFIXES = (".json", ".safetensors", ".bin", ".txt", ".model", ".pt")


def directory_fingerprint(path, *, fresh: bool = False) -> str:
    """Hash of the contents of a checkpoint directory's files (weights, config, tokenizer).

    Memoised per process (for the 64 most recent folders) on each file's name, size and
    modification time, so a changed file is hashed again and an unchanged checkpoint costs a
    ``stat`` per file.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint folder.
    fresh : bool, default=False
        Hash the files again even if their names, sizes and times are unchanged (a file
        rewritten in place with its old time kept would fool the memo).

    Returns
    -------
    str
        40 hexadecimal digits.
    """
    path = Path(path).resolve()
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES)
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    key = (str(path), stats)
    if not fresh:
        with _LOCK.held():
            known = _MEMO.get(key)
            if known is not None:
                _MEMO.move_to_end(key)
                return known
    digest = _hash_files(*key)  # outside the lock: other folders are hashed meanwhile
    with _LOCK.held():  # a fresh hash replaces a stale one: later fits see the files as they are
        _MEMO[key] = digest
        _MEMO.move_to_end(key)
        while len(_MEMO) > 64:
            _MEMO.popitem(last=False)
    return digest


#: ``(folder, its files' names, sizes and times) -> hash``, the 64 most recently used
_MEMO: collections.OrderedDict = collections.OrderedDict()
_LOCK = ForkSafeLock()


def _hash_files(directory: str, stats: tuple) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for name, _, _ in stats:
        digest.update(name.encode() + b"\x00")
        with open(Path(directory) / name, "rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def state_fingerprint(backbone, tokenizer) -> str:
    """Hash of a loaded encoder's weights and its tokenizer (for models not in a folder).

    Parameters
    ----------
    backbone : torch.nn.Module
        The encoder.
    tokenizer : transformers tokenizer
        Its tokenizer.

    Returns
    -------
    str
        40 hexadecimal digits.
    """
    digest = hashlib.blake2b(digest_size=20)
    _update_with_weights(digest, backbone)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        vocab = sorted(tokenizer.get_vocab().items())
        digest.update(json.dumps([type(tokenizer).__name__, vocab], default=str).encode())
    digest.update(json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str).encode())
    # a setting of the tokenizer object, not of its backend: "[SEP]" in a text read as text
    split = bool(getattr(tokenizer, "split_special_tokens", False))
    digest.update(f"split_special_tokens={split}".encode())
    return digest.hexdigest()


def weights_fingerprint(module) -> str:
    """Hash of a module's state dict: names, dtypes, shapes and bytes (40 hex digits)."""
    digest = hashlib.blake2b(digest_size=20)
    _update_with_weights(digest, module)
    return digest.hexdigest()


def _update_with_weights(digest, module) -> None:
    for name, tensor in sorted(module.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\x00".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())


def clear_memo() -> None:
    """Forget the memoised hashes (benchmarks time a cold start with it)."""
    with _LOCK.held():
        _MEMO.clear()

"""The values of a saved estimator as tagged JSON, with the files some of them need.

:class:`SaveWriter` and :class:`SaveReader` extend the plain values of
:mod:`skbert._storage.tagged_json` (None, numbers, str, containers, numpy arrays and scalars)
with the objects of a fitted estimator: the dataclasses :class:`~skbert._nn.readout.Readout`,
:class:`~skbert._nn.backbone.SpecialTokens` and
:class:`~skbert._estimator.deferred.DeferredNetwork`, ``RandomState``, paths, ``joblib.Memory``,
``FrozenEstimator``, and, written as files of the save folder, networks (the description of
:mod:`skbert._nn.state` and a safetensors file), ``torch.nn.Linear`` layers, tokenizers
(``save_pretrained``, checked with :mod:`skbert._text.tokenizer_probe`) and nested estimators
(their own save, in a subfolder). Reading builds only these types: each tag names a fixed
decoder, each file a plain name inside the save. Used by :mod:`.folder`, which hands in the
functions that write and read a nested estimator's folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import joblib
import numpy as np
import torch
from sklearn.frozen import FrozenEstimator

from ..._core.rng import forked
from ..._nn.backbone import SpecialTokens, quiet_loading
from ..._nn.network import SentenceEncoder, TaskNetwork
from ..._nn.readout import Readout
from ..._nn.state import build_network, cpu_tensors, describe_network, load_tensors
from ..._storage.shards import file_digest
from ..._storage.tagged_json import ValueReader, ValueWriter, as_int, cannot_encode
from ..._text.tokenizer_probe import is_tokenizer, read_tokenizer, tokenizer_probe
from ..deferred import DeferredNetwork
from .registry import estimator_name

__all__ = ["MANIFEST", "MAX_DEPTH", "SaveWriter", "SaveReader"]

#: the manifest of a save (:mod:`.folder` writes it last): no value's file takes its name
MANIFEST = "skbert.json"
#: nested saves (``model=fitted``) deeper than this are refused as corrupt
MAX_DEPTH = 8
#: the dataclasses stored field by field
_DATACLASSES = (Readout, SpecialTokens, DeferredNetwork)
#: the names a save gives its files and folders (no separators, no "..")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


class SaveWriter(ValueWriter):
    """Encodes values as tagged JSON, writing weights and tokenizers into ``folder``.

    ``folder=None`` encodes values that need no file only.

    Parameters
    ----------
    folder : pathlib.Path or None
        The save folder being written.
    depth : int
        How deep this save is nested in another (0: the top).
    write_estimator : callable, optional
        ``write_estimator(estimator, folder, depth)`` writes a nested estimator's save into
        the existing ``folder``; without it nested estimators are refused.
    """

    def __init__(self, folder, depth: int, write_estimator=None):
        super().__init__(_DATACLASSES)
        self.folder = folder
        self.depth = depth
        self.write_estimator = write_estimator
        self.names = {MANIFEST}

    def encode_object(self, value, where: str) -> dict:
        """The objects that need files, or another encoding than their fields."""
        if isinstance(value, np.random.RandomState):
            return {"type": "RandomState", "state": self.encode(value.get_state(), where)}
        if isinstance(value, os.PathLike):
            return {"type": "path", "value": os.fspath(value)}
        if isinstance(value, joblib.Memory):
            return {"type": "joblib.Memory", "location": self.encode(value.location, where)}
        if isinstance(value, FrozenEstimator):
            return {"type": "FrozenEstimator", "estimator": self.encode(value.estimator, where)}
        if self.folder is None:
            cannot_encode(value, where)
        if type(value) in (SentenceEncoder, TaskNetwork):
            return self._write_network(value, where)
        if type(value) is torch.nn.Linear:
            return self._write_linear(value, where)
        if is_tokenizer(value):
            return self._write_tokenizer(value, where)
        if hasattr(value, "get_params") and hasattr(value, "fitted_network"):
            return self._write_nested(value, where)
        cannot_encode(value, where)

    def _name(self, where: str, suffix: str = "") -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", where).lstrip(".-") or "value"
        name, n = base + suffix, 1
        while name in self.names:
            n += 1
            name = f"{base}-{n}{suffix}"
        self.names.add(name)
        return name

    def _write_tensors(self, tensors: dict, where: str) -> dict:
        """Write a safetensors file; its name and the BLAKE2b of its bytes, which the reader
        checks (safetensors itself checks the layout, not the values)."""
        from safetensors.torch import save_file

        name = self._name(where, ".safetensors")
        path = self.folder / name
        save_file(tensors, os.fspath(path), metadata={"skbert": where})
        return {"file": name, "blake2b": file_digest(path)}

    def _write_network(self, network, where: str) -> dict:
        description, tensors = describe_network(network, where)
        file = self._write_tensors(tensors, where)
        return {"type": "network", "description": description, **file}

    def _write_linear(self, layer, where: str) -> dict:
        file = self._write_tensors(cpu_tensors(layer), where)
        shape = {"in_features": layer.in_features, "out_features": layer.out_features}
        flags = {"bias": layer.bias is not None, "training": layer.training}
        return {"type": "Linear", **shape, **flags, **file}

    def _write_tokenizer(self, tokenizer, where: str) -> dict:
        name = self._name(where)
        with quiet_loading():
            tokenizer.save_pretrained(os.fspath(self.folder / name))
        probe = tokenizer_probe(tokenizer)
        with quiet_loading():
            reread = read_tokenizer(self.folder / name)
        if tokenizer_probe(reread) != probe:
            raise TypeError(
                f"cannot save {where}: this {type(tokenizer).__name__}, written with "
                "save_pretrained and read back with AutoTokenizer, encodes texts differently."
            )
        files = {
            path.name: file_digest(path)
            for path in sorted((self.folder / name).iterdir())
            if path.is_file()
        }
        return {"type": "tokenizer", "folder": name, "probe": probe, "blake2b": files}

    def _write_nested(self, estimator, where: str) -> dict:
        estimator_name(estimator, where)
        if self.write_estimator is None:
            cannot_encode(estimator, where)
        if self.depth + 1 > MAX_DEPTH:
            raise TypeError(f"cannot save {where}: estimators nested over {MAX_DEPTH} deep")
        name = self._name(where)
        (self.folder / name).mkdir()
        self.write_estimator(estimator, self.folder / name, self.depth + 1)
        return {"type": "estimator", "folder": name}


class SaveReader(ValueReader):
    """Decodes :class:`SaveWriter`'s tagged JSON; builds only the types it knows.

    Parameters
    ----------
    folder : pathlib.Path or None
        The save folder being read; None decodes values that need no file only.
    depth : int
        How deep this save is nested in another (0: the top).
    read_estimator : callable, optional
        ``read_estimator(folder, depth)`` reads a nested estimator's save; without it nested
        estimators are refused.
    """

    def __init__(self, folder, depth: int, read_estimator=None):
        super().__init__(_DATACLASSES)
        self.folder = folder
        self.depth = depth
        self.read_estimator = read_estimator

    def decode_object(self, tag: str, node, where: str):
        """The value of a tag for an object of a fitted estimator (some read from files)."""
        decoder = _OBJECT_DECODERS.get(tag)
        if decoder is not None:
            return decoder(self, node, where)
        if tag not in _FILE_DECODERS:
            raise ValueError(f"{where}: unknown value type {tag!r}")
        if self.folder is None:
            raise ValueError(f"{where}: a {tag!r} cannot be stored here")
        return _FILE_DECODERS[tag](self, node, where)

    def child(self, name, where: str) -> Path:
        """The file or folder ``name`` of this save, checked to be a plain name inside it."""
        if not isinstance(name, str) or not _SAFE_NAME.match(name) or name == MANIFEST:
            raise ValueError(f"{where}: {name!r} is not a file name of this save")
        path = self.folder / name
        if not path.exists():
            raise ValueError(f"{where}: {os.fspath(path)!r} is missing")
        return path

    def read_tensors(self, node, where: str) -> dict:
        """The tensors of a node's file, checked against the node's BLAKE2b (saves written
        before skbert recorded it have none, and load unchecked)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = self.child(node["file"], where)
        expected = node.get("blake2b")
        if expected is not None and file_digest(path) != expected:
            raise ValueError(
                f"{where}: {os.fspath(path)!r} is damaged: its bytes are not those that save "
                "wrote (their BLAKE2b differs); save the estimator again."
            )
        try:
            return load_file(os.fspath(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            message = f"{where}: {os.fspath(path)!r} is not a safetensors file ({exc})"
            raise ValueError(message) from exc


def _decode_random_state(reader, node, where):
    state = np.random.RandomState()
    try:
        state.set_state(reader.decode(node["state"], where))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: not a RandomState state ({exc})") from exc
    return state


def _decode_memory(reader, node, where):
    location = reader.decode(node["location"], where)
    if location is not None and not isinstance(location, (str, Path)):
        raise ValueError(f"{where}: a joblib.Memory location is a str, a path or None")
    return joblib.Memory(location, verbose=0)


def _decode_frozen(reader, node, where):
    return FrozenEstimator(reader.decode(node["estimator"], where))


def _decode_path(reader, node, where):
    value = node["value"]
    if not isinstance(value, str):
        raise ValueError(f"{where}: a path is a str")
    return Path(value)


_OBJECT_DECODERS = {
    "RandomState": _decode_random_state,
    "joblib.Memory": _decode_memory,
    "FrozenEstimator": _decode_frozen,
    "path": _decode_path,
}


def _decode_network(reader, node, where):
    tensors = reader.read_tensors(node, where)
    return build_network(node["description"], tensors, where)


def _decode_linear(reader, node, where):
    tensors = reader.read_tensors(node, where)
    shape = (as_int(node["in_features"]), as_int(node["out_features"]))
    with forked():
        layer = torch.nn.Linear(*shape, bias=node["bias"] is True)
    load_tensors(layer, tensors, where)
    return layer.train(node["training"] is True)


def _decode_tokenizer(reader, node, where):
    folder = reader.child(node["folder"], where)
    _check_tokenizer_files(folder, node.get("blake2b"), where)
    try:
        with quiet_loading():
            tokenizer = read_tokenizer(folder)
    except Exception as exc:  # tokenizers raises its own errors for a corrupt file
        message = f"{where}: the tokenizer in {os.fspath(folder)!r} does not load ({exc!r})"
        raise ValueError(message) from exc
    if tokenizer_probe(tokenizer) != node["probe"]:
        raise ValueError(
            f"{where}: the tokenizer read back encodes texts differently from the saved one "
            "(another transformers or tokenizers version?)"
        )
    return tokenizer


def _check_tokenizer_files(folder: Path, expected, where: str) -> None:
    """The tokenizer's files are those save wrote, byte for byte (saves written before skbert
    recorded their BLAKE2b have none, and load unchecked); an edited vocabulary would load
    and encode some words differently, which the probe's few texts may not show."""
    if expected is None:
        return
    if not isinstance(expected, dict):
        raise ValueError(f"{where}: the tokenizer's file digests are not a mapping")
    # hidden files (a .DS_Store a file browser left) are none of the tokenizer's
    held = {p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}
    missing, extra = sorted(set(expected) - held), sorted(held - set(expected))
    if missing or extra:
        what = "; ".join(
            f"{label} {names}" for label, names in (("missing", missing), ("added", extra)) if names
        )
        raise ValueError(
            f"{where}: the tokenizer folder {os.fspath(folder)!r} does not hold the files save "
            f"wrote ({what}); remove the added files, or save the estimator again."
        )
    for name, digest in expected.items():
        if file_digest(folder / name) != digest:
            raise ValueError(
                f"{where}: {os.fspath(folder / name)!r} is damaged: its bytes are not those "
                "that save wrote (their BLAKE2b differs); save the estimator again."
            )


def _decode_estimator(reader, node, where):
    if reader.depth + 1 > MAX_DEPTH:
        raise ValueError(f"{where}: estimators nested over {MAX_DEPTH} deep")
    if reader.read_estimator is None:
        raise ValueError(f"{where}: an 'estimator' cannot be stored here")
    return reader.read_estimator(reader.child(node["folder"], where), reader.depth + 1)


_FILE_DECODERS = {
    "network": _decode_network,
    "Linear": _decode_linear,
    "tokenizer": _decode_tokenizer,
    "estimator": _decode_estimator,
}

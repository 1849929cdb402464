"""Save and load a whole fitted estimator without pickle: safetensors weights and JSON.

A save is a folder::

    skbert.json                  format and versions, the estimator's class, its parameters
                                 and every fitted attribute, as tagged JSON (written last)
    network_.safetensors         the tensors of a network (or of an output layer)
    tokenizer_/                  the tokenizer (``save_pretrained``)
    model/                       a fitted estimator given as ``model`` (saved the same way)

Nothing read back runs code from the files: the estimator's class comes from an allow-list,
each value from a fixed set of tags, networks are rebuilt from their description with the
classes of :mod:`skbert._nn.network` and ``transformers.AutoModel.from_config``, their weights
read with ``safetensors``, the tokenizer with ``AutoTokenizer`` (``trust_remote_code=False``).
No ``pickle``, no ``torch.load(weights_only=False)``, no ``np.load(allow_pickle=True)``.

The estimators' pickles (``__getstate__``) store ``network_`` with the same description and
safetensors bytes (:func:`network_to_state`, :func:`network_from_state`), so a model fitted on
a GPU unpickles on a CPU-only machine. A pickle as a whole still runs code when it is loaded:
:func:`load` is the safe format.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
import re
import shutil
import uuid
from pathlib import Path

import joblib
import numpy as np
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.utils.validation import check_is_fitted

from .._nn.backbone import SpecialTokens, float32_weights, quiet_loading
from .._nn.network import SentenceEncoder, TaskNetwork
from .._storage.files import check_output_dir, replace_folder, replaceable
from .readout import Readout

__all__ = ["save", "load", "network_to_state", "network_from_state", "unsaved_attributes"]

#: the manifest of a save, written last (a folder without it is not a save)
MANIFEST = "skbert.json"
FORMAT = "skbert-estimator"
#: raise it when the layout changes; :func:`load` refuses saves newer than it knows
FORMAT_VERSION = 1
NETWORK_FORMAT = "skbert-network"
NETWORK_FORMAT_VERSION = 1

#: the estimators that :func:`load` may build (never an import of a name read from a file)
ESTIMATOR_CLASSES = ("BertSentenceTransformer", "BertTextClassifier")

#: nested saves (``model=fitted``) deeper than this are refused as corrupt
_MAX_DEPTH = 8
#: the names a save gives its files and folders (no separators, no "..")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
#: texts whose encodings tell whether a reloaded tokenizer is the same tokenizer
_PROBE_TEXTS = (
    "",
    "the cat sat on the mat.",
    "Hello, World! It's 3:45pm -- isn't it?",
    "  Leading, trailing\tand\ninner   whitespace  ",
    "Ünïcödé ß café 東京 Привет 🙂",
    "unbelievably antidisestablishmentarianism [MASK] <mask> [UNK]",
)


# ---------------------------------------------------------------------- estimator folders
def save(estimator, path) -> str:
    """Write the fitted ``estimator`` to the folder ``path``; returns ``path``.

    The folder is written under a temporary sibling name and renamed into place at the end,
    so a failed save leaves no folder that loads; a previous save at ``path`` is replaced.
    Parameters, errors and format: :meth:`BertEstimatorBase.save`.
    """
    check_is_fitted(estimator)
    target = Path(check_output_dir(path, "path")).absolute()
    _check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial-{uuid.uuid4().hex}"
    partial.mkdir()
    try:
        _write_estimator(estimator, partial, depth=0)
        _move_into_place(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return os.fspath(path)


def load(path):
    """Load an estimator written by its ``save`` method, without running code from the files.

    The estimator comes back fitted, as it was saved: same parameters, same fitted
    attributes, and bit for bit the same predictions. Only skbert's estimators are built:
    their class comes from an allow-list, never from a name the folder supplies; the weights
    are read with safetensors, everything else from JSON and the tokenizer's own files
    (``AutoTokenizer``, ``trust_remote_code=False``); nothing is unpickled. A model fitted on
    a GPU loads on a CPU-only machine and predicts there (with a warning: see ``device``).

    Parameters
    ----------
    path : str or os.PathLike
        A folder written by ``BertSentenceTransformer.save`` or ``BertTextClassifier.save``.

    Returns
    -------
    BertSentenceTransformer or BertTextClassifier
        The fitted estimator.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist or holds no save (a save that failed leaves none).
    NotADirectoryError
        If ``path`` is a file.
    ValueError
        If the folder is corrupt, was written by a newer skbert, or names a class that skbert
        does not load; the message names the folder and what is wrong.

    See Also
    --------
    BertTextClassifier.save : Write a fitted classifier.
    BertSentenceTransformer.save : Write a fitted transformer.

    Examples
    --------
    >>> import skbert
    >>> texts = ["a gripping, beautiful film", "dull and far too long"]
    >>> est = skbert.BertSentenceTransformer().fit(texts)  # doctest: +SKIP
    >>> est.save("my-vectors")  # doctest: +SKIP
    'my-vectors'
    >>> loaded = skbert.load("my-vectors")  # doctest: +SKIP
    >>> (loaded.transform(texts) == est.transform(texts)).all()  # doctest: +SKIP
    np.True_
    """
    folder = Path(os.fspath(path))
    try:
        return _read_estimator(folder, depth=0)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        raise
    except (ValueError, TypeError, KeyError, OSError, RuntimeError) as exc:
        detail = f"missing entry {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{os.fspath(path)!r} is not a valid skbert save: {detail}") from exc


def unsaved_attributes(estimator) -> set:
    """Names in ``vars(estimator)`` that are neither saved nor pickled: its per-fit caches
    (``_FIT_CACHES``) and transient flags (``_UNSAVED``)."""
    cls = type(estimator)
    return {*getattr(cls, "_FIT_CACHES", ()), *getattr(cls, "_UNSAVED", ())}


def _check_replaceable(target: Path) -> None:
    if not replaceable(target, MANIFEST):
        raise FileExistsError(
            f"path={os.fspath(target)!r} is a folder with files in it that is not an skbert "
            "save; give a new path, an empty folder, or a previous save (which is replaced)."
        )


def _move_into_place(partial: Path, target: Path) -> None:
    """Rename the finished folder ``partial`` to ``target``, replacing an empty folder or a
    previous save (kept aside until the rename succeeds)."""
    replace_folder(partial, target)


def _write_estimator(estimator, folder: Path, depth: int) -> None:
    """Write ``estimator``'s files into the existing folder ``folder``, the manifest last."""
    from .. import __version__

    check_is_fitted(estimator)
    if "network_" not in vars(estimator):
        estimator._loaded_network()  # memory=: the encoder may not be loaded yet
    writer = _Writer(folder, depth)
    params = estimator.get_params(deep=False)
    skip = set(params) | unsaved_attributes(estimator)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "skbert_version": __version__,
        "versions": _library_versions(),
        "class": _estimator_name(estimator, "the estimator"),
        "params": {name: writer.encode(value, name) for name, value in params.items()},
        "fitted": {
            name: writer.encode(value, name)
            for name, value in vars(estimator).items()
            if name not in skip
        },
    }
    text = json.dumps(manifest, allow_nan=False, indent=1)
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def _read_estimator(folder: Path, depth: int):
    if not folder.exists():
        raise FileNotFoundError(f"No skbert save at {os.fspath(folder)!r}: no such folder.")
    if not folder.is_dir():
        raise NotADirectoryError(
            f"{os.fspath(folder)!r} is a file; an skbert save is a folder written by save()."
        )
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(
            f"{os.fspath(folder)!r} is not an skbert save: it has no {MANIFEST} (written last "
            "by save(), so a save that failed has none)."
        )
    manifest = _read_json(manifest_path)
    _check_format(manifest, manifest_path)
    cls = _estimator_class(manifest["class"])
    reader = _Reader(folder, depth)
    params = {name: reader.decode(node, name) for name, node in _mapping(manifest, "params")}
    fitted = {name: reader.decode(node, name) for name, node in _mapping(manifest, "fitted")}
    unknown = set(params) - set(cls._get_param_names())
    if unknown:
        raise ValueError(f"{cls.__name__} has no parameters {sorted(unknown)}")
    odd = [name for name in fitted if not name.isidentifier() or name.startswith("__")]
    if odd:
        raise ValueError(f"{odd[:3]} are not names of fitted attributes")
    estimator = cls(**params)
    vars(estimator).update(fitted)
    return estimator


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{os.fspath(path)!r} is not valid JSON ({exc})") from exc


def _check_format(manifest, path: Path) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{os.fspath(path)!r} does not describe a saved skbert estimator")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"format_version={version!r} is not a format version")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"it was written by skbert {manifest.get('skbert_version')!r} in format version "
            f"{version}; this skbert reads versions up to {FORMAT_VERSION}: upgrade skbert."
        )


def _mapping(manifest, key):
    value = manifest[key]
    if not isinstance(value, dict):
        raise ValueError(f"{key!r} is a {type(value).__name__}, not an object")
    return value.items()


def _estimator_name(estimator, where: str) -> str:
    name = type(estimator).__name__
    if name not in ESTIMATOR_CLASSES or _estimator_class(name) is not type(estimator):
        raise TypeError(
            f"cannot save {where}: a {type(estimator).__module__}.{type(estimator).__qualname__}; "
            f"only {' and '.join(ESTIMATOR_CLASSES)} can be saved."
        )
    return name


def _estimator_class(name):
    """The estimator class called ``name``, from the allow-list only."""
    from ..classifier import BertTextClassifier
    from ..sentence import BertSentenceTransformer

    classes = {cls.__name__: cls for cls in (BertSentenceTransformer, BertTextClassifier)}
    if not isinstance(name, str) or name not in classes:
        raise ValueError(
            f"class={name!r} is not an estimator skbert loads; allowed: "
            f"{', '.join(ESTIMATOR_CLASSES)}"
        )
    return classes[name]


def _library_versions() -> dict:
    import safetensors
    import sklearn
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "scikit-learn": sklearn.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }


# ---------------------------------------------------------------------- networks
def network_to_state(network) -> dict:
    """``network`` as plain data: its JSON description and its tensors as safetensors bytes.

    The value the estimators pickle in place of ``network_``; unpickling it runs no code but
    :func:`network_from_state`.

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        On any device; its tensors are copied to the CPU.

    Returns
    -------
    dict
        ``{"format", "description" (JSON text), "tensors" (safetensors bytes)}``.
    """
    from safetensors.torch import save as safetensors_bytes

    description, tensors = describe_network(network, "network_")
    return {
        "format": NETWORK_FORMAT,
        "description": json.dumps(description, allow_nan=False),
        "tensors": safetensors_bytes(tensors),
    }


def network_from_state(state):
    """The network that :func:`network_to_state` described, rebuilt on the CPU.

    Parameters
    ----------
    state : dict
        As returned by :func:`network_to_state`.

    Returns
    -------
    SentenceEncoder or TaskNetwork
        In eval mode, float32.

    Raises
    ------
    ValueError
        For bytes (the format of earlier skbert pickles, a ``torch.save`` of the module,
        which only ``torch.load(weights_only=False)`` reads: it is refused, as it would run
        any code stored in it) and for a state that is not a network's.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load as tensors_from_bytes

    if isinstance(state, (bytes, bytearray)):
        raise ValueError(
            "network_ holds bytes of the pickle format of an earlier skbert (a torch.save of "
            "the network), which only torch.load(weights_only=False) reads, running any code "
            "stored in it; skbert refuses it. Refit the estimator, or load the pickle with the "
            "skbert version that wrote it, if you trust it, and save() it."
        )
    if not isinstance(state, dict) or state.get("format") != NETWORK_FORMAT:
        raise ValueError(f"network_ is a {type(state).__name__}, not a pickled skbert network")
    try:
        tensors = tensors_from_bytes(bytes(state["tensors"]))
        description = json.loads(state["description"])
    except (SafetensorError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"network_ is corrupt: {exc}") from exc
    return build_network(description, tensors, "network_")


def describe_network(network, where: str):
    """``(description, tensors)`` of a network: plain JSON data and CPU tensors by name.

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        The network.
    where : str
        The attribute holding it, for errors.

    Returns
    -------
    description : dict
        Kind, read-out, backbone (class name, model type, ``config.to_dict()``) and, for a
        :class:`~skbert._nn.network.TaskNetwork`, outputs and dropout.
    tensors : dict of str to torch.Tensor
        ``network.state_dict()``, copied to the CPU.
    """
    if type(network) is TaskNetwork:
        encoder = network.encoder
        head = {"n_outputs": network.output_layer.out_features, "dropout": network.dropout.p}
    elif type(network) is SentenceEncoder:
        encoder, head = network, {}
    else:
        raise TypeError(
            f"cannot save {where}: a {type(network).__qualname__}; networks are stored only "
            "as a SentenceEncoder or a TaskNetwork."
        )
    backbone = encoder.backbone
    config = json.loads(backbone.config.to_json_string(use_diff=False))
    description = {
        "format": NETWORK_FORMAT,
        "format_version": NETWORK_FORMAT_VERSION,
        "kind": type(network).__name__,
        "readout": _Writer(None, 0).encode(encoder.readout, f"{where}.readout"),
        "backbone": {
            "class": type(backbone).__name__,
            "model_type": backbone.config.model_type,
            # from_config may choose another attention kernel than from_pretrained did (as
            # transformers 4.46 does): the saved one keeps the outputs bit-identical
            "attn_implementation": getattr(backbone.config, "_attn_implementation", None),
            "config": config,
        },
        **head,
    }
    return description, _cpu_tensors(network)


def build_network(description, tensors, where: str):
    """Rebuild a network from :func:`describe_network`'s output, on the CPU, in eval mode.

    Raises
    ------
    ValueError
        For an unknown kind or backbone, or tensors that do not fit the network exactly.
    """
    if not isinstance(description, dict) or description.get("format") != NETWORK_FORMAT:
        raise ValueError(f"{where}: not an skbert network description")
    if description.get("format_version") != NETWORK_FORMAT_VERSION:
        raise ValueError(f"{where}: network format {description.get('format_version')!r}")
    kind = description["kind"]
    if kind not in ("SentenceEncoder", "TaskNetwork"):
        raise ValueError(f"{where}: kind={kind!r} is not SentenceEncoder or TaskNetwork")
    readout = _Reader(None, 0).decode(description["readout"], f"{where}.readout")
    if not isinstance(readout, Readout):
        raise ValueError(f"{where}.readout is not a Readout")
    with torch.random.fork_rng(devices=[]):  # new modules draw random weights: not the user's
        backbone = _build_backbone(description["backbone"], where)
        network = SentenceEncoder(backbone, readout)
        if kind == "TaskNetwork":
            n_outputs, dropout = _int(description["n_outputs"]), description["dropout"]
            if type(dropout) not in (int, float):
                raise ValueError(f"{where}: dropout={dropout!r} is not a number")
            network = TaskNetwork(network, n_outputs=n_outputs, dropout=dropout)
    _load_tensors(network, tensors, where)
    return network.eval()


#: attention kernels a saved backbone may ask for (None: transformers' default)
_ATTENTION_KERNELS = (None, "eager", "sdpa")


def _build_backbone(spec, where: str):
    """A Hugging Face encoder of the class and configuration ``spec`` names, built from its
    configuration alone (``AutoConfig.for_model``, ``AutoModel.from_config``) in float32."""
    from transformers import AutoConfig, AutoModel

    config = dict(spec["config"])
    config.pop("auto_map", None)  # code of the checkpoint's own: never run
    model_type = spec["model_type"]
    if config.pop("model_type", model_type) != model_type:
        raise ValueError(f"{where}: the backbone's model_type and its config disagree")
    attention = spec.get("attn_implementation")
    if attention not in _ATTENTION_KERNELS:
        raise ValueError(
            f"{where}: attn_implementation={attention!r} is not one of {_ATTENTION_KERNELS}"
        )
    kernel = {} if attention is None else {"attn_implementation": attention}
    with quiet_loading():
        config = AutoConfig.for_model(model_type, **config)
        backbone = AutoModel.from_config(
            config, trust_remote_code=False, **kernel, **float32_weights()
        )
    if type(backbone).__name__ != spec["class"]:
        raise ValueError(
            f"{where}: model_type={model_type!r} builds a {type(backbone).__name__} here, but "
            f"the saved backbone is a {spec['class']!r} (another transformers version?)"
        )
    return backbone


def _cpu_tensors(module) -> dict:
    """``module.state_dict()`` as separate contiguous CPU copies (safetensors refuses tensors
    that share memory)."""
    return {
        name: tensor.detach().to("cpu", copy=True).contiguous()
        for name, tensor in module.state_dict().items()
    }


def _load_tensors(module, tensors, where: str) -> None:
    try:
        module.load_state_dict(tensors, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{where}: the stored tensors do not fit the network: {exc}") from exc


def _int(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not an int")
    return value


# ---------------------------------------------------------------------- the value codec
class _Writer:
    """Encodes values as tagged JSON, writing weights and tokenizers into ``folder``.

    Every value becomes ``{"type": tag, ...}``: ``none``, ``bool``, ``int``, ``float`` (NaN
    and infinities as strings), ``str``, ``list``, ``tuple``, ``dict`` (keys encoded too),
    ``ndarray``, ``numpy_scalar``, and the special objects of a fitted estimator.
    ``folder=None`` encodes plain values only.
    """

    def __init__(self, folder, depth: int):
        self.folder = folder
        self.depth = depth
        self.names = {MANIFEST}

    def encode(self, value, where: str) -> dict:
        """The tagged JSON of ``value``; ``where`` names it in errors (and in file names)."""
        if value is None:
            return {"type": "none"}
        if isinstance(value, np.generic):  # before the builtins: np.float64 is a float
            return _encode_numpy_scalar(value, where)
        kind = type(value)
        if kind in (bool, int, str):
            return {"type": kind.__name__, "value": value}
        if kind is float:
            return {"type": "float", "value": value if math.isfinite(value) else repr(value)}
        if kind in (list, tuple):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return {"type": kind.__name__, "items": items}
        if kind is dict:
            items = [
                [self.encode(k, f"{where} key {k!r}"), self.encode(v, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
            return {"type": "dict", "items": items}
        if kind is np.ndarray:
            return _encode_array(value, where)
        if kind in (Readout, SpecialTokens):
            fields = {
                f.name: self.encode(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)
            }
            return {"type": kind.__name__, "fields": fields}
        return self._encode_object(value, where)

    def _encode_object(self, value, where: str) -> dict:
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
            _cannot_encode(value, where)
        if type(value) in (SentenceEncoder, TaskNetwork):
            return self._write_network(value, where)
        if type(value) is torch.nn.Linear:
            return self._write_linear(value, where)
        if _is_tokenizer(value):
            return self._write_tokenizer(value, where)
        if hasattr(value, "get_params") and hasattr(value, "_loaded_network"):
            return self._write_nested(value, where)
        _cannot_encode(value, where)

    def _name(self, where: str, suffix: str = "") -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", where).lstrip(".-") or "value"
        name, n = base + suffix, 1
        while name in self.names:
            n += 1
            name = f"{base}-{n}{suffix}"
        self.names.add(name)
        return name

    def _write_tensors(self, tensors: dict, where: str) -> str:
        from safetensors.torch import save_file

        name = self._name(where, ".safetensors")
        save_file(tensors, os.fspath(self.folder / name), metadata={"skbert": where})
        return name

    def _write_network(self, network, where: str) -> dict:
        description, tensors = describe_network(network, where)
        file = self._write_tensors(tensors, where)
        return {"type": "network", "description": description, "file": file}

    def _write_linear(self, layer, where: str) -> dict:
        file = self._write_tensors(_cpu_tensors(layer), where)
        shape = {"in_features": layer.in_features, "out_features": layer.out_features}
        flags = {"bias": layer.bias is not None, "training": layer.training}
        return {"type": "Linear", **shape, **flags, "file": file}

    def _write_tokenizer(self, tokenizer, where: str) -> dict:
        name = self._name(where)
        with quiet_loading():
            tokenizer.save_pretrained(os.fspath(self.folder / name))
        probe = _tokenizer_probe(tokenizer)
        if _tokenizer_probe(_read_tokenizer(self.folder / name)) != probe:
            raise TypeError(
                f"cannot save {where}: this {type(tokenizer).__name__}, written with "
                "save_pretrained and read back with AutoTokenizer, encodes texts differently."
            )
        return {"type": "tokenizer", "folder": name, "probe": probe}

    def _write_nested(self, estimator, where: str) -> dict:
        _estimator_name(estimator, where)
        if self.depth + 1 > _MAX_DEPTH:
            raise TypeError(f"cannot save {where}: estimators nested over {_MAX_DEPTH} deep")
        name = self._name(where)
        (self.folder / name).mkdir()
        _write_estimator(estimator, self.folder / name, self.depth + 1)
        return {"type": "estimator", "folder": name}


class _Reader:
    """Decodes :class:`_Writer`'s tagged JSON; builds only the types it knows."""

    def __init__(self, folder, depth: int):
        self.folder = folder
        self.depth = depth

    def decode(self, node, where: str):
        """The value of the tagged JSON ``node``; ``where`` names it in errors."""
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise ValueError(f"{where}: {node!r:.80} is not a tagged value")
        tag = node["type"]
        decoder = _PLAIN_DECODERS.get(tag)
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

    def items(self, node, where: str) -> list:
        items = node["items"]
        if not isinstance(items, list):
            raise ValueError(f"{where}: items is not a list")
        return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(items)]

    def read_tensors(self, name, where: str) -> dict:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = self.child(name, where)
        try:
            return load_file(os.fspath(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            message = f"{where}: {os.fspath(path)!r} is not a safetensors file ({exc})"
            raise ValueError(message) from exc


def _cannot_encode(value, where: str):
    raise TypeError(
        f"cannot save {where}: a {type(value).__module__}.{type(value).__qualname__}, which "
        "skbert's save format does not store (None, bool, int, float, str, list, tuple, dict, "
        "numpy arrays and scalars, and the objects of a fitted skbert estimator). Delete the "
        "attribute, or pickle the estimator instead."
    )


def _decode_float(reader, node, where):
    value = node["value"]
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if type(value) not in (int, float):
        raise ValueError(f"{where}: {value!r} is not a float")
    return float(value)


def _decode_builtin(kind):
    def decode(reader, node, where):
        value = node["value"]
        if type(value) is not kind:
            raise ValueError(f"{where}: {value!r:.80} is not a {kind.__name__}")
        return value

    return decode


def _decode_dict(reader, node, where):
    pairs = node["items"]
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError(f"{where}: items is not a list of [key, value] pairs")
    result = {}
    for i, (key, value) in enumerate(pairs):
        key = reader.decode(key, f"{where} key {i}")
        try:
            result[key] = reader.decode(value, f"{where}[{key!r}]")
        except TypeError as exc:  # an unhashable key
            raise ValueError(f"{where}: key {i} is not hashable ({exc})") from exc
    return result


def _decode_dataclass(cls):
    def decode(reader, node, where):
        fields = node["fields"]
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(fields, dict) or set(fields) != names:
            raise ValueError(f"{where}: the fields of a {cls.__name__} are {sorted(names)}")
        return cls(**{k: reader.decode(v, f"{where}.{k}") for k, v in fields.items()})

    return decode


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


_PLAIN_DECODERS = {
    "none": lambda reader, node, where: None,
    "bool": _decode_builtin(bool),
    "int": _decode_builtin(int),
    "str": _decode_builtin(str),
    "float": _decode_float,
    "list": lambda reader, node, where: reader.items(node, where),
    "tuple": lambda reader, node, where: tuple(reader.items(node, where)),
    "dict": _decode_dict,
    "ndarray": lambda reader, node, where: _decode_array(node, where),
    "numpy_scalar": lambda reader, node, where: _decode_numpy_scalar(node, where),
    "Readout": _decode_dataclass(Readout),
    "SpecialTokens": _decode_dataclass(SpecialTokens),
    "RandomState": _decode_random_state,
    "joblib.Memory": _decode_memory,
    "FrozenEstimator": _decode_frozen,
    "path": _decode_path,
}


def _decode_network(reader, node, where):
    tensors = reader.read_tensors(node["file"], where)
    return build_network(node["description"], tensors, where)


def _decode_linear(reader, node, where):
    tensors = reader.read_tensors(node["file"], where)
    shape = (_int(node["in_features"]), _int(node["out_features"]))
    with torch.random.fork_rng(devices=[]):
        layer = torch.nn.Linear(*shape, bias=node["bias"] is True)
    _load_tensors(layer, tensors, where)
    return layer.train(node["training"] is True)


def _decode_tokenizer(reader, node, where):
    folder = reader.child(node["folder"], where)
    try:
        tokenizer = _read_tokenizer(folder)
    except Exception as exc:  # tokenizers raises its own errors for a corrupt file
        message = f"{where}: the tokenizer in {os.fspath(folder)!r} does not load ({exc!r})"
        raise ValueError(message) from exc
    if _tokenizer_probe(tokenizer) != node["probe"]:
        raise ValueError(
            f"{where}: the tokenizer read back encodes texts differently from the saved one "
            "(another transformers or tokenizers version?)"
        )
    return tokenizer


def _decode_estimator(reader, node, where):
    if reader.depth + 1 > _MAX_DEPTH:
        raise ValueError(f"{where}: estimators nested over {_MAX_DEPTH} deep")
    return _read_estimator(reader.child(node["folder"], where), reader.depth + 1)


_FILE_DECODERS = {
    "network": _decode_network,
    "Linear": _decode_linear,
    "tokenizer": _decode_tokenizer,
    "estimator": _decode_estimator,
}


# ---------------------------------------------------------------------- numpy values
#: array kinds stored as raw bytes: bool, signed and unsigned ints, floats, complex
_RAW_KINDS = "biufc"


def _encode_array(array: np.ndarray, where: str) -> dict:
    head = {"type": "ndarray", "dtype": array.dtype.str, "shape": list(array.shape)}
    kind = array.dtype.kind
    if kind in _RAW_KINDS:
        data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
        return {**head, "data": data}
    if kind == "U":
        return {**head, "items": [str(v) for v in array.ravel().tolist()]}
    if kind == "O":
        items = []
        for i, value in enumerate(array.ravel().tolist()):
            if not isinstance(value, (str, int, float, bool, np.generic)):
                raise TypeError(
                    f"cannot save {where}: item {i} of this object array is a "
                    f"{type(value).__name__}; object arrays are stored when their items are "
                    "str, int, float or bool (labels)."
                )
            items.append(_Writer(None, 0).encode(value, f"{where}[{i}]"))
        return {**head, "items": items}
    raise TypeError(
        f"cannot save {where}: an array of dtype {array.dtype}; arrays of bool, numbers, "
        "str and object labels are stored."
    )


def _decode_array(node, where: str) -> np.ndarray:
    dtype = _dtype(node["dtype"], "biufcUO", where)
    shape = node["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"{where}: shape {shape!r} is not a list of sizes")
    size = math.prod(shape)
    if dtype.kind in _RAW_KINDS:
        data = _b64(node["data"], where)
        if len(data) != size * dtype.itemsize:
            raise ValueError(f"{where}: {len(data)} bytes for {size} items of {dtype}")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    items = node["items"]
    if not isinstance(items, list) or len(items) != size:
        raise ValueError(f"{where}: {size} items expected")
    if dtype.kind == "U":
        if not all(isinstance(v, str) for v in items):
            raise ValueError(f"{where}: a str array holds a non-str")
        return np.array(items, dtype=dtype).reshape(shape)
    reader = _Reader(None, 0)
    values = [reader.decode(v, f"{where}[{i}]") for i, v in enumerate(items)]
    if not all(isinstance(v, (str, int, float, bool, np.generic)) for v in values):
        raise ValueError(f"{where}: an object array holds more than labels")
    array = np.empty(size, dtype=object)
    array[:] = values
    return array.reshape(shape)


def _encode_numpy_scalar(value: np.generic, where: str) -> dict:
    kind = value.dtype.kind
    if kind in _RAW_KINDS:
        data = base64.b64encode(value.tobytes()).decode("ascii")
        return {"type": "numpy_scalar", "dtype": value.dtype.str, "data": data}
    if kind == "U":
        return {"type": "numpy_scalar", "dtype": value.dtype.str, "value": str(value)}
    raise TypeError(
        f"cannot save {where}: a numpy {value.dtype} scalar; numpy bool, number and str "
        "scalars are stored."
    )


def _decode_numpy_scalar(node, where: str):
    dtype = _dtype(node["dtype"], _RAW_KINDS + "U", where)
    if dtype.kind == "U":
        value = node["value"]
        if not isinstance(value, str):
            raise ValueError(f"{where}: {value!r:.80} is not a str")
        return np.str_(value)
    data = _b64(node["data"], where)
    if len(data) != dtype.itemsize:
        raise ValueError(f"{where}: {len(data)} bytes for one {dtype}")
    return np.frombuffer(data, dtype=dtype)[0]


def _dtype(text, kinds: str, where: str) -> np.dtype:
    """The numpy dtype ``text`` (as ``dtype.str`` writes it), if of one of ``kinds``."""
    if not isinstance(text, str) or not re.fullmatch(r"[<>|=][biufcUO]\d{0,4}", text):
        raise ValueError(f"{where}: dtype {text!r:.40} is not a stored dtype")
    dtype = np.dtype(text)
    if dtype.kind not in kinds:
        raise ValueError(f"{where}: dtype {text!r} is not allowed here")
    return dtype


def _b64(text, where: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"{where}: data is not base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"{where}: data is not base64 ({exc})") from exc


# ---------------------------------------------------------------------- tokenizers
def _is_tokenizer(value) -> bool:
    from transformers import PreTrainedTokenizerBase

    return isinstance(value, PreTrainedTokenizerBase)


def _read_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    with quiet_loading():
        return AutoTokenizer.from_pretrained(os.fspath(folder), trust_remote_code=False)


def _tokenizer_probe(tokenizer) -> dict:
    """What a reloaded tokenizer must reproduce: its class, padding id, length limit and the
    ids of probe texts, alone and as pairs (plain JSON)."""
    singles = [tokenizer(text)["input_ids"] for text in _PROBE_TEXTS]
    texts = _PROBE_TEXTS
    pairs = [tokenizer(a, b)["input_ids"] for a, b in zip(texts[:-1], texts[1:], strict=True)]
    limit = tokenizer.model_max_length
    return {
        "class": type(tokenizer).__name__,
        "pad_token_id": tokenizer.pad_token_id,
        "model_max_length": limit if type(limit) is int else repr(limit),
        "singles": [list(map(int, ids)) for ids in singles],
        "pairs": [list(map(int, ids)) for ids in pairs],
    }

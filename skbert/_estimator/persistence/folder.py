"""Save and load a whole fitted estimator without pickle: a folder of safetensors and JSON.

A save is a folder::

    skbert.json                  format and versions, the estimator's class, its parameters
                                 and every fitted attribute, as tagged JSON (written last)
    network_.safetensors         the tensors of a network (or of an output layer)
    tokenizer_/                  the tokenizer (``save_pretrained``)
    model/                       a fitted estimator given as ``model`` (saved the same way)

Nothing read back runs code from the files: the estimator's class comes from the registry of
estimator classes (:mod:`.registry`), each value from a fixed set of tags (:mod:`.codec`),
networks are rebuilt from their description (:mod:`skbert._nn.state`) with the classes of
:mod:`skbert._nn.network` and ``transformers.AutoModel.from_config``, their weights read with
``safetensors``, the tokenizer with ``AutoTokenizer`` (``trust_remote_code=False``). No
``pickle``, no ``torch.load(weights_only=False)``, no ``np.load(allow_pickle=True)``.

This module holds the folder itself: its manifest and format version, the atomic replacement
of a previous save, and writing and reading one estimator (:meth:`BertEstimatorBase.save
<skbert._estimator.base.BertEstimatorBase.save>` and :func:`skbert.load`). The estimators'
pickles (``__getstate__``) store ``network_`` in the same network format
(:func:`~skbert._nn.state.network_to_state`), so a model fitted on a GPU unpickles on a
CPU-only machine. A pickle as a whole still runs code when it is loaded: :func:`load` is the
safe format.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from ..._core.version import __version__
from ..._storage.files import (
    check_output_dir,
    replace_folder,
    replaceable,
    sibling,
    sibling_prefix,
)
from .codec import MANIFEST, SaveReader, SaveWriter
from .registry import UnknownEstimatorClass, estimator_class, estimator_name

__all__ = ["save", "load", "MANIFEST", "FORMAT", "FORMAT_VERSION"]

FORMAT = "skbert-estimator"
#: raise it when the layout changes; :func:`load` refuses saves newer than it knows
FORMAT_VERSION = 1


def save(estimator, path) -> str:
    """Write the fitted ``estimator`` to the folder ``path``; returns ``path``.

    The folder is written under a temporary sibling name and renamed into place at the end,
    so a failed save leaves no folder that loads; a previous save at ``path`` is replaced.
    Parameters, errors and format: :meth:`BertEstimatorBase.save`.
    """
    check_is_fitted(estimator)
    target = Path(check_output_dir(path, "path", _SAVE_FOLDERS)).absolute()  # ~ expanded
    _check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = sibling(target, "partial")
    partial.mkdir()
    try:
        _write_estimator(estimator, partial, depth=0)
        replace_folder(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return os.fspath(path)


def load(path):
    """Load an estimator written by its ``save`` method, without running code from the files.

    The estimator comes back fitted, as it was saved: same parameters, same fitted
    attributes, and bit for bit the same predictions. Only skbert's estimators are built:
    their class comes from the registry of estimator classes, never from an import of a name
    the folder supplies; the weights are read with safetensors, everything else from JSON and
    the tokenizer's own files (``AutoTokenizer``, ``trust_remote_code=False``); nothing is
    unpickled. A model fitted on a GPU loads on a CPU-only machine and predicts there (with a
    warning: see ``device``).

    Parameters
    ----------
    path : str or os.PathLike
        A folder (``~`` is the home folder) written by the ``save`` method of
        ``BertSentenceTransformer``, ``BertTextClassifier``, ``BertTextRegressor`` (or a
        subclass defined in this process).

    Returns
    -------
    BertSentenceTransformer, BertTextClassifier or BertTextRegressor
        The fitted estimator.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist or holds no save (a save that failed leaves none; one
        interrupted while it replaced a previous save names where that one is kept).
    NotADirectoryError
        If ``path`` is a file.
    TypeError
        If ``path`` is not a str or os.PathLike.
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
    >>> bool((loaded.transform(texts) == est.transform(texts)).all())  # doctest: +SKIP
    True
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path={path!r} is not a folder path; give the folder (a str or os.PathLike) that "
            "an estimator's save wrote."
        )
    folder = Path(os.fspath(path)).expanduser()
    try:
        return _read_estimator(folder, depth=0)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        raise
    except UnknownEstimatorClass as exc:  # a sound save of a class not defined here
        raise ValueError(f"{os.fspath(path)!r} holds a save whose {exc}") from exc
    except (ValueError, TypeError, KeyError, OSError, RuntimeError) as exc:
        detail = f"missing entry {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{os.fspath(path)!r} is not a valid skbert save: {detail}") from exc


_SAVE_FOLDERS = "an empty folder, or a previous save (which is replaced)"


def _is_previous_save(folder: Path) -> bool:
    """Whether ``folder`` holds a manifest that :func:`save` wrote (not any ``skbert.json``)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def _check_replaceable(target: Path) -> None:
    try:
        working = os.path.realpath(os.getcwd())
    except OSError:  # the working directory is gone: nothing to protect
        working = os.sep
    real = os.path.realpath(target)
    try:
        above = working != os.sep and os.path.commonpath([working, real]) == real
    except ValueError:  # on two drives (Windows): not above it
        above = False
    if above:
        raise ValueError(
            f"path={os.fspath(target)!r} is the working directory or a folder above it; a save "
            "replaces its folder as a whole, which would remove the working directory from "
            "under this process: give a folder inside it, e.g. path='model'."
        )
    if target.is_symlink():
        raise FileExistsError(
            f"path={os.fspath(target)!r} is a symbolic link; a save replaces its folder as a "
            f"whole: give the folder it points to ({os.fspath(target.resolve())!r}) or a new path."
        )
    if not replaceable(target, _is_previous_save):
        raise FileExistsError(
            f"path={os.fspath(target)!r} is a folder with files in it that is not an skbert "
            f"save; give a new path or {_SAVE_FOLDERS}."
        )


def _write_estimator(estimator, folder: Path, depth: int) -> None:
    """Write ``estimator``'s files into the existing folder ``folder``, the manifest last."""
    check_is_fitted(estimator)
    if "network_" not in vars(estimator):  # memory=: a deferred encoder is saved loaded
        estimator.network_ = estimator.fitted_network()
    writer = SaveWriter(folder, depth, write_estimator=_write_estimator)
    params = estimator.get_params(deep=False)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "skbert_version": __version__,
        "versions": _library_versions(),
        "class": estimator_name(estimator, "the estimator"),
        "params": {name: writer.encode(value, name) for name, value in params.items()},
        "fitted": {
            name: writer.encode(value, name)
            for name, value in vars(estimator).items()
            if name not in params and name != _ROUTING
        },
        "metadata_requests": writer.encode(_metadata_requests(estimator), _ROUTING),
    }
    text = json.dumps(manifest, allow_nan=False, indent=1)
    (folder / MANIFEST).write_text(text, encoding="utf-8")


def _read_estimator(folder: Path, depth: int):
    if not folder.exists():
        pattern = glob.escape(sibling_prefix(folder, "old")) + "*"
        kept = sorted(folder.parent.glob(pattern), key=lambda p: p.stat().st_mtime)
        aside = (
            f" A save there was interrupted while it replaced the previous one, which is kept "
            f"aside as {os.fspath(kept[-1])!r}: rename it to load it."
            if kept and folder.parent.is_dir()
            else ""
        )
        raise FileNotFoundError(f"No skbert save at {os.fspath(folder)!r}: no such folder.{aside}")
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
    cls = estimator_class(manifest["class"])
    reader = SaveReader(folder, depth, read_estimator=_read_estimator)
    params = {name: reader.decode(node, name) for name, node in _mapping(manifest, "params")}
    fitted = {name: reader.decode(node, name) for name, node in _mapping(manifest, "fitted")}
    unknown = set(params) - set(cls._get_param_names())
    if unknown:
        raise ValueError(f"{cls.__name__} has no parameters {sorted(unknown)}")
    odd = [name for name in fitted if not name.isidentifier() or name.startswith("__")]
    if odd:
        raise ValueError(f"{odd[:3]} are not names of fitted attributes")
    missing = [name for name in getattr(cls, "_SAVED_FITTED", ()) if name not in fitted]
    if missing:
        raise ValueError(f"the fitted attributes {missing} are missing")
    estimator = cls(**params)
    vars(estimator).update(fitted)
    if "metadata_requests" in manifest:  # earlier saves have none
        requests = reader.decode(manifest["metadata_requests"], "metadata_requests")
        _set_metadata_requests(estimator, requests)
    return estimator


#: where scikit-learn keeps an estimator's metadata-routing requests (set_*_request)
_ROUTING = "_metadata_request"


def _metadata_requests(estimator) -> dict | None:
    """``{method: {parameter: request}}`` of what ``set_<method>_request`` set on this
    estimator (None if nothing was): plain values, unlike the request object itself."""
    from sklearn.utils._metadata_requests import MethodMetadataRequest

    request = vars(estimator).get(_ROUTING)
    if request is None:
        return None
    return {
        method: dict(value.requests)
        for method, value in vars(request).items()
        if isinstance(value, MethodMetadataRequest) and value.requests
    }


def _set_metadata_requests(estimator, requests) -> None:
    """Make the saved requests again through the estimator's own ``set_<method>_request``."""
    if not requests:
        return
    if not isinstance(requests, dict) or not all(isinstance(r, dict) for r in requests.values()):
        raise ValueError(f"'metadata_requests' is not an object of objects: {requests!r}")
    import sklearn

    with sklearn.config_context(enable_metadata_routing=True):
        for method, request in requests.items():
            setter = getattr(estimator, f"set_{method}_request", None)
            if setter is None:
                raise ValueError(f"{type(estimator).__name__} has no set_{method}_request")
            setter(**request)


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

"""Checkpoint and resume of the training loop: the whole state in one file, written atomically.

:class:`TrainingCheckpoint` is handed to :func:`skbert._training.loop.train`, which writes a
snapshot (:mod:`skbert._training.snapshot`) every ``every_n_steps`` optimiser steps and at each
epoch's end, and continues from the snapshot when one of the same run is there. A snapshot is
ONE file that ``torch.load(..., weights_only=True)`` reads (tensors, numbers, strings, lists and
dicts: no pickled objects), written to a temporary file in the same folder, flushed to disk and
renamed over the old one, so a crash leaves the previous snapshot whole. A small JSON sidecar,
written after it, tells the run's seed without reading the weights.

A snapshot belongs to one run: it stores a fingerprint of the caller's data key, the settings
that change the result, the seed and the initial weights, and one of another run is refused
rather than silently continued or overwritten.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import uuid

import numpy as np
import torch

from .._core.launch import current_share
from .._storage.files import atomic_write, check_output_dir
from .._storage.fingerprint import weights_fingerprint

__all__ = ["TrainingCheckpoint"]

STATE_FILE = "training_state.pt"
INFO_FILE = "training_state.json"
FORMAT = 1

#: what each part of a run's identity means, for the refusal message
_IDENTITY_PARTS = {
    "data": "the training data or task (data_key)",
    "seed": "the seed (random_state)",
    "network": "the initial weights (model, or the weights a warm start began from)",
}


class TrainingCheckpoint:
    """Where and how often :func:`~skbert._training.loop.train` saves its state, to resume.

    Parameters
    ----------
    directory : str or os.PathLike
        Folder of the checkpoint (created on the first write). It holds
        ``training_state.pt`` (the state) and ``training_state.json`` (its summary).
    every_n_steps : int
        Write the state every this many optimiser steps (>= 1); it is also written at the
        end of each epoch.
    data_key : str
        The caller's hash of its training data and task: a stored state is only resumed
        when this key, the training settings, the seed and the initial weights all match.
    name : str, default="checkpoint_dir"
        The parameter's name in error messages.

    Raises
    ------
    NotADirectoryError
        If ``directory`` is an existing file.
    TypeError
        If ``every_n_steps`` is not an int or ``data_key`` not a str.
    ValueError
        If ``every_n_steps`` < 1.

    Examples
    --------
    >>> from skbert._training.checkpoint import TrainingCheckpoint
    >>> checkpoint = TrainingCheckpoint("fit-state", every_n_steps=500, data_key="3f2a...")
    >>> checkpoint.stored_seed() is None  # nothing stored yet
    True
    """

    def __init__(self, directory, every_n_steps, data_key, *, name="checkpoint_dir"):
        self.name = name
        self.directory = check_output_dir(directory, name)
        self.every_n_steps = _check_every_n_steps(every_n_steps)
        if not isinstance(data_key, str):
            raise TypeError(f"data_key must be a str, got {type(data_key).__name__}.")
        self.data_key = data_key
        self._initial_weights = None  # set by start_from

    def __repr__(self) -> str:
        return f"TrainingCheckpoint({self.directory!r}, every_n_steps={self.every_n_steps})"

    @property
    def state_path(self) -> str:
        """Path of the state file."""
        return os.path.join(self.directory, STATE_FILE)

    @property
    def info_path(self) -> str:
        """Path of the JSON summary written beside the state."""
        return os.path.join(self.directory, INFO_FILE)

    def due(self, step: int) -> bool:
        """Whether the state is written after optimiser step ``step`` (1-based)."""
        return step % self.every_n_steps == 0

    def start_from(self, module) -> None:
        """Take the run's initial weights from ``module`` now, before a phase of the fit that
        ``data_key`` covers and that need not repeat bit for bit.

        That phase is the within-task masked-LM training of ``mlm_steps``, run before the
        loop: another number of threads, or CUDA, gives other weights each time, and a resume
        would be refused for "other initial weights". :meth:`identity` then hashes the weights
        taken here instead of the network the loop receives; the stored state holds every
        weight, so a resumed run continues from those it trained.

        Parameters
        ----------
        module : torch.nn.Module
            What the fit starts from (the encoder as loaded, before the masked-LM phase).
        """
        self._initial_weights = "before training: " + weights_fingerprint(module)

    def identity(self, network, settings: dict, seed: int) -> dict:
        """The fingerprint of a run, computed before it trains.

        Parameters
        ----------
        network : torch.nn.Module
            The network as the run begins (its weights are hashed, unless :meth:`start_from`
            took the initial weights before).
        settings : dict
            The training settings that change the result, as JSON values.
        seed : int
            The run's seed.

        Returns
        -------
        dict
            JSON values: ``data``, ``settings``, ``seed`` and ``network``.
        """
        identity = {
            "data": hashlib.blake2b(self.data_key.encode(), digest_size=20).hexdigest(),
            "settings": settings,
            "seed": int(seed),
            "network": self._initial_weights or weights_fingerprint(network),
        }
        return json.loads(_to_json(identity))  # as it reads back

    def stored_seed(self) -> int | None:
        """The seed the stored state was trained with, or None when there is no state.

        Lets an estimator with ``random_state=None`` resume with the seed it drew before. Read
        from the JSON summary when it belongs to the state file; otherwise from the state file
        itself, memory-mapped, so that the weights are not read into memory.

        Returns
        -------
        int or None

        Raises
        ------
        ValueError
            If the state file cannot be read.
        """
        if not os.path.isfile(self.state_path):
            return None
        info = self._read_info()
        stat = os.stat(self.state_path)
        if info is not None and info.get("state_file") == [stat.st_size, stat.st_mtime_ns]:
            return int(info["seed"])
        return int(self._read_state(mmap=True)["seed"])

    def load(self, identity: dict) -> dict | None:
        """The stored state of the run ``identity``, or None when nothing is stored.

        Parameters
        ----------
        identity : dict
            From :meth:`identity`, for the run about to start.

        Returns
        -------
        dict or None
            The snapshot that :func:`~skbert._training.loop.train` wrote, on the CPU.

        Raises
        ------
        ValueError
            If the stored state is of another run, or cannot be read.
        """
        if not os.path.isfile(self.state_path):
            return None
        stored = self._read_state(mmap=False)
        if stored.get("format") != FORMAT:
            raise ValueError(
                f"{self._where()} holds a training state of format {stored.get('format')!r}; "
                f"this version of skbert reads format {FORMAT}. {self._remedy()}"
            )
        differences = _differences(json.loads(stored["identity"]), identity)
        if differences:
            raise ValueError(
                f"{self._where()} holds the training state of another run, which this one "
                f"cannot continue without mixing the two: it differs in "
                f"{'; '.join(differences)}. {self._remedy()}"
            )
        info = self._read_info()
        stale = info is None or info.get("write_id") != stored["write_id"]
        if stale and current_share().writer:  # in a torchrun launch, rank 0 writes
            self._write_info(stored)  # interrupted between the two writes: summary is stale
        return stored

    def save(self, snapshot: dict, identity: dict) -> None:
        """Write ``snapshot`` atomically, then its JSON summary.

        Parameters
        ----------
        snapshot : dict
            Tensors and plain Python values; its ``loop`` entry has ``step`` and
            ``finished``.
        identity : dict
            From :meth:`identity`.
        """
        os.makedirs(self.directory, exist_ok=True)
        stored = {
            **_plain(snapshot, "snapshot"),
            "format": FORMAT,
            "write_id": uuid.uuid4().hex,
            "identity": _to_json(identity),
            "seed": identity["seed"],
        }
        atomic_write(self.state_path, lambda handle: torch.save(stored, handle))
        self._write_info(stored)

    # ------------------------------------------------------------------ files
    def _write_info(self, stored: dict) -> None:
        stat = os.stat(self.state_path)
        info = {
            "format": FORMAT,
            "write_id": stored["write_id"],
            "seed": stored["seed"],
            "step": stored["loop"]["step"],
            "finished": stored["loop"]["finished"],
            "identity": json.loads(stored["identity"]),
            "state_file": [stat.st_size, stat.st_mtime_ns],
        }
        data = json.dumps(info, indent=1, sort_keys=True).encode()
        atomic_write(self.info_path, lambda handle: handle.write(data))

    def _read_info(self) -> dict | None:
        try:
            with open(self.info_path, encoding="utf-8") as handle:
                info = json.load(handle)
        except (OSError, ValueError):
            return None
        return info if isinstance(info, dict) else None

    def _read_state(self, *, mmap: bool) -> dict:
        try:
            stored = torch.load(self.state_path, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as error:  # a truncated, emptied or foreign file
            # (not torch's own message: it suggests weights_only=False, which runs code)
            raise ValueError(
                f"{self._where()} holds a training state that cannot be read "
                f"({type(error).__name__}: truncated, damaged or not written by skbert). "
                f"{self._remedy()}"
            ) from error
        if not isinstance(stored, dict) or "seed" not in stored or "identity" not in stored:
            raise ValueError(f"{self._where()} is not a skbert training state. {self._remedy()}")
        return stored

    def _where(self) -> str:
        return f"{self.name}={self.directory!r} ({STATE_FILE})"

    def _remedy(self) -> str:
        return f"Delete that folder, or pick another {self.name}, to start anew."


def _check_every_n_steps(every_n_steps) -> int:
    if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, numbers.Integral):
        raise TypeError(f"every_n_steps={every_n_steps!r} must be an int >= 1.")
    if every_n_steps < 1:
        raise ValueError(f"every_n_steps={every_n_steps!r} is not allowed; it must be >= 1.")
    return int(every_n_steps)


def _plain(value, where: str):
    """``value`` with numpy scalars as Python numbers (a numpy learning rate reaches the
    optimiser's groups), so that ``weights_only`` loading reads it; anything else that such
    loading refuses is an error now rather than at resume time."""
    if isinstance(value, np.generic):  # first: np.float64 is a float too
        return value.item()
    if isinstance(value, torch.Tensor | bool | int | float | str | None):
        return value
    if isinstance(value, dict):
        return {key: _plain(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(item, f"{where}[{i}]") for i, item in enumerate(value))
    raise TypeError(
        f"{where} is a {type(value).__name__}; a training state holds only tensors, numbers, "
        "strings, None, lists, tuples and dicts."
    )


def _to_json(value) -> str:
    """``value`` as JSON; numpy scalars (a grid search's ``np.arange``) as Python numbers."""
    return json.dumps(
        value, sort_keys=True, default=lambda v: v.item() if hasattr(v, "item") else str(v)
    )


def _differences(stored: dict, current: dict) -> list:
    """What differs between two identities, in words."""
    found = [
        f"{_IDENTITY_PARTS[key]}" for key in _IDENTITY_PARTS if stored.get(key) != current[key]
    ]
    old, new = stored.get("settings") or {}, current["settings"]
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            found.append(f"{key} (stored {old.get(key)!r}, now {new.get(key)!r})")
    return found

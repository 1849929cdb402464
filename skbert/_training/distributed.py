"""Data-parallel training across the processes of a ``torchrun`` launch (torch.distributed).

When a rank of a launch (:mod:`skbert._core.launch` reads which one) fits an skbert estimator,
the training loop (:mod:`skbert._training.loop`) joins the launch's process group (gloo for CPU
tensors, NCCL for CUDA ones) with :func:`join` and trains one model with
:class:`~torch.nn.parallel.DistributedDataParallel` through :class:`StepLoss`: every process
draws the same global batches, computes the loss of its contiguous
:class:`~skbert._core.launch.Share` of each, and DDP averages the gradients, weighted so that
the step is the one a single process takes on the whole batch. Besides the loop, the
estimators (:mod:`skbert._estimator.base`: :func:`shared_seed`) and :mod:`skbert.pretraining`
(:func:`shared_seed`, :func:`barrier`) use its collectives. Outside a launch nothing of this
runs.

No scikit-learn here: only torch, numpy and the standard library.
"""

from __future__ import annotations

import atexit
import collections
import datetime
import hashlib
import inspect
import json
import math
import os

import numpy as np
import torch
from torch import nn

from .._core.launch import SINGLE, Share, current_share, group_ready, launch, switched_off

if torch.distributed.is_available():
    # torch.distributed.nn binds the default process group as the default argument of its
    # functions when it is first imported, and transformers imports it when it loads a model.
    # Imported after the group exists, it holds the group past destroy_process_group(): the
    # group's gloo threads then run into the interpreter's shutdown, where they can abort the
    # process (SIGABRT, "terminate called without an active exception"). Imported before any
    # group exists (here, 2 ms), it binds None.
    import torch.distributed.nn  # noqa: F401

__all__ = [
    "TIMEOUT_VARIABLE",
    "RanksDisagree",
    "StepLoss",
    "abandon",
    "barrier",
    "check_agree",
    "join",
    "run_values",
    "shared_seed",
    "sum_over_ranks",
]

#: The environment variable with the seconds a rank of skbert's process group waits in a
#: collective for the others before it fails (default :data:`DEFAULT_TIMEOUT_S`; gloo's own is
#: 30 minutes). It bounds the wait where a rank stops without leaving the group (stopped,
#: stuck); a fit that fails on one rank leaves the group at once (:func:`abandon`).
TIMEOUT_VARIABLE = "SKBERT_DISTRIBUTED_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0

_JOINED = []  # the process group skbert initialised, to destroy at exit
#: the process that joined it: a process forked from that one (not a rank) trains alone
_JOINED_BY = [None]
#: Why this process left skbert's process group after a fit failed on one rank (empty while
#: it has not): the other ranks are not where this one is, so no later fit can train with them.
_ABANDONED = []
#: The tensors of skbert's recent collectives, kept until the group is destroyed. At
#: destroy_process_group() a gloo worker thread can be freeing the tensors of an earlier
#: collective; were its reference the last, it would wait for the GIL, which the main thread
#: holds while it waits for that thread to end (a deadlock seen with torch 2.2; at the
#: interpreter's shutdown, an abort). Kept here, they are freed by the main thread afterwards.
_RECENT = collections.deque(maxlen=16)


def _kept(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, referenced until the group is destroyed (see :data:`_RECENT`)."""
    _RECENT.append(tensor)
    return tensor


def join(device: torch.device | None = None) -> Share:
    """This process's share of a fit, joining the launch's process group on first use.

    The group is the user's when one is initialised already; else, in a launch, skbert
    initialises it from the launcher's variables (``env://``): gloo for CPU tensors, and NCCL
    for CUDA tensors where CUDA is available, waiting at most ``SKBERT_DISTRIBUTED_TIMEOUT``
    seconds (:data:`TIMEOUT_VARIABLE`) in a collective. It is destroyed when the process exits,
    or when a fit fails on one rank (:func:`abandon`).

    Raises
    ------
    ValueError
        If ``device`` is the CPU and the group has no backend for CPU tensors (NCCL only), or
        ``SKBERT_DISTRIBUTED_TIMEOUT`` is not a number of seconds > 0.
    RuntimeError
        If this process left the group after a fit failed (:func:`abandon`).
    """
    if switched_off():
        return SINGLE
    dist = torch.distributed
    if not dist.is_available():
        return SINGLE
    where = launch()
    if where is None and _JOINED_BY[0] not in (None, os.getpid()):
        return SINGLE  # forked from a rank (a joblib or Dask worker): not a rank, alone
    if _ABANDONED and where is not None:
        raise RuntimeError(_ABANDONED[0])
    if not dist.is_initialized():
        if where is None:
            return SINGLE
        backend = "gloo"
        if torch.cuda.is_available():
            # as local_device picks it; ranks past the GPUs (a device='cpu' fit, which
            # local_device lets be) share them: no NCCL collective runs on them
            torch.cuda.set_device(where.local_rank % torch.cuda.device_count())
            backend = "cpu:gloo,cuda:nccl"
        dist.init_process_group(backend=backend, timeout=_timeout())
        _JOINED.append(True)
        _JOINED_BY[0] = os.getpid()
        atexit.register(_leave)
    share = Share(dist.get_rank(), dist.get_world_size())
    if share.distributed and device is not None:
        _check_backend(device)
    return share


def _timeout() -> datetime.timedelta:
    """How long a collective of skbert's group waits: ``SKBERT_DISTRIBUTED_TIMEOUT`` seconds."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"{TIMEOUT_VARIABLE}={text!r} is not allowed: it must be a number of seconds > 0 "
            f"(how long a rank waits for the others in a collective; unset: "
            f"{DEFAULT_TIMEOUT_S:g})."
        )
    return datetime.timedelta(seconds=seconds)


def abandon(error: BaseException) -> None:
    """Leave skbert's process group after ``error`` stopped a fit on this rank alone.

    The other ranks may be waiting for this one in a collective of that fit (the gradients'
    reduction): destroying the group closes its connections, so that they fail at once
    (gloo: "Connection closed by peer") rather than after the timeout, and leave it in turn.
    The ranks are no longer at the same point of the same fit, so every later fit in this
    process refuses (:func:`join`); the launch must be restarted. A group that the user
    initialised is the user's to destroy: it is left as it is.
    """
    if not _JOINED or _ABANDONED:
        return
    _ABANDONED.append(
        f"this process left its torchrun launch's process group when a fit failed on one "
        f"rank ({type(error).__name__}: {str(error)[:300]}), so that no rank waits for the "
        "others in that fit: the ranks are no longer in step, and no later fit can train "
        "with them. Restart the launch to fit again (inside a launch, a GridSearchCV or "
        "cross_validate should set error_score='raise', so that a failed fit stops it)."
    )
    _leave()


def _leave() -> None:
    if _JOINED and group_ready():
        torch.distributed.destroy_process_group()
    _JOINED.clear()
    _RECENT.clear()


def _check_backend(device: torch.device) -> None:
    backend = str(torch.distributed.get_backend()).lower()
    if device.type == "cpu" and not ("gloo" in backend or "mpi" in backend):
        raise ValueError(
            f"device='cpu' but the process group's backend is {backend!r}, which reduces no "
            "CPU tensors; initialise it with backend='cpu:gloo,cuda:nccl' (or let skbert "
            "initialise it), or train on device='cuda'."
        )


def _collective_device() -> torch.device:
    """Where small collectives run: the CPU unless the group reduces CUDA tensors only."""
    backend = str(torch.distributed.get_backend()).lower()
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def shared_seed(seed: int) -> int:
    """Rank 0's ``seed`` on every rank (a fit's split, initialisation and batch order depend on
    it; ``random_state=None`` draws a different one in each process). ``seed`` outside a
    launch."""
    share = join()
    if not share.distributed:
        return int(seed)
    value = torch.tensor([int(seed)], dtype=torch.int64, device=_collective_device())
    torch.distributed.broadcast(_kept(value), src=0)
    return int(value.item())


class RanksDisagree(RuntimeError):
    """Raised by :func:`check_agree` on every rank at once (the ranks stay in step)."""


def check_agree(values: dict) -> None:
    """Raise :class:`RanksDisagree` unless every rank has the same ``{name: number}`` (before a
    collective that would otherwise wait for ever, or train on different data). A number must
    be one that float64 holds exactly (an integer below 2**53)."""
    share = current_share()
    if not share.distributed:
        return
    numbers = torch.tensor([float(v) for v in values.values()], dtype=torch.float64)
    numbers = numbers.to(_collective_device())
    low, high = numbers.clone(), numbers.clone()
    torch.distributed.all_reduce(_kept(low), op=torch.distributed.ReduceOp.MIN)
    torch.distributed.all_reduce(_kept(high), op=torch.distributed.ReduceOp.MAX)
    differ = [
        f"{name} (from {_number(lo)} to {_number(hi)})"
        for name, lo, hi in zip(values, low.tolist(), high.tolist(), strict=True)
        if lo != hi
    ]
    if differ:
        raise RanksDisagree(
            f"the {share.world} processes of this launch disagree on {', '.join(differ)}: "
            "every rank must fit the same data with the same parameters (and resume from the "
            "same checkpoint_dir, on a folder every rank sees)."
        )


def _number(value: float) -> str:
    """``value`` in a message: an integer as one (a digest's 15 digits), else ``:g``."""
    return str(int(value)) if value.is_integer() else f"{value:g}"


def run_values(seed: int, batches, total_steps: int, settings: dict, data_key) -> dict:
    """What the ranks of a launch compare (:func:`check_agree`) before a fit trains, as numbers
    that float64 holds exactly (a digest as its first 48 bits).

    Parameters
    ----------
    seed : int
    batches : sequence
        The first epoch's global batches; index arrays are digested (their order and rows
        follow the texts' order and lengths), other batches counted only.
    total_steps : int
        The fit's optimiser steps.
    settings : dict
        The training settings that change the result, as JSON values.
    data_key : str or None
        The caller's hash of its training data and task (texts, targets, parameters).

    Returns
    -------
    dict
        ``{what, in words: number}``.
    """
    values = {
        "the seed": seed,
        "the number of batches": len(batches),
        "the total optimiser steps": total_steps,
        "the training settings": _digest(json.dumps(settings, sort_keys=True, default=str)),
    }
    if isinstance(batches, list) and all(isinstance(b, np.ndarray) for b in batches):
        rows = hashlib.blake2b(digest_size=6)
        for batch in batches:
            rows.update(np.int64(len(batch)).tobytes() + batch.astype(np.int64).tobytes())
        values["the rows of the batches"] = int(rows.hexdigest(), 16)
    if data_key is not None:
        what = "the training data (a digest of its texts, targets and parameters)"
        values[what] = _digest(data_key)
    return values


def _digest(text: str) -> int:
    """The first 48 bits of ``text``'s hash: an integer that float64 holds exactly."""
    return int(hashlib.blake2b(text.encode(), digest_size=6).hexdigest(), 16)


def sum_over_ranks(values) -> list:
    """Each number of ``values`` summed over the ranks (as they are, outside a launch)."""
    share = current_share()
    if not share.distributed:
        return [float(v) for v in values]
    numbers = torch.tensor([float(v) for v in values], dtype=torch.float64)
    numbers = numbers.to(_collective_device())
    torch.distributed.all_reduce(_kept(numbers))
    return numbers.tolist()


def barrier() -> None:
    """Wait for every rank (after rank 0 wrote what the others may read); nothing outside a
    launch."""
    if current_share().distributed:
        torch.distributed.barrier()


class _LossOfShare(nn.Module):
    """The module that DDP wraps: the network and its loss, so that the loss function's calls
    into the network run inside DDP's forward (which prepares the gradient reduction)."""

    def __init__(self, network, loss_fn):
        super().__init__()
        self.network = network
        self.loss_fn = loss_fn

    def forward(self, part):
        if len(part) > 0:
            loss, weight = _loss_and_weight(self.loss_fn(self.network, part), part)
            if weight > 0:
                return loss, weight
        # nothing to learn from here (an empty share, a share with no masked token): a zero
        # that touches every trainable weight, so the reduction has this rank's zeros
        trainable = [p for p in self.network.parameters() if p.requires_grad]
        return torch.stack([p.sum() for p in trainable]).sum() * 0.0, 0.0


def _loss_and_weight(out, part):
    """``(loss, weight)``: a loss function returns its mean loss, or the mean and the weight
    it is a mean over (masked tokens, class weights); the default weight is the rows."""
    if isinstance(out, tuple):
        loss, weight = out
        return loss, float(weight)
    return out, float(len(part))


class StepLoss:
    """A training step's loss: what to backpropagate, and the global batch's mean loss.

    Outside a launch, ``loss_fn(network, batch)`` as it is. In a launch, each rank computes
    the mean loss of its share under DDP and the ranks sum ``(weight, weight * loss)``; the
    rank backpropagates ``loss * weight * world / total weight``, so that DDP's averaged
    gradient is the gradient of the global batch's mean loss, whatever the shares' sizes.

    Parameters
    ----------
    network : torch.nn.Module
        On its training device already.
    loss_fn : callable ``(network, batch) -> loss or (loss, weight)``
    share : Share
    device : torch.device
    """

    def __init__(self, network, loss_fn, share: Share, device: torch.device):
        self.network, self.loss_fn, self.share = network, loss_fn, share
        self.ddp = None
        if share.distributed:
            from torch.nn.parallel import DistributedDataParallel

            # no buffer changes in training (no batch statistics): none to sync at each step
            # (torch >= 2.13 names the setting forward_sync_buffers, and warns on the old one)
            parameters = inspect.signature(DistributedDataParallel).parameters
            no_sync = "broadcast_buffers"
            if "forward_sync_buffers" in parameters:
                no_sync = "forward_sync_buffers"
            self.ddp = DistributedDataParallel(
                _LossOfShare(network, loss_fn),
                device_ids=[device.index] if device.type == "cuda" else None,
                find_unused_parameters=True,  # e.g. a pooler that the readout skips
                **{no_sync: False},
            )

    def __call__(self, batch):
        """``(objective, loss)``: backpropagate ``objective``; ``loss`` (a detached scalar
        tensor) is the global batch's mean loss, the same on every rank."""
        if self.ddp is None:
            loss, _ = _loss_and_weight(self.loss_fn(self.network, batch), batch)
            return loss, loss.detach()
        loss, weight = self.ddp(self.share.of(batch))
        own = loss.detach().to(torch.float64) * weight
        totals = torch.stack([own.new_tensor(weight), own])
        torch.distributed.all_reduce(_kept(totals))
        # no branch on the total (the host would wait for the reduction at every step): a
        # global batch of rows weighted 0 only (class weights of 0) scales to 0, its loss 0
        total = totals[0].clamp_min(torch.finfo(totals.dtype).tiny)
        objective = loss * (weight * self.share.world / total).to(loss.dtype)
        return objective, totals[1] / total

    def close(self) -> None:
        """Drop the DDP wrapper (and its gradient hooks on the network's parameters)."""
        self.ddp = None

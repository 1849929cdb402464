"""Data-parallel training across the processes of a ``torchrun`` launch (torch.distributed).

A script started with ``torchrun --nproc_per_node=N script.py`` runs N copies of itself, each
told its rank by environment variables. When such a copy fits an skbert estimator, the training
loop (:mod:`skbert._training.loop`, the only user of this module) joins the launch's process group
(gloo for CPU tensors, NCCL for CUDA ones) and trains one model with
:class:`~torch.nn.parallel.DistributedDataParallel`: every process draws the same global
batches, computes the loss of its contiguous :class:`Share` of each, and DDP averages the
gradients, weighted so that the step is the one a single process takes on the whole batch.
Outside a launch (or in a joblib or Dask worker that a rank started, whose environment it
inherited) nothing of this runs: :data:`SINGLE` is the share of the whole data.

No scikit-learn here: only torch, numpy and the standard library.
"""

from __future__ import annotations

import atexit
import collections
import inspect
import multiprocessing
import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

if torch.distributed.is_available():
    # torch.distributed.nn binds the default process group as the default argument of its
    # functions when it is first imported, and transformers imports it when it loads a model.
    # Imported after the group exists, it holds the group past destroy_process_group(): the
    # group's gloo threads then run into the interpreter's shutdown, where they can abort the
    # process (SIGABRT, "terminate called without an active exception"). Imported before any
    # group exists (here, 2 ms), it binds None.
    import torch.distributed.nn  # noqa: F401

__all__ = [
    "SINGLE",
    "Share",
    "StepLoss",
    "barrier",
    "check_agree",
    "current_share",
    "join",
    "launch",
    "local_device",
    "shared_seed",
    "sum_over_ranks",
]

#: What ``torchrun`` (and ``torch.distributed.launch``, ``accelerate launch``) set in each rank.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

#: ``SKBERT_DISTRIBUTED=0`` keeps a launched process single (each rank trains its own model).
_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Share:
    """One process's part of the work: rank ``rank`` of ``world`` processes."""

    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def writer(self) -> bool:
        """Whether this process writes files and prints (rank 0)."""
        return self.rank == 0

    def rows(self, n: int) -> np.ndarray:
        """Positions, among ``n`` rows, of this process's contiguous share (sizes differ by at
        most one; a share is empty when ``n < world``)."""
        return np.array_split(np.arange(n), self.world)[self.rank]

    def of(self, batch):
        """This process's part of a global ``batch``: an index array's contiguous share, or
        what ``batch.share(self)`` gives for a batch that knows how to split itself."""
        if not self.distributed:
            return batch
        split = getattr(batch, "share", None)
        if split is not None:
            return split(self)
        batch = np.asarray(batch)
        return batch[self.rows(len(batch))]


SINGLE = Share()


@dataclass(frozen=True)
class Launch:
    """This process's place in a launch, from the launcher's environment variables."""

    rank: int
    world: int
    local_rank: int


def _switched_off() -> bool:
    return os.environ.get("SKBERT_DISTRIBUTED", "").strip().lower() in _OFF


def launch() -> Launch | None:
    """This process's launch, or None when it is not a rank of a launch of 2 or more.

    A process that a rank started through :mod:`multiprocessing` (joblib's loky workers, Dask's
    worker processes) inherits the variables but is no rank: it counts as single.
    ``SKBERT_DISTRIBUTED=0`` makes every process single.
    """
    if _switched_off():
        return None
    if any(name not in os.environ for name in LAUNCH_VARIABLES):
        return None
    if multiprocessing.parent_process() is not None:
        return None
    world = int(os.environ["WORLD_SIZE"])
    if world < 2:
        return None
    return Launch(int(os.environ["RANK"]), world, int(os.environ["LOCAL_RANK"]))


def _group_ready() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


def current_share() -> Share:
    """The share of this process, without joining anything: from the process group when one
    is initialised (by skbert or by the user), else from the launch's variables."""
    if _switched_off():
        return SINGLE
    if not torch.distributed.is_available():  # a build without it: every process trains alone
        return SINGLE
    if _group_ready():
        return Share(torch.distributed.get_rank(), torch.distributed.get_world_size())
    where = launch()
    return SINGLE if where is None else Share(where.rank, where.world)


_JOINED = []  # the process group skbert initialised, to destroy at exit
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
    for CUDA tensors where CUDA is available. It is destroyed when the process exits.

    Raises
    ------
    ValueError
        If ``device`` is the CPU and the group has no backend for CPU tensors (NCCL only).
    """
    if _switched_off():
        return SINGLE
    dist = torch.distributed
    if not dist.is_available():
        return SINGLE
    if not dist.is_initialized():
        where = launch()
        if where is None:
            return SINGLE
        backend = "gloo"
        if torch.cuda.is_available():
            torch.cuda.set_device(where.local_rank)
            backend = "cpu:gloo,cuda:nccl"
        dist.init_process_group(backend=backend)
        _JOINED.append(True)
        atexit.register(_leave)
    share = Share(dist.get_rank(), dist.get_world_size())
    if share.distributed and device is not None:
        _check_backend(device)
    return share


def _leave() -> None:
    if _JOINED and _group_ready():
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


def local_device(device: torch.device) -> torch.device:
    """``device`` with this rank's GPU for a bare ``cuda`` in a launch (``cuda:LOCAL_RANK``)."""
    if device.type != "cuda" or device.index is not None:
        return device
    where = launch()
    if where is not None:
        return torch.device("cuda", where.local_rank % max(torch.cuda.device_count(), 1))
    if _group_ready():
        return torch.device("cuda", torch.cuda.current_device())
    return device


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


def check_agree(values: dict) -> None:
    """Raise unless every rank has the same ``{name: number}`` (before a collective that would
    otherwise wait for ever, or train on different data)."""
    share = current_share()
    if not share.distributed:
        return
    numbers = torch.tensor([float(v) for v in values.values()], dtype=torch.float64)
    numbers = numbers.to(_collective_device())
    low, high = numbers.clone(), numbers.clone()
    torch.distributed.all_reduce(_kept(low), op=torch.distributed.ReduceOp.MIN)
    torch.distributed.all_reduce(_kept(high), op=torch.distributed.ReduceOp.MAX)
    differ = [
        f"{name} (from {lo:g} to {hi:g})"
        for name, lo, hi in zip(values, low.tolist(), high.tolist(), strict=True)
        if lo != hi
    ]
    if differ:
        raise RuntimeError(
            f"the {share.world} processes of this launch disagree on {', '.join(differ)}: "
            "every rank must fit the same data with the same parameters (and resume from the "
            "same checkpoint_dir, on a folder every rank sees)."
        )


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
        objective = loss * (weight * self.share.world / totals[0]).to(loss.dtype)
        return objective, totals[1] / totals[0]

    def close(self) -> None:
        """Drop the DDP wrapper (and its gradient hooks on the network's parameters)."""
        self.ddp = None

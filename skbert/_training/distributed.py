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
import inspect

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
    "StepLoss",
    "barrier",
    "check_agree",
    "join",
    "shared_seed",
    "sum_over_ranks",
]

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
    if switched_off():
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
            # as local_device picks it: more ranks than GPUs (a CPU fit) share them
            torch.cuda.set_device(where.local_rank % torch.cuda.device_count())
            backend = "cpu:gloo,cuda:nccl"
        dist.init_process_group(backend=backend)
        _JOINED.append(True)
        atexit.register(_leave)
    share = Share(dist.get_rank(), dist.get_world_size())
    if share.distributed and device is not None:
        _check_backend(device)
    return share


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
        # no branch on the total (the host would wait for the reduction at every step): a
        # global batch of rows weighted 0 only (class weights of 0) scales to 0, its loss 0
        total = totals[0].clamp_min(torch.finfo(totals.dtype).tiny)
        objective = loss * (weight * self.share.world / total).to(loss.dtype)
        return objective, totals[1] / total

    def close(self) -> None:
        """Drop the DDP wrapper (and its gradient hooks on the network's parameters)."""
        self.ddp = None

"""This process's place in a ``torchrun`` launch, read from the launcher's environment.

A script started with ``torchrun --nproc_per_node=N script.py`` runs N copies of itself, each
told its rank by environment variables (:data:`LAUNCH_VARIABLES`). This module only reads them
(and the process group, once one is initialised): :func:`launch` gives this process's
:class:`Launch`, :func:`current_share` its :class:`Share` of the work, and
:func:`local_device` its own GPU. It joins nothing: the training loop's
:mod:`skbert._training.distributed` joins the process group and runs the collectives.

Used by :mod:`skbert._core.devices` (a rank's GPU), :mod:`skbert._core.messages` (rank 0 alone
prints), :mod:`skbert._training.distributed`, :mod:`skbert._training.checkpoint` and
:mod:`skbert.pretraining` (rank 0 alone writes). Outside a launch (or in a joblib or Dask worker
that a rank started, whose environment it inherited) every process is :data:`SINGLE`, the share
of the whole data.
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "LAUNCH_VARIABLES",
    "SINGLE",
    "Launch",
    "Share",
    "current_share",
    "group_ready",
    "launch",
    "local_device",
    "switched_off",
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


def switched_off() -> bool:
    """Whether ``SKBERT_DISTRIBUTED=0`` (or false, no, off) keeps every process single."""
    return os.environ.get("SKBERT_DISTRIBUTED", "").strip().lower() in _OFF


def launch() -> Launch | None:
    """This process's launch, or None when it is not a rank of a launch of 2 or more.

    A process that a rank started through :mod:`multiprocessing` (joblib's loky workers, Dask's
    worker processes) inherits the variables but is no rank: it counts as single.
    ``SKBERT_DISTRIBUTED=0`` makes every process single.
    """
    if switched_off():
        return None
    if any(name not in os.environ for name in LAUNCH_VARIABLES):
        return None
    if multiprocessing.parent_process() is not None:
        return None
    world = int(os.environ["WORLD_SIZE"])
    if world < 2:
        return None
    return Launch(int(os.environ["RANK"]), world, int(os.environ["LOCAL_RANK"]))


def group_ready() -> bool:
    """Whether a process group is initialised (by skbert or by the user)."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


def current_share() -> Share:
    """The share of this process, without joining anything: from the process group when one
    is initialised (by skbert or by the user), else from the launch's variables."""
    if switched_off():
        return SINGLE
    if not torch.distributed.is_available():  # a build without it: every process trains alone
        return SINGLE
    if group_ready():
        return Share(torch.distributed.get_rank(), torch.distributed.get_world_size())
    where = launch()
    return SINGLE if where is None else Share(where.rank, where.world)


def local_device(device: torch.device) -> torch.device:
    """``device`` with this rank's GPU for a bare ``cuda`` in a launch (``cuda:LOCAL_RANK``).

    A host that shows each rank one GPU of its own (``CUDA_VISIBLE_DEVICES`` set to one
    device per rank, as SLURM's ``--gpus-per-task=1`` does) gives every rank ``cuda:0``.

    Raises
    ------
    RuntimeError
        If ``LOCAL_RANK`` is not below the number of GPUs the rank sees (and not one GPU of
        its own): two ranks of the launch's group would share a GPU, which NCCL refuses.
    """
    if device.type != "cuda" or device.index is not None:
        return device
    where = launch()
    if where is not None:
        count = torch.cuda.device_count()
        if where.local_rank < count or count == 0:  # none: torch says so when it is used
            return torch.device("cuda", where.local_rank if count else 0)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        if count == 1 and len(visible) == 1 and visible[0].strip():
            return torch.device("cuda", 0)  # the launcher gave each rank its own GPU
        raise RuntimeError(
            f"LOCAL_RANK={where.local_rank} but this host shows {count} GPU(s) "
            f"(cuda:0 to cuda:{count - 1}): device='cuda' (or 'auto') would put two ranks "
            "of the launch's process group on one GPU, which NCCL refuses (\"Duplicate GPU "
            f'detected"). Start at most {count} processes per host (torchrun '
            "--nproc_per_node), or fit with device='cpu', where ranks share the cores."
        )
    if group_ready():
        return torch.device("cuda", torch.cuda.current_device())
    return device

"""Seeded blocks that leave the caller's random streams as they were.

``torch.manual_seed`` seeds the CPU's generator and every GPU's, and
``torch.random.fork_rng(devices=[])`` puts back only the CPU's: a fit on CUDA left the user's
GPU stream reseeded, and a seed meant for one block (a masked-LM batch's masks, drawn on the
CPU) also set the GPU's dropout draws of the step. :func:`seeded` seeds the generators named and
puts back what they held; :func:`reseed` seeds them again inside such a block.

torch has one CPU generator per process (and one per GPU), which every thread draws from: two
fits in threads of one process (``GridSearchCV`` under joblib's threading backend, a Dask
worker with two threads) drew each other's dropout masks, and the one that ended first put
back, under the other, the state from before it began, so neither followed its
``random_state``. Every block that seeds, draws from or puts back the generators holds
:func:`rng_lock` (:func:`seeded`, :func:`forked`, the loading of a model, which draws the
weights its checkpoint lacks or builds a network before its weights are read in): such blocks
in threads of one process take turns, and each draws what it would alone. So a model loaded
(``skbert.load``, a ``memory=`` fit's first uncached transform, another fit) while a fit trains
in another thread of the process waits for that training to end. Predictions of a loaded
model draw nothing and do not take it.
"""

from __future__ import annotations

import contextlib

import torch

from .locks import ForkSafeLock

__all__ = [
    "seeded",
    "forked",
    "reseed",
    "rng_lock",
    "device_rng_state",
    "set_device_rng_state",
]

_turns = ForkSafeLock()


def rng_lock():
    """Context: run the block as the only one of the process's threads that uses torch's
    random generators through skbert (a thread may enter it again inside it)."""
    return _turns.held()


def device_rng_state(device: torch.device):
    """The accelerator's RNG state (dropout draws from it there), or None on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    if device.type == "mps":
        return torch.mps.get_rng_state()
    return None


def set_device_rng_state(device: torch.device, rng_state) -> None:
    """Put back a state of :func:`device_rng_state` (nothing for None)."""
    if rng_state is None:
        return
    if device.type == "cuda":
        torch.cuda.set_rng_state(rng_state, device)
    elif device.type == "mps":
        torch.mps.set_rng_state(rng_state)


def reseed(seed: int, device: torch.device | None = None) -> None:
    """Seed the CPU's generator and, for a CUDA or MPS ``device``, that device's one only."""
    seed = int(seed)  # a numpy integer too (torch's generators take Python ints only)
    torch.random.default_generator.manual_seed(seed)
    if device is None:
        return
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)
    elif device.type == "mps":
        torch.mps.manual_seed(seed)


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | None = None):
    """Run the block with the CPU's generator (and a CUDA or MPS ``device``'s) seeded with
    ``seed``; afterwards each of them holds what it held before, whatever the block drew.

    Parameters
    ----------
    seed : int
        The seed.
    device : torch.device or None, default=None
        The accelerator whose generator the block draws from too (dropout on a GPU); None or
        the CPU: only the CPU's generator.
    """
    with rng_lock():
        held_cpu = torch.get_rng_state()
        held_device = None if device is None else device_rng_state(device)
        try:
            reseed(seed, device)
            yield
        finally:
            torch.set_rng_state(held_cpu)
            if held_device is not None:
                set_device_rng_state(device, held_device)


@contextlib.contextmanager
def forked():
    """Run the block with the CPU's generator as it is, and put back afterwards what it held
    (new modules' random weights that are overwritten at once draw from it)."""
    with rng_lock(), torch.random.fork_rng(devices=[]):
        yield

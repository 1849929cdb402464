"""Snapshot and restore of the training loop's state: everything a checkpoint stores.

:func:`snapshot` takes the network's weights, the optimiser, schedule and loss scaler, every RNG
(torch's, the accelerator's, the batch order's numpy one) and where the loop is (epoch, step,
the epoch's loss so far, the history, the best validation score and its weights) as tensors and
plain Python values, so that ``torch.load(..., weights_only=True)`` reads them back;
:func:`restore` puts them back, so that a resumed fit ends as an uninterrupted one. The training
loop (:mod:`skbert._training.loop`) calls both;
:class:`~skbert._training.checkpoint.TrainingCheckpoint` writes and reads the snapshot's file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from .._core.rng import device_rng_state, set_device_rng_state

if TYPE_CHECKING:
    from .loop import _Optimisation, _Plan, _Progress

__all__ = ["snapshot", "restore", "encode_numpy_state", "decode_numpy_state"]


def _cpu_state(state_dict) -> dict:
    return {name: tensor.detach().cpu() for name, tensor in state_dict.items()}


def snapshot(network, opt: _Optimisation, state: _Progress, device) -> dict:
    """Everything needed to continue this fit, as tensors and plain Python values."""
    return {
        "network": _cpu_state(network.state_dict()),
        "optimizer": opt.optimizer.state_dict(),
        "scheduler": opt.scheduler.state_dict(),
        "scaler": opt.scaler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "device_rng": device_rng_state(device),
        "numpy_rng": encode_numpy_state(state.epoch_rng),
        "loop": {
            "epoch": state.epoch,
            "step": state.step,
            "position": state.position,
            "loss_sum": state.loss_sum,
            "loss_count": state.loss_count,
            "best_score": state.best_score,
            "stale": state.stale,
            "finished": state.finished,
        },
        "loss_curve": list(state.history.loss_curve),
        "validation_scores": list(state.history.validation_scores),
        "best_network": None if state.best_state is None else _cpu_state(state.best_state),
    }


def restore(
    stored: dict, network, opt: _Optimisation, state: _Progress, rng, plan: _Plan, device
) -> None:
    """Put a :func:`snapshot` back into the network, the optimiser, the RNGs and ``state``."""
    loop = stored["loop"]
    if loop["step"] > plan.total_steps:
        raise ValueError(
            f"the stored training state is at step {loop['step']}, but this fit has only "
            f"{plan.total_steps} steps: the training data changed without changing data_key."
        )
    network.load_state_dict(stored["network"])
    opt.optimizer.load_state_dict(stored["optimizer"])
    opt.scheduler.load_state_dict(stored["scheduler"])
    opt.scaler.load_state_dict(stored["scaler"])
    torch.set_rng_state(stored["torch_rng"])
    set_device_rng_state(device, stored["device_rng"])
    for key, value in loop.items():
        setattr(state, key, value)
    state.history.loss_curve = list(stored["loss_curve"])
    state.history.validation_scores = list(stored["validation_scores"])
    state.best_state = stored["best_network"]
    state.epoch_rng = decode_numpy_state(stored["numpy_rng"])
    if state.epoch > 0:  # epoch 0's batches were drawn already, from the same start
        rng.set_state(state.epoch_rng)


def encode_numpy_state(state: tuple) -> dict:
    """A ``RandomState.get_state()`` tuple as values ``weights_only`` loading accepts."""
    kind, keys, position, has_gauss, cached_gaussian = state
    return {
        "kind": str(kind),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "position": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def decode_numpy_state(encoded: dict) -> tuple:
    """The inverse of :func:`encode_numpy_state`, for ``RandomState.set_state``."""
    keys = encoded["keys"].numpy().astype(np.uint32)
    return (
        encoded["kind"],
        keys,
        encoded["position"],
        encoded["has_gauss"],
        encoded["cached_gaussian"],
    )

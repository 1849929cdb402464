"""The one training loop that every skbert estimator shares.

AdamW with layer-wise learning-rate decay (:mod:`skbert.optim`), linear warm-up then linear
decay, gradient clipping, optional autocast, length-grouped batches with dynamic padding,
per-epoch validation with early stopping that restores the best weights, and a progress bar
that shows the loss. Everything random runs under a forked torch RNG seeded from
``random_state``, so CPU training is repeatable bit for bit and the caller's RNG is untouched.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ._runtime import autocast, progress, report
from .optim import layerwise_param_groups

__all__ = ["TrainingConfig", "TrainingHistory", "train", "length_grouped_batches"]


@dataclass
class TrainingConfig:
    """Hyperparameters of :func:`train` (see the estimators' docstrings)."""

    max_epochs: int = 4
    max_steps: int | None = None  # if set, overrides max_epochs: stop after this many steps
    batch_size: int = 32
    learning_rate: float = 2e-5
    layer_lr_decay: float = 1.0
    top_learning_rate: float | None = None  # None: learning_rate
    weight_decay: float = 0.01
    warmup_fraction: float = 0.1
    max_grad_norm: float = 1.0
    train_backbone: bool = True
    early_stopping: bool = False
    n_iter_no_change: int = 2
    verbose: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype | None = None


@dataclass
class TrainingHistory:
    """What :func:`train` did: mean training loss and validation score per epoch."""

    loss_curve: list = field(default_factory=list)
    validation_scores: list = field(default_factory=list)

    @property
    def n_iter(self) -> int:
        return len(self.loss_curve)


def length_grouped_batches(lengths, batch_size: int, rng: np.random.RandomState) -> list:
    """Shuffle, then sort within pools of 50 batches by length, so that batches pad little.

    Returns a list of index arrays, in random order.
    """
    lengths = np.asarray(lengths)
    order = rng.permutation(len(lengths))
    pool = batch_size * 50
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def train(
    network,
    loss_fn,
    make_batches,
    config: TrainingConfig,
    *,
    validate=None,
    seed: int = 0,
    desc: str = "Training",
) -> TrainingHistory:
    """Train ``network`` in place.

    Parameters
    ----------
    network : torch.nn.Module
        Has a ``backbone`` attribute (the encoder); everything else counts as head.
    loss_fn : callable ``(network, batch) -> scalar tensor``
    make_batches : callable ``(rng) -> list of batches``
        Called once per epoch with a ``numpy.random.RandomState``; a batch is whatever
        ``loss_fn`` takes.
    config : TrainingConfig
    validate : callable ``(network) -> float`` or None
        Score on held-out data (higher is better), called in eval mode after each epoch.
    seed : int
        Seeds dropout, initialisation done inside ``loss_fn`` and the batch order.
    desc : str
        Label of the progress bar.

    Returns
    -------
    TrainingHistory
    """
    from transformers import get_linear_schedule_with_warmup

    device, dtype = config.device, config.dtype
    network.to(device)
    network.backbone.requires_grad_(config.train_backbone)
    groups = layerwise_param_groups(
        network,
        learning_rate=config.learning_rate,
        layer_lr_decay=config.layer_lr_decay,
        top_learning_rate=config.top_learning_rate,
        weight_decay=config.weight_decay,
        train_backbone=config.train_backbone,
    )
    params = [p for g in groups for p in g["params"]]
    history = TrainingHistory()
    rng = np.random.RandomState(seed)
    epoch_batches = make_batches(rng)
    if not epoch_batches:
        raise ValueError("no training batches: the training data is empty.")
    n_epochs = config.max_epochs
    if config.max_steps is not None:
        n_epochs = math.ceil(config.max_steps / len(epoch_batches))
    total_steps = max(1, config.max_steps or n_epochs * len(epoch_batches))
    step = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(groups, lr=config.learning_rate)
        scheduler = get_linear_schedule_with_warmup(
            optimizer, math.ceil(config.warmup_fraction * total_steps), total_steps
        )
        best_score, best_state, stale = -np.inf, None, 0
        for epoch in range(n_epochs):
            if epoch > 0:
                epoch_batches = make_batches(rng)
            epoch_batches = epoch_batches[: total_steps - step]  # max_steps: a last short epoch
            network.train()
            if not config.train_backbone:
                network.backbone.eval()  # frozen encoder: no dropout inside it
            total, count = 0.0, 0
            bar = progress(
                epoch_batches,
                desc=f"{desc} epoch {epoch + 1}/{n_epochs}",
                unit="batch",
                verbose=config.verbose,
            )
            for batch in bar:
                with autocast(device, dtype):
                    loss = loss_fn(network, batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                step += 1
                total += float(loss.detach())
                count += 1
                if config.verbose:
                    bar.set_postfix(loss=f"{total / count:.4f}")
            history.loss_curve.append(total / max(count, 1))
            if validate is None:
                continue
            network.eval()
            score = float(validate(network))
            history.validation_scores.append(score)
            if config.verbose:
                report(f"{desc} epoch {epoch + 1}: validation score {score:.4f}")
            if score > best_score:
                best_score, stale = score, 0
                best_state = copy.deepcopy(network.state_dict())
            else:
                stale += 1
                if config.early_stopping and stale >= config.n_iter_no_change:
                    break
        if best_state is not None:
            network.load_state_dict(best_state)
    network.backbone.requires_grad_(True)
    network.eval()
    return history

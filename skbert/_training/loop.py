"""The one training loop that every skbert estimator shares.

AdamW with layer-wise learning-rate decay (:mod:`skbert.optim`), linear warm-up then linear
decay (:func:`linear_schedule`), gradient clipping, optional autocast with loss scaling for
float16, length-grouped batches with dynamic padding, per-epoch validation with early stopping
that restores the best weights, and a progress bar that shows the loss. Everything random runs
under a forked torch RNG seeded from ``random_state``, so CPU training is repeatable bit for bit
and the caller's RNG is untouched.

A non-finite loss, gradient norm, weight or validation score stops training with
:class:`~skbert.exceptions.TrainingDivergedError` at the step where it appears, so no model with
NaN weights is ever returned. One step function serves every device: it records each step's loss
and gradient norm in the fault checks (:mod:`skbert._training.fault_checks`), read every N steps
before the update. N = 1 on the CPU and under float16 loss scaling: the host sees each step.
Where torch has fused AdamW for the device (CUDA; the CPU since torch 2.4), that optimizer is
used (:func:`fused_adamw`); on CUDA it skips a bad step on the device,
and N = :data:`~skbert._training.fault_checks.READ_EVERY`, so the host does not wait for the
device in a step. With a :class:`~skbert._training.checkpoint.TrainingCheckpoint` the whole
training state is written at intervals, and a later call continues from it to the same result as
an uninterrupted run.

In a ``torchrun`` launch the loop trains one model across the processes
(:mod:`skbert._training.distributed`): every rank draws the same global batches and computes
its share of each, DistributedDataParallel reduces the gradients to those of the whole batch, the
loss and validation score are summed over the ranks, so that every decision (a divergence, early
stopping) is the same on each, and only rank 0 writes checkpoints or prints.
"""

from __future__ import annotations

import copy
import functools
import math
import re
import warnings
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from .._core.devices import autocast
from .._core.messages import progress, report
from .._core.rng import reseed, seeded
from ..exceptions import TrainingDivergedError
from ..optim import layerwise_param_groups
from .distributed import StepLoss, check_agree, join, run_values, sum_over_ranks
from .fault_checks import READ_EVERY, DeferredChecks, HostChecks
from .rank_failures import NoBatches, agreed_load, leave_after
from .snapshot import restore, snapshot

__all__ = [
    "TrainingConfig",
    "TrainingHistory",
    "train",
    "length_grouped_batches",
    "linear_schedule",
]


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
    backbone_dropout: bool = True  # False: the encoder trains in eval mode (no dropout)
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


def linear_schedule(optimizer, total_steps: int, warmup_fraction: float):
    """Linear warm-up, then linear decay, with a non-zero learning rate at every step.

    With ``w = ceil(warmup_fraction * total_steps)`` warm-up steps, step ``s`` (0-based) runs
    at ``(s + 1) / (w + 1)`` times each group's rate during the warm-up and at
    ``(total_steps - s) / (total_steps - w)`` after it: the peak is step ``w``, the last step
    is the smallest and still above zero, so even a one-step fit trains (unlike
    ``transformers.get_linear_schedule_with_warmup``, whose first step has rate 0).

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Its groups' ``lr`` are the peak rates.
    total_steps : int
        Optimiser steps of the whole fit (>= 1).
    warmup_fraction : float
        Share of ``total_steps`` spent warming up, in [0, 1].

    Returns
    -------
    torch.optim.lr_scheduler.LambdaLR
        Call its ``step()`` after each optimiser step.
    """
    warmup = min(math.ceil(warmup_fraction * total_steps), total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(total_steps - step, 0) / max(total_steps - warmup, 1)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


_SCHEDULER_ORDER_WARNING = re.escape("Detected call of `lr_scheduler.step()` before")


@dataclass
class _Plan:
    """How long the fit is, and how to name a step in a message."""

    n_epochs: int
    total_steps: int
    desc: str

    def where(self, step: int, epoch: int) -> str:
        return f"step {step} of {self.total_steps} (epoch {epoch + 1} of {self.n_epochs})"


@dataclass
class _Optimisation:
    """The trainable parameters and what updates them."""

    params: list
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: object  # a torch GradScaler
    #: steps between two reads of the fault checks: READ_EVERY where fused AdamW skips a bad
    #: step on the device, else 1 (the host checks each step before its update)
    check_every: int = 1


@dataclass
class _Progress:
    """Where the loop is: with the torch objects, everything a checkpoint stores."""

    epoch_rng: tuple  # the numpy RNG state before this epoch's make_batches(rng)
    epoch: int = 0  # the epoch being run, 0-based
    step: int = 0  # optimiser steps done, all epochs together
    position: int = 0  # batches done in this epoch
    loss_sum: float = 0.0  # training loss summed over this epoch's batches so far
    loss_count: int = 0
    best_score: float = -math.inf
    best_state: dict | None = None
    stale: int = 0  # epochs since the best validation score
    finished: bool = False
    history: TrainingHistory = field(default_factory=TrainingHistory)


def train(
    network,
    loss_fn,
    make_batches,
    config: TrainingConfig,
    *,
    validate=None,
    seed: int = 0,
    desc: str = "Training",
    checkpoint=None,
    data_key: str | None = None,
) -> TrainingHistory:
    """Train ``network`` in place.

    Parameters
    ----------
    network : torch.nn.Module
        Has a ``backbone`` attribute (the encoder); everything else counts as head.
    loss_fn : callable ``(network, batch) -> scalar tensor or (scalar tensor, weight)``
        The mean loss of ``batch``; with its weight (what the mean divides by: masked tokens,
        the class weights of the rows) where that is not the number of rows. In a launch,
        ``batch`` is this process's share of the global batch.
    make_batches : callable ``(rng) -> list of batches``
        Called once per epoch with a ``numpy.random.RandomState``; a batch is an array of
        row indices, or an object with ``__len__`` and a ``share(share)`` method that gives
        a process's part of it. It must give the same batches for the same RNG state.
    config : TrainingConfig
    validate : callable ``(network, share) -> (total, count)`` or None
        The sum of a held-out score over the rows of ``share`` (a
        :class:`~skbert._core.launch.Share`: ``share.rows(n)`` picks this process's rows),
        and their number; the score is ``total / count`` summed over the processes (higher is
        better). Called in eval mode after each epoch.
    seed : int
        Seeds dropout, initialisation done inside ``loss_fn`` and the batch order; it must be
        the same on every rank of a launch (dropout draws from ``seed + rank``).
    desc : str
        Label of the progress bar and of error messages.
    checkpoint : skbert._training.checkpoint.TrainingCheckpoint or None
        Write the training state there at intervals; if it holds the state of this same run
        (same data key, settings, seed and initial weights), continue from it.
    data_key : str or None
        The caller's hash of its training data and task (that of ``checkpoint`` by default).
        The ranks of a launch compare it, with the seed, the settings and the batches, before
        they train: each must fit the same data.

    Returns
    -------
    TrainingHistory

    Raises
    ------
    skbert.exceptions.TrainingDivergedError
        When the loss, the gradient norm (except under float16 loss scaling, which skips such
        steps), a weight or a validation score stops being finite.
    ValueError
        If the data give no batch, or ``checkpoint`` holds the state of another run.
    RuntimeError
        In a launch, if the ranks disagree on the data, seed or settings, or this process
        left the launch's process group after an earlier fit failed on one rank.

    Notes
    -----
    Whatever happens inside (an error, ``KeyboardInterrupt``), the network is left in eval
    mode with every backbone parameter trainable again. In a launch, an error that stops the
    fit on this rank alone (not a divergence, or a disagreement that every rank sees) makes
    this process leave skbert's process group, so that the other ranks fail at once rather
    than wait for it (:func:`~skbert._training.distributed.abandon`).
    """
    if data_key is None and checkpoint is not None:
        data_key = checkpoint.data_key
    share = join(config.device)
    try:
        return _train(
            network,
            loss_fn,
            make_batches,
            config,
            share,
            validate=validate,
            seed=seed,
            desc=desc,
            checkpoint=checkpoint,
            data_key=data_key,
        )
    except BaseException as error:
        if share.distributed:
            leave_after(error)  # unless every rank raises it: then they stay in step
        raise
    finally:
        network.backbone.requires_grad_(True)
        network.eval()


def _train(
    network, loss_fn, make_batches, config, share, *, validate, seed, desc, checkpoint, data_key
):
    if not share.writer:  # rank 0 alone prints and writes checkpoints
        config = replace(config, verbose=0)
    identity = None
    if checkpoint is not None:  # of the weights as given, before any training
        identity = checkpoint.identity(network, _result_settings(config), seed)
    network.to(config.device)
    network.backbone.requires_grad_(config.train_backbone)
    rng = np.random.RandomState(seed)
    state = _Progress(epoch_rng=rng.get_state())
    batches = make_batches(rng)
    plan = _plan(config, max(len(batches), 1), desc)
    if share.distributed:
        settings = _result_settings(config)
        check_agree(run_values(seed, batches, plan.total_steps, settings, data_key))
    if not batches:
        raise NoBatches("no training batches: the training data is empty.")
    with seeded(seed + share.rank, config.device):  # the ranks' dropout draws differ
        opt = _optimisation(network, config, plan.total_steps)
        stored = agreed_load(checkpoint, identity, share)
        if stored is not None:
            restore(stored, network, opt, state, rng, plan, config.device)
            if config.verbose:
                done = " (finished: nothing left to train)" if state.finished else ""
                report(f"{desc}: resumed from step {state.step} of {plan.total_steps}{done}.")
            if share.distributed:  # the checkpoint holds rank 0's RNG: each rank its own
                reseed(_rank_seed(seed, share.rank, state.step), config.device)
        check_agree({"the step to resume from": state.step})
        step_loss = StepLoss(network, loss_fn, share, config.device)
        if not share.writer:
            checkpoint = None  # read above; written by rank 0 only
        try:
            while not state.finished and state.epoch < plan.n_epochs:
                if state.epoch > 0:
                    state.epoch_rng = rng.get_state()
                    batches = make_batches(rng)
                _run_epoch(
                    network, step_loss, batches, opt, config, plan, state, checkpoint, identity
                )
                _end_epoch(network, validate, share, opt, config, plan, state)
                state.epoch_rng = rng.get_state()  # the next epoch's make_batches starts here
                if checkpoint is not None:
                    checkpoint.save(snapshot(network, opt, state, config.device), identity)
        finally:
            step_loss.close()
    return state.history


def _rank_seed(seed: int, rank: int, step: int) -> int:
    """The dropout seed of ``rank`` in a launch that resumes at ``step`` (repeatable, and
    different for each rank: a resumed launch draws other masks than an uninterrupted one)."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def _plan(config: TrainingConfig, n_batches: int, desc: str) -> _Plan:
    """Epochs and optimiser steps of the fit, from ``max_steps`` or ``max_epochs``."""
    n_epochs = config.max_epochs
    if config.max_steps is not None:
        n_epochs = math.ceil(config.max_steps / n_batches)
    total_steps = max(1, config.max_steps or n_epochs * n_batches)
    return _Plan(n_epochs=n_epochs, total_steps=total_steps, desc=desc)


def _optimisation(network, config: TrainingConfig, total_steps: int) -> _Optimisation:
    """AdamW over layer-wise groups, its schedule, and a loss scaler (active for float16)."""
    groups = layerwise_param_groups(
        network,
        learning_rate=config.learning_rate,
        layer_lr_decay=config.layer_lr_decay,
        top_learning_rate=config.top_learning_rate,
        weight_decay=config.weight_decay,
        train_backbone=config.train_backbone,
    )
    fused = fused_adamw(config.device)
    optimizer = torch.optim.AdamW(
        groups, lr=config.learning_rate, **({"fused": True} if fused else {})
    )
    scaler = loss_scaler(config.device, config.dtype)
    deferred = fused and config.device.type in DEFERRED_CHECK_DEVICES
    return _Optimisation(
        params=[p for g in groups for p in g["params"]],
        optimizer=optimizer,
        scheduler=linear_schedule(optimizer, total_steps, config.warmup_fraction),
        scaler=scaler,
        check_every=READ_EVERY if deferred and not scaler.is_enabled() else 1,
    )


#: Device types where the training loop reads its fault checks every READ_EVERY steps (fused
#: AdamW skips a bad step on the device, so the host need not wait for the device at each
#: step). On the CPU the host is the device: it checks each step before its update.
DEFERRED_CHECK_DEVICES = ("cuda",)


def fused_adamw(device: torch.device) -> bool:
    """Whether training on ``device`` uses fused AdamW: one kernel over all the parameters.

    On CUDA always; on the CPU where torch has it (2.4 and later; probed once), where it is
    the step's largest saving: on all-MiniLM-L6-v2's 22.7 million parameters one AdamW step
    took 9.7 ms fused against 67 ms for torch's default CPU implementation (a loop over the
    parameters) and 60 ms for its ``foreach`` one, on a 2-core AMD EPYC (Zen 5), torch 2.13.
    That is a quarter of a 16-sentence training step of that model there.
    """
    if device.type == "cuda":
        return True
    return device.type == "cpu" and _cpu_fused_adamw()


@functools.lru_cache(maxsize=1)
def _cpu_fused_adamw() -> bool:
    """Whether this torch has a fused AdamW for CPU tensors (torch >= 2.4)."""
    weight = torch.zeros(2, requires_grad=True)
    weight.grad = torch.ones(2)
    try:
        torch.optim.AdamW([weight], lr=1e-3, fused=True).step()
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def loss_scaler(device: torch.device, dtype):
    """The loss scaler of float16 training (``torch.amp.GradScaler``), disabled otherwise.

    torch 2.2 has only the CUDA scaler (``torch.cuda.amp.GradScaler``): there, float16
    training on another device runs without loss scaling, like bfloat16 (a step whose
    gradients overflow then raises :class:`~skbert.exceptions.TrainingDivergedError`).
    """
    enabled = dtype is torch.float16
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        return torch.amp.GradScaler(device.type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled and device.type == "cuda")


def _run_epoch(network, step_loss, batches, opt, config, plan, state, checkpoint, identity):
    """Train on this epoch's batches from ``state.position`` on; checkpoint when due."""
    batches = batches[: plan.total_steps - (state.step - state.position)]  # a short last epoch
    network.train()
    if not (config.train_backbone and config.backbone_dropout):
        network.backbone.eval()  # frozen, or trained without its dropout
    bar = progress(
        batches[state.position :],
        desc=f"{plan.desc} epoch {state.epoch + 1}/{plan.n_epochs}",
        unit="batch",
        verbose=config.verbose,
    )
    checks = _fault_checks(opt, config, state.step)

    def read() -> None:
        _read_checks(checks, config, plan, state)

    for batch in bar:
        _step(step_loss, batch, opt, config, checks, read)
        state.step += 1
        state.position += 1
        due = checkpoint is not None and checkpoint.due(state.step)
        if due and checks.pending:
            read()
        if config.verbose and state.loss_count:
            bar.set_postfix(loss=f"{state.loss_sum / state.loss_count:.4f}", refresh=False)
        # the epoch's end writes its own checkpoint, after validation
        if due and state.position < len(batches):
            _check_weights(network, opt.params, config, plan, state)
            checkpoint.save(snapshot(network, opt, state, config.device), identity)
    if checks.pending:
        read()


def _fault_checks(opt: _Optimisation, config, step: int):
    """The checks of this epoch's steps, read every ``opt.check_every`` steps: on the device
    where the optimiser skips a bad step there, else by the host at each step."""
    if opt.check_every > 1:
        return DeferredChecks(config.device, step, opt.check_every)
    return HostChecks(step, check_norm=not opt.scaler.is_enabled())


def _step(step_loss, batch, opt: _Optimisation, config, checks, read) -> None:
    """One optimiser step, whatever the checks' N (``checks.every``).

    The step's loss and gradient norm are recorded in ``checks``; once N steps are pending,
    ``read()`` reads them and raises at the first non-finite one, before this step's update.
    For N = 1 the host so sees each step before it is applied; for N > 1 fused AdamW skips on
    the device every update from a bad step on (``found_inf``), so the weights are those before
    it either way. Under float16 loss scaling (N = 1), the scaler skips a step whose gradients
    are inf or NaN instead of failing.
    """
    with autocast(config.device, config.dtype):
        objective, loss = step_loss(batch)
    opt.optimizer.zero_grad(set_to_none=True)
    opt.scaler.scale(objective).backward()
    opt.scaler.unscale_(opt.optimizer)  # clip the true gradients, not the scaled ones
    norm = torch.nn.utils.clip_grad_norm_(opt.params, config.max_grad_norm)
    skip = checks.record(loss, norm)  # None, or the flag the device skips the update on
    if checks.pending >= checks.every:
        read()
    if skip is not None:
        opt.optimizer.found_inf = skip
    try:
        opt.scaler.step(opt.optimizer)  # under loss scaling, skipped when a gradient is inf/NaN
    finally:
        if skip is not None:
            del opt.optimizer.found_inf
    if opt.optimizer.defaults.get("fused"):
        # fused AdamW writes the weights in place without counting a version, so what keys
        # on versions (the CPU inference plans of packed weights, read by a validation pass
        # during training) would take a changed weight for the one it packed
        for param in opt.params:
            torch.autograd.graph.increment_version(param)
    opt.scaler.update()
    if not opt.scaler.is_enabled():
        opt.scheduler.step()
        return
    with warnings.catch_warnings():
        # a skipped first step is not the misuse this warns about: the schedule counts steps
        warnings.filterwarnings("ignore", _SCHEDULER_ORDER_WARNING, UserWarning)
        opt.scheduler.step()


def _read_checks(checks, config, plan, state: _Progress) -> None:
    """Add the recorded steps' loss to the epoch's; raise at the first non-finite step."""
    loss_sum, n_steps, failure = checks.read()
    if failure is not None:
        step, what = failure
        raise _diverged(plan.desc, plan.where(step, state.epoch), what, config)
    state.loss_sum += loss_sum
    state.loss_count += n_steps


def _end_epoch(network, validate, share, opt, config, plan, state: _Progress) -> None:
    """Check the weights, record the epoch's loss and score, decide on early stopping."""
    _check_weights(network, opt.params, config, plan, state)
    history = state.history
    history.loss_curve.append(state.loss_sum / max(state.loss_count, 1))
    stop = state.epoch + 1 >= plan.n_epochs
    if validate is not None:
        network.eval()
        total, count = sum_over_ranks(validate(network, share))
        score = total / count if count else math.nan
        if not math.isfinite(score):
            where = f"the end of epoch {state.epoch + 1} of {plan.n_epochs}"
            raise _diverged(plan.desc, where, f"the validation score is {score}", config)
        history.validation_scores.append(score)
        if config.verbose:
            report(f"{plan.desc} epoch {state.epoch + 1}: validation score {score:.4f}")
        if score > state.best_score:
            state.best_score, state.stale = score, 0
            state.best_state = copy.deepcopy(network.state_dict())
        else:
            state.stale += 1
            stop = stop or (config.early_stopping and state.stale >= config.n_iter_no_change)
    state.epoch += 1
    state.position, state.loss_sum, state.loss_count = 0, 0.0, 0
    if stop:
        state.finished = True
        if state.best_state is not None:
            network.load_state_dict(state.best_state)
            state.best_state = None  # the network holds it now


def _check_weights(network, params, config, plan, state: _Progress) -> None:
    """Raise if a trainable weight is inf or NaN (an overflow shows in the loss only later)."""
    if not params or bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
        return
    names = {id(p): name for name, p in network.named_parameters()}
    bad = next(p for p in params if not bool(torch.isfinite(p).all()))
    where = plan.where(state.step, state.epoch)
    what = f"weight {names.get(id(bad), '?')!r} is not finite after the update"
    raise _diverged(plan.desc, where, what, config)


def _diverged(desc: str, where: str, what: str, config: TrainingConfig) -> TrainingDivergedError:
    """The error for a non-finite value, with what the user can change: the rates of what
    trained (with the encoder frozen, only the weights on top: ``top_learning_rate``, or
    ``learning_rate`` where that is None)."""
    rates = []
    if config.train_backbone or config.top_learning_rate is None:
        rates.append(f"learning_rate (it is {config.learning_rate:g})")
    if config.top_learning_rate is not None:
        rates.append(f"top_learning_rate (it is {config.top_learning_rate:g})")
    advice = "a lower " + " or ".join(rates)
    if config.dtype is not None:
        precision = str(config.dtype).removeprefix("torch.")
        advice += f', or precision="fp32" (this fit trained in {precision})'
    return TrainingDivergedError(
        f"{desc} diverged at {where}: {what}. Training stopped rather than give a model with "
        f"non-finite weights. Try {advice}."
    )


def _result_settings(config: TrainingConfig) -> dict:
    """The settings that change a fit's result, as JSON values (all but ``verbose``)."""
    settings = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "verbose"}
    settings["device"] = config.device.type
    settings["dtype"] = None if config.dtype is None else str(config.dtype)
    return settings

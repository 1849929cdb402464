"""Failures in a torchrun launch: the errors every rank raises together, and leaving the
process group after one that a rank raised alone.

A fit that fails on one rank while the others wait for it in a collective (a checkpoint write
on a full disk, memory running out while encoding) would leave them waiting until the group's
timeout; worse, a ``GridSearchCV`` catching the error would send that rank into its next fit
while the others are still in this one. :func:`leave_after` makes the failing rank leave the
group (:func:`~skbert._training.distributed.abandon`), so that the others fail at once, unless
the error is one that every rank raises at the same point of the fit (a divergence decided
from values summed over the ranks, a disagreement the ranks found together, no data, a
checkpoint every rank refuses): there the ranks are still in step.
"""

from __future__ import annotations

from ..exceptions import TrainingDivergedError
from .distributed import RanksDisagree, abandon, check_agree

__all__ = ["NoBatches", "CheckpointRefused", "EVERY_RANK", "leave_after", "agreed_load"]


class NoBatches(ValueError):
    """No training batch (on every rank: they agree on the number of batches first)."""


class CheckpointRefused(ValueError):
    """A checkpoint of another run, refused by every rank (they agree on it first)."""


#: the errors that every rank of a launch raises at the same point of a fit
EVERY_RANK = (TrainingDivergedError, RanksDisagree, NoBatches, CheckpointRefused)


def leave_after(error: BaseException) -> None:
    """Leave skbert's process group after ``error`` stopped a fit on this rank, unless every
    rank raises it alike (:data:`EVERY_RANK`); nothing outside a launch skbert joined."""
    if not isinstance(error, EVERY_RANK):
        abandon(error)


def agreed_load(checkpoint, identity, share):
    """``checkpoint.load(identity)`` (None without ``checkpoint``), on which the ranks of a
    launch agree: each resumes, each starts anew, or each refuses the folder (one rank
    refusing alone left the others training without it, waiting for it in the first step).

    Raises
    ------
    CheckpointRefused
        If the folder holds the state of another run (the message says how it differs).
    RanksDisagree
        If the ranks do not all resume, or all start anew.
    """
    stored = refusal = None
    if checkpoint is not None:
        try:
            stored = checkpoint.load(identity)
        except ValueError as error:  # the state of another run
            refusal = error
    if share.distributed:
        outcome = 0 if stored is None and refusal is None else (1 if refusal is None else 2)
        check_agree({"the checkpoint (0 none, 1 resumed, 2 refused)": outcome})
    if refusal is not None:
        raise CheckpointRefused(str(refusal)) from refusal
    return stored

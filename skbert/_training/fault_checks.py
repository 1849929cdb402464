"""The training loop's checks of each step: is its loss finite, is its gradient norm finite.

The loop's one step function (:mod:`skbert._training.loop`) records each step's loss and
gradient norm here, before the step's update, and reads the record back every N steps (and
before a checkpoint and at the end of an epoch); a read raises at the first step whose loss or
gradient norm was not finite, naming that step, and no update from that step on is applied.

- N = 1, :class:`HostChecks`: the host reads each step's values before its update. Used on the
  CPU (where the host is the device: reading a value costs it no wait) and under float16 loss
  scaling, whose scaler skips a step with an inf or NaN gradient itself (only the loss is
  checked there).
- N = :data:`READ_EVERY`, :class:`DeferredChecks`: reading a value back to the host
  (``float(loss)``) makes the host wait for the device at every step, so it cannot queue the
  next step's work while the device computes: on a GPU, the device then idles between steps.
  With an optimizer that can skip a step on the device (fused AdamW reads a ``found_inf`` flag,
  as loss scaling uses it), the record stays on the device: whether each step's values are
  finite, and which step first was not; from that step on every update is skipped on the
  device, so the weights stay as they were before it. The same error, and the same weights, as
  reading every step.

Both have the interface the step function reads: ``every`` (N), ``pending`` (steps recorded
since the last read), ``record(loss, norm)`` and ``read()``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["READ_EVERY", "DeferredChecks", "HostChecks"]

#: Steps between two reads of the record on the device (the progress bar's loss is refreshed
#: then).
READ_EVERY = 32


class HostChecks:
    """N = 1: each step's loss and gradient norm, read by the host before its update.

    Parameters
    ----------
    step : int
        Optimiser steps done before the first one recorded here.
    check_norm : bool, default=True
        Whether a non-finite gradient norm is a failure (not under float16 loss scaling, whose
        scaler skips such a step).
    """

    every = 1

    def __init__(self, step: int, *, check_norm: bool = True):
        self.step = step
        self.check_norm = check_norm
        self.pending = 0  # steps recorded since the last read
        self._loss_sum = 0.0
        self._failure = None

    def record(self, loss: torch.Tensor, norm: torch.Tensor) -> None:
        """Record one step (before its update). Returns None: no flag for the optimizer, the
        read before the update raises instead."""
        self.step += 1
        self.pending += 1
        value = float(loss)
        if self._failure is None:
            if not math.isfinite(value):
                self._failure = (self.step, f"the training loss is {value}")
            elif self.check_norm and not math.isfinite(norm := float(norm)):
                self._failure = (self.step, f"the gradient norm is {norm}")
        self._loss_sum += value

    def read(self):
        """``(loss_sum, n_steps, failure)`` of the steps recorded since the last read,
        ``failure`` being None or ``(step, what)`` for the first step whose loss or gradient
        norm was not finite."""
        result = (self._loss_sum, self.pending, self._failure)
        self._loss_sum, self.pending = 0.0, 0
        return result


class DeferredChecks:
    """N = :data:`READ_EVERY`: finiteness of each step's loss and gradient norm, and the summed
    loss, on the device.

    Parameters
    ----------
    device : torch.device
        Where training runs.
    step : int
        Optimiser steps done before the first one recorded here.
    every : int, default=READ_EVERY
        Steps between two reads.
    """

    def __init__(self, device: torch.device, step: int, every: int = READ_EVERY):
        self.every = every
        self.failed = torch.zeros((), device=device)  # 1.0 from the first bad step on
        self._record = torch.zeros(4, device=device)  # step count, then the first bad step's
        self._record[0] = step  # (step, loss, gradient norm)
        self._loss_sum = torch.zeros((), device=device)
        self.pending = 0  # steps recorded since the last read

    def record(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """Record one step (before its update); return the flag the optimizer skips on."""
        loss, norm = loss.detach().float(), torch.as_tensor(norm).to(loss.device).float()
        bad = ~(torch.isfinite(loss) & torch.isfinite(norm))
        step = self._record[0] + 1
        first = bad & (self.failed == 0)
        self._record = torch.where(
            first, torch.stack([step, step, loss, norm]), torch.cat([step[None], self._record[1:]])
        )
        self.failed = torch.maximum(self.failed, bad.float())
        self._loss_sum = self._loss_sum + torch.where(bad, torch.zeros_like(loss), loss)
        self.pending += 1
        return self.failed

    def read(self):
        """Wait for the device once; return ``(loss_sum, n_steps, failure)`` of the steps
        recorded since the last read, ``failure`` being None or ``(step, what)`` for the first
        step whose loss or gradient norm was not finite."""
        failed, _, step, loss, norm, loss_sum = torch.cat(
            [self.failed[None], self._record, self._loss_sum[None]]
        ).tolist()
        n_steps, self.pending = self.pending, 0
        self._loss_sum = torch.zeros_like(self._loss_sum)
        if not failed:
            return loss_sum, n_steps, None
        if not math.isfinite(loss):
            return loss_sum, n_steps, (int(step), f"the training loss is {loss}")
        return loss_sum, n_steps, (int(step), f"the gradient norm is {norm}")

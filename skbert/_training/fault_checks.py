"""The training loop's checks of each step, kept on the device and read back now and then.

Reading a loss or a gradient norm back to the host (``float(loss)``) makes the host wait for
the device at every step, so it cannot queue the next step's work while the device computes:
on a GPU, the device then idles between steps. With an optimizer that can skip a step on the
device (fused AdamW reads a ``found_inf`` flag, as loss scaling uses it), the loop instead
records on the device whether each step's loss and gradient norm are finite, and which step
first was not; from that step on every update is skipped on the device, so the weights stay
as they were before it. The host reads the record every :data:`READ_EVERY` steps (and before
a checkpoint and at the end of an epoch) and raises there, naming the step where it happened:
the same error, and the same weights, as checking every step.
"""

from __future__ import annotations

import math

import torch

__all__ = ["READ_EVERY", "DeferredChecks"]

#: Steps between two reads of the record (the progress bar's loss is refreshed then).
READ_EVERY = 32


class DeferredChecks:
    """Finiteness of each step's loss and gradient norm, and the summed loss, on the device.

    Parameters
    ----------
    device : torch.device
        Where training runs.
    step : int
        Optimiser steps done before the first one recorded here.
    """

    def __init__(self, device: torch.device, step: int):
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

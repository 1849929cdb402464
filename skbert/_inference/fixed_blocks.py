"""Row-wise layers computed on fixed shapes, so that a row's bits never depend on its company.

Prediction applies the layers that see whole texts (the chunk scores of attention chunk
pooling, the output layer) through :func:`in_fixed_blocks`, on every device
(:mod:`skbert._inference.composition`); training calls them directly.
"""

from __future__ import annotations

import torch

from .tuning import FIXED_BLOCK_ROWS

__all__ = ["in_fixed_blocks"]


def in_fixed_blocks(layer, rows: torch.Tensor) -> torch.Tensor:
    """``layer(rows)`` computed in calls of exactly
    :data:`~skbert._inference.tuning.FIXED_BLOCK_ROWS` rows.

    A matrix product may round a row differently depending on how many rows it is given (the
    math library picks its kernel by shape); called on fixed-size blocks, the last one filled
    with repeats of the last row, a row-wise layer gives every row the same bits whatever
    other rows come with it. Used in prediction, for the layers applied to whole texts.
    """
    n = rows.shape[0]
    if n == 0:
        return layer(rows)
    fill = (-n) % FIXED_BLOCK_ROWS
    if fill:
        rows = torch.cat([rows, rows[-1:].expand(fill, *rows.shape[1:])])
    out = torch.cat([layer(block) for block in rows.split(FIXED_BLOCK_ROWS)])
    return out[:n]

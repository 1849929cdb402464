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
    other rows come with it. The math library also rounds a row by its address (its vector
    loads take an aligned and an unaligned path): each row of a block is laid at the start
    of a 64-byte line (:func:`_row_aligned`), which rows of 10, 15 or 33 float32 values (a
    CNN pooling of few channels) are not by themselves. Used in prediction, for the layers
    applied to whole texts.
    """
    n = rows.shape[0]
    if n == 0:
        return layer(rows)
    fill = (-n) % FIXED_BLOCK_ROWS
    if fill:
        rows = torch.cat([rows, rows[-1:].expand(fill, *rows.shape[1:])])
    out = torch.cat([layer(_row_aligned(block)) for block in rows.split(FIXED_BLOCK_ROWS)])
    return out[:n]


def _row_aligned(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` (2-D) as a view whose every row starts on a 64-byte line: itself where the
    rows' length already is a multiple of the line and the block starts on one, else the
    rows copied into a buffer of padded lines."""
    if rows.dim() != 2:
        return rows
    per_line = max(1, 64 // rows.element_size())
    width = rows.shape[1]
    if width % per_line == 0 and rows.is_contiguous() and rows.data_ptr() % 64 == 0:
        return rows
    padded = -(-width // per_line) * per_line
    buffer = rows.new_zeros(rows.shape[0] + 1, padded)  # one line spare to align the start
    skip = (-buffer.data_ptr() % 64) // rows.element_size()
    lines = buffer.view(-1)[skip : skip + rows.shape[0] * padded].view(rows.shape[0], padded)
    lines[:, :width] = rows
    return lines[:, :width]

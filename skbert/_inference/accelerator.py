"""The prediction runner of an accelerator (CUDA, MPS, ...): blocks prepared on the host while
the device computes.

Used by :func:`~skbert._inference.predict.predict_rows` off the CPU; the CPU has its own
runner (:mod:`skbert._inference.cpu.runner`).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from .._text.encoding import stack_rows
from .ordered import in_order

__all__ = ["run_on_accelerator"]


def run_on_accelerator(encode, rows, blocks, bar, device) -> torch.Tensor:
    """Row outputs in row order, kept on ``device``; the host prepares the next blocks (pinned
    memory, asynchronous copies) while the device computes, and nothing waits for the device
    until the outputs are read at the end.

    ``encode(input_ids, attention_mask, token_type_ids)``: the row vectors of one block
    (:func:`~skbert._inference.composition.row_readers`).
    """
    pin = device.type == "cuda"
    order = np.concatenate([positions[:n_real] for positions, n_real in blocks])
    inverse = torch.from_numpy(np.argsort(order)).to(device)
    parts = []

    def prepare(block):
        positions, _ = block
        ids, types = stack_rows([rows[r] for r in positions])
        ids, types = torch.from_numpy(ids), torch.from_numpy(types)
        return (ids.pin_memory(), types.pin_memory()) if pin else (ids, types)

    with contextlib.closing(in_order(prepare, blocks, 1, "skbert-prepare")) as prepared:
        for (_, n_real), (ids, types) in prepared:
            with torch.inference_mode():
                ids = ids.to(device, non_blocking=pin)
                types = types.to(device, non_blocking=pin)
                parts.append(encode(ids, None, types)[:n_real].float())
            bar.update()
    with torch.inference_mode():
        return torch.cat(parts)[inverse]

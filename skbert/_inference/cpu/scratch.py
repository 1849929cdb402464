"""Scratch memory of the CPU prediction threads, kept for the next use of the same shape.

The tiled layers (:mod:`skbert._inference.cpu.tiled_layers`) run the same few steps on every
tile: quantising inputs, int32 sums, attention's work arrays. Fresh memory for each would cost
page faults and allocator work on every tile (the int32 sums of one tile of all-MiniLM-L6-v2
take 1.5 MB); one array per name and shape, per thread, is reused instead. A name used at
several shapes in turn (the sums of a layer's products of different widths) keeps one array
per shape: kept by name only, the int8 ``transform`` of the 2,758 STS-B test sentences
reallocated three sums a layer per tile and ran at 1.39x bf16's speed (median of 7 runs on a
2-core Zen 4 EPYC), against 1.49x with one array per shape.
"""

from __future__ import annotations

import threading

import torch

__all__ = ["scratch"]

_KEPT = threading.local()  # per thread: {(name, shape, dtype): memory}
#: Arrays kept per thread at most (the oldest is dropped first): a layer's steps use a dozen
#: names, a few at several shapes.
MOST = 64


def scratch(name: str, shape, dtype=torch.float32) -> torch.Tensor:
    """Memory of ``shape`` and ``dtype`` for ``name``, this thread's own, the same array as
    the last call with that name, shape and dtype (its contents are whatever that call left)."""
    kept = getattr(_KEPT, "arrays", None)
    if kept is None:
        kept = _KEPT.arrays = {}
    key = (name, tuple(shape), dtype)
    array = kept.get(key)
    if array is None:
        if len(kept) >= MOST:
            del kept[next(iter(kept))]
        array = kept[key] = torch.empty(shape, dtype=dtype)
    return array

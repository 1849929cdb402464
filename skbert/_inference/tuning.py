"""The tuning of prediction: how many tokens and rows its blocks hold, with the measurements
behind each figure.

Every figure is a function of the device and the model only, never of the texts or of
timings, so a text gets the same shapes, and so the same bits, in every call (the contract
stated in :mod:`skbert._inference.predict`). Read by
:func:`~skbert._inference.predict.predict_rows`, the CPU runner
(:mod:`skbert._inference.cpu.runner`) and :func:`~skbert._inference.fixed_blocks.in_fixed_blocks`.
"""

from __future__ import annotations

import types

import torch

from .._core.flops import training_flops

__all__ = [
    "ACCELERATOR_BLOCK_TOKENS",
    "BLOCK_TOKENS",
    "CPU_ROW_BLOCK_SCALE",
    "FIXED_BLOCK_ROWS",
    "GROUP_TILES",
    "REFERENCE_FLOPS_PER_TOKEN",
    "block_tokens",
    "flops_per_token",
]

#: Token positions per forward pass in prediction, by device type, for a model of
#: all-MiniLM-L6-v2's size or larger; on the CPU also the tile of the token-wise layers of
#: :mod:`skbert._inference.cpu.tiled_layers`. The CPU runs one group of blocks per core,
#: single-threaded: 256 positions was the fastest block for all-MiniLM-L6-v2 on a 2-core AMD EPYC
#: (4,400 tokens/s, against 2,500 at 64 and 4,000 at 512); with the tiled layers, tiles of 512 and
#: 1,024 tokens were no faster, and 256 keeps one short text at the cost of one tile.
#: Accelerators get large blocks (not yet measured: no GPU to measure on so far).
BLOCK_TOKENS = {"cpu": 256}
ACCELERATOR_BLOCK_TOKENS = 8192
#: Matrix-product FLOPs per token of all-MiniLM-L6-v2 (6 layers, 384 wide, 1,536 inner). A
#: cheaper model gets proportionally more tokens per block (up to 64 times as many), so that
#: per-block overhead does not dominate.
REFERENCE_FLOPS_PER_TOKEN = 2 * 6 * (4 * 384 * 384 + 2 * 384 * 1536)

#: On the CPU, where the token-wise layers run in tiles of :func:`block_tokens` tokens, a
#: cheap model's blocks of rows (for attention, pooling and the embeddings) get at most this
#: multiple of the reference budget: larger blocks would mostly add repeats (the last block of
#: each length), smaller ones per-block overhead. ``transform`` of the 67,349 SST-2 sentences
#: with the 1-layer 32-wide BERT of ``benchmarks/bench_pipeline.py`` (2 cores) took 2.15 s
#: with blocks as large as the tiles (64), 1.94 s at 32, 1.85-1.88 s at 16, 1.89 s at 8,
#: 1.96 s at 4 and 2.50 s at 1; the fused per-block kernel of before took 1.88-1.97 s.
CPU_ROW_BLOCK_SCALE = 16.0

#: Tiles of the token-wise layers per work item of a CPU worker (see
#: :mod:`skbert._inference.cpu.runner`).
GROUP_TILES = 32

#: rows per call of :func:`~skbert._inference.fixed_blocks.in_fixed_blocks`
FIXED_BLOCK_ROWS = 64


def flops_per_token(config) -> int:
    """Matrix-product FLOPs per token of a BERT-like encoder, from its config (the reference
    model's when the config does not say)."""
    flops = training_flops(types.SimpleNamespace(config=config))
    return REFERENCE_FLOPS_PER_TOKEN if flops is None else flops


def block_tokens(device: torch.device, config=None, most: float = 64.0) -> int:
    """Token positions per prediction block on ``device`` for a model of ``config``: a
    function of these two only, so every text gets the same block shape in every call.
    ``most``: the largest multiple of the reference model's budget a cheaper model gets."""
    base = BLOCK_TOKENS.get(device.type, ACCELERATOR_BLOCK_TOKENS)
    if config is None:
        return base
    scale = REFERENCE_FLOPS_PER_TOKEN / flops_per_token(config)
    return int(base * min(most, max(1.0, scale)))

"""The prediction runner of the CPU: one group of blocks per core at a time, each
single-threaded, through the tiled layers where they apply.

One thread per core, each on its own blocks, is faster than sharing every product among the
cores, and it keeps the bits independent of the number of cores (the contract stated in
:mod:`skbert._inference.predict`). Used by :func:`~skbert._inference.predict.predict_rows`
on the CPU; accelerators have their own runner (:mod:`skbert._inference.accelerator`).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..._core.threads import torch_threads
from ..._text.encoding import stack_rows
from ..composition import encoder_of, row_readers
from ..ordered import in_order
from ..tuning import GROUP_TILES
from .tiled_layers import tiled_forward

__all__ = ["block_groups", "one_thread_per_block", "run_on_cpu"]


@contextlib.contextmanager
def one_thread_per_block(device):
    """On the CPU, torch set to one thread while prediction runs (restored after, also when
    predictions in several threads overlap: :func:`~skbert._core.threads.torch_threads`);
    yields the cores prediction may use (the process's count, or an enclosing call's)."""
    if device.type != "cpu":
        yield torch.get_num_threads()
        return
    with torch_threads(1) as threads:
        yield threads


def run_on_cpu(network, rows, blocks, bar, cores, tile, all_layers, int8=False) -> torch.Tensor:
    """Row outputs in row order, one group of blocks per core at a time, each single-threaded.

    A group's backbone outputs come from
    :func:`~skbert._inference.cpu.tiled_layers.tiled_forward` (the token-wise layers over
    fixed tiles of all its blocks' tokens) where that path applies, else from the backbone
    block by block; either way they are read into rows by the network's encoder
    (:func:`~skbert._inference.composition.row_readers`).

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        In eval mode, on the CPU.
    rows : list of (ids, token_types)
        The distinct rows.
    blocks : list of (positions, n_real)
        Blocks of :func:`~skbert._text.encoding.row_blocks` over ``rows``.
    bar : progress bar
        Advanced by one per block.
    cores : int
        Worker threads at most.
    tile : int
        Tokens per tile of the tiled layers.
    all_layers : bool
        Rows of :meth:`~skbert._nn.network.SentenceEncoder.all_layer_rows` instead.
    int8 : bool, default=False
        The tiled layers' linear layers as int8 products (``precision="int8"``).
    """
    encoder = encoder_of(network)
    encode, read = row_readers(network, all_layers)
    workers = max(1, min(cores, len(blocks)))
    lengths = [len(rows[positions[0]][0]) for positions, _ in blocks]
    groups = block_groups(blocks, lengths, workers, GROUP_TILES * tile)

    def work(group):
        torch.get_num_threads()  # a thread's first call takes the process's count: not later
        torch.set_num_threads(1)  # per thread for OpenMP and MKL; restored by the caller
        stacked = []
        for positions, n_real in group:
            ids, types = stack_rows([rows[r] for r in positions])
            stacked.append((torch.from_numpy(ids), torch.from_numpy(types), n_real))
        with torch.inference_mode():
            states = _tiled_outputs(encoder, stacked, tile, all_layers, int8)
            vectors = [
                (encode(ids, None, types) if states is None else read(states[i]))[:n_real]
                for i, (ids, types, n_real) in enumerate(stacked)
            ]
            return torch.cat(vectors).float()

    out = None
    with contextlib.closing(in_order(work, groups, workers, "skbert-encode")) as results:
        for group, vectors in results:
            if out is None:
                out = torch.empty((len(rows), *vectors.shape[1:]), dtype=torch.float32)
            positions = np.concatenate([positions[:n_real] for positions, n_real in group])
            out[torch.from_numpy(positions)] = vectors
            bar.update(len(group))
    return out


def _tiled_outputs(encoder, blocks, tile: int, all_layers: bool, int8: bool):
    """Backbone outputs of ``blocks`` (``(input_ids, token_type_ids, n_real)``) from the tiled
    layers, with every hidden state where the readout (or ``all_layers``) needs them, or None
    where that path does not apply."""
    every = all_layers or not encoder.reads_last_layer_only
    if not encoder.uses_token_types:
        blocks = [(ids, None, n_real) for ids, _, n_real in blocks]
    return tiled_forward(encoder.backbone, blocks, every, tile, int8)


def block_groups(blocks, lengths, workers: int, group_tokens: int) -> list:
    """``blocks`` in consecutive groups of about equal real tokens, each at most about
    ``group_tokens`` (but whole blocks), as many as a multiple of ``workers`` (so that the
    cores finish together) unless there are fewer blocks. How blocks are grouped changes no
    bits: every operation of the tiled forward sees a fixed shape."""
    real = [n_real for _, n_real in blocks]
    tokens = np.multiply(real, lengths)
    total = int(tokens.sum())
    n_groups = max(1, -(-total // group_tokens))
    n_groups = min(len(blocks), -(-n_groups // workers) * workers)
    if n_groups <= 1:
        return [blocks] if blocks else []
    bounds = np.concatenate([[0], np.cumsum(tokens)])  # token count before each block
    edges = [0]
    for k in range(1, n_groups):  # cut at the block boundary nearest to k / n_groups
        cut = int(np.abs(bounds - total * k / n_groups).argmin())
        edges.append(min(max(cut, edges[-1] + 1), len(blocks) - (n_groups - k)))
    edges.append(len(blocks))
    return [blocks[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]

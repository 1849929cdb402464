"""The one prediction path: encoded texts -> network outputs, in fixed-shape blocks.

``transform``, ``predict``, ``predict_proba`` and the validation scores of early stopping all
run :func:`predict_rows`, so a validation score is what ``score`` gives on the same rows.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import types

import numpy as np
import torch

from .._core.flops import training_flops
from .._core.messages import progress
from .._text.encoding import Encoded, distinct_rows, row_blocks, stack_rows

__all__ = [
    "BLOCK_TOKENS",
    "block_tokens",
    "flops_per_token",
    "low_precision_copy",
    "predict_rows",
]


def low_precision_copy(network: torch.nn.Module, device: torch.device, dtype) -> torch.nn.Module:
    """``network`` for inference on ``device``: itself in float32, else a copy cast to ``dtype``.

    A copy whose weights are in bf16 (or fp16) is faster than autocast, which under
    ``inference_mode`` casts every weight again on every batch; on the CPU the copy also uses
    plain ("eager") attention, faster than the fused kernel in bf16 on short inputs.

    Parameters
    ----------
    network : torch.nn.Module
        A :class:`~skbert._nn.network.SentenceEncoder` or :class:`~skbert._nn.network.TaskNetwork`.
    device : torch.device
        Where to run.
    dtype : torch.dtype or None
        None for float32.

    Returns
    -------
    torch.nn.Module
        In eval mode.
    """
    network = network.to(device).eval()
    if dtype is None:
        return network
    low = copy.deepcopy(network).to(device=device, dtype=dtype).eval()
    if device.type == "cpu" and hasattr(low.backbone, "set_attn_implementation"):
        low.backbone.set_attn_implementation("eager")
    return low


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


#: On the CPU, where the token-wise layers run in tiles of :func:`block_tokens` tokens, a
#: cheap model's blocks of rows (for attention, pooling and the embeddings) get at most this
#: multiple of the reference budget: larger blocks would mostly add repeats (the last block of
#: each length), smaller ones per-block overhead. ``transform`` of the 67,349 SST-2 sentences
#: with the 1-layer 32-wide BERT of ``benchmarks/bench_pipeline.py`` (2 cores) took 2.15 s
#: with blocks as large as the tiles (64), 1.94 s at 32, 1.85-1.88 s at 16, 1.89 s at 8,
#: 1.96 s at 4 and 2.50 s at 1; the fused per-block kernel of before took 1.88-1.97 s.
CPU_ROW_BLOCK_SCALE = 16.0


def predict_rows(
    network,
    encoded: Encoded,
    *,
    device: torch.device,
    all_layers: bool = False,
    verbose: int = 0,
    desc: str = "Encoding",
) -> np.ndarray:
    """The network's output for every text of ``encoded``, float32, in input order.

    Rows (a text, or each chunk of one) are encoded in blocks of one length and a fixed number
    of rows per length (:func:`~skbert._text.encoding.row_blocks`), then the chunks of each text are
    pooled and, for a :class:`~skbert._nn.network.TaskNetwork`, the output layer applied, in
    blocks of fixed size too. Every row is thus computed with the same shapes whatever else is
    encoded with it: ``predict_rows(X)[i]`` equals ``predict_rows([X[i]])[0]`` bit for bit, so
    cached and new vectors mix freely, and a row met several times is computed once. On the
    CPU each core runs its own groups of blocks with one thread (faster than sharing every
    product among the cores, and it keeps the bits independent of the number of cores),
    through :mod:`skbert._inference.cpu.tiled_layers` where it applies; on an accelerator, the
    next blocks are prepared on the host while the device works, and the outputs stay on the device
    until the end.

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        In eval mode, on ``device`` (see :func:`low_precision_copy`).
    encoded : Encoded
        The texts' model rows.
    device : torch.device
        Where ``network`` is.
    all_layers : bool, default=False
        Return :meth:`SentenceEncoder.all_layer_rows` (every weight-free pooling of every
        hidden state, shape ``(n, 3, n_hidden_states, hidden)``) for the feature cache.
    verbose : int, default=0
        Show a progress bar over the blocks.
    desc : str, default="Encoding"
        Label of the progress bar.

    Returns
    -------
    ndarray of float32
        One row per text.
    """
    rows = [row for text_rows in encoded.rows for row in text_rows]
    owner = np.repeat(np.arange(len(encoded)), [len(r) for r in encoded.rows])
    distinct, where = distinct_rows(rows)  # a row met twice is computed once
    if all_layers:
        encode, combine = network.all_layer_rows, network.combine_all_layers
    else:
        encode, combine = network.encode_rows, network.combine
    config = getattr(network.backbone, "config", None)
    budget = block_tokens(device, config)
    rows_budget = budget
    if device.type == "cpu":  # the tiles keep `budget`; blocks of rows get fewer repeats
        rows_budget = block_tokens(device, config, most=CPU_ROW_BLOCK_SCALE)
    blocks = list(row_blocks([len(ids) for ids, _ in distinct], rows_budget))
    chunked = len(rows) > len(encoded)
    bar = progress(None, desc=desc, unit="block", verbose=verbose, total=len(blocks))
    bar = _NoBar() if bar is None else bar
    with _one_thread_per_block(device) as cores, contextlib.closing(bar):
        if device.type == "cpu":
            out = _run_on_cpu(network, encode, distinct, blocks, bar, cores, budget, all_layers)
        else:
            out = _run_on_accelerator(encode, distinct, blocks, bar, device)
        with torch.inference_mode():
            if len(distinct) < len(rows):
                out = out[torch.from_numpy(where).to(out.device)]
            param = next(network.parameters())
            texts = combine(
                out.to(dtype=param.dtype),
                torch.from_numpy(owner).to(device) if chunked else None,
                len(encoded),
            )
            return texts.float().cpu().numpy()


@contextlib.contextmanager
def _one_thread_per_block(device):
    """On the CPU, torch set to one thread while prediction runs (restored after); yields the
    number of threads torch had (the cores prediction may use)."""
    threads = torch.get_num_threads()
    if device.type != "cpu":
        yield threads
        return
    torch.set_num_threads(1)
    try:
        yield threads
    finally:
        torch.set_num_threads(threads)


#: Tiles of the token-wise layers per work item of a CPU worker (see :func:`_block_groups`).
GROUP_TILES = 32


def _run_on_cpu(network, encode, rows, blocks, bar, cores, tile, all_layers) -> torch.Tensor:
    """Row outputs in row order, one group of blocks per core at a time, each single-threaded.

    A group's backbone states come from :meth:`SentenceEncoder.tiled_states` (the token-wise
    layers over fixed tiles of all its blocks' tokens) where that path applies, else from the
    backbone block by block.
    """
    workers = max(1, min(cores, len(blocks)))
    lengths = [len(rows[positions[0]][0]) for positions, _ in blocks]
    groups = _block_groups(blocks, lengths, workers, GROUP_TILES * tile)

    def work(group):
        torch.set_num_threads(1)  # per thread for OpenMP and MKL; restored by the caller
        stacked = []
        for positions, n_real in group:
            ids, types = stack_rows([rows[r] for r in positions])
            stacked.append((torch.from_numpy(ids), torch.from_numpy(types), n_real))
        with torch.inference_mode():
            states = network.tiled_states(stacked, tile, all_layers)
            vectors = [
                encode(ids, None, types, outputs=None if states is None else states[i])[:n_real]
                for i, (ids, types, n_real) in enumerate(stacked)
            ]
            return torch.cat(vectors).float()

    out = None
    with contextlib.closing(_in_order(work, groups, workers, "skbert-encode")) as results:
        for group, vectors in results:
            if out is None:
                out = torch.empty((len(rows), *vectors.shape[1:]), dtype=torch.float32)
            positions = np.concatenate([positions[:n_real] for positions, n_real in group])
            out[torch.from_numpy(positions)] = vectors
            bar.update(len(group))
    return out


def _block_groups(blocks, lengths, workers: int, group_tokens: int) -> list:
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


def _in_order(function, items, workers: int, name: str):
    """Yield ``(item, function(item))`` in order, computed by ``workers`` threads.

    At most twice as many items as there are workers are in flight, so finished results do
    not pile up when the consumer is slower; closed early (wrap it in
    :func:`contextlib.closing`), it cancels the items not yet started and awaits the running
    ones.
    """
    ahead = 2 * workers
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        pending = collections.deque()
        for item in items:
            pending.append((item, pool.submit(function, item)))
            if len(pending) > ahead:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run_on_accelerator(encode, rows, blocks, bar, device) -> torch.Tensor:
    """Row outputs in row order, kept on ``device``; the host prepares the next blocks (pinned
    memory, asynchronous copies) while the device computes, and nothing waits for the device
    until the outputs are read at the end."""
    pin = device.type == "cuda"
    order = np.concatenate([positions[:n_real] for positions, n_real in blocks])
    inverse = torch.from_numpy(np.argsort(order)).to(device)
    parts = []

    def prepare(block):
        positions, _ = block
        ids, types = stack_rows([rows[r] for r in positions])
        ids, types = torch.from_numpy(ids), torch.from_numpy(types)
        return (ids.pin_memory(), types.pin_memory()) if pin else (ids, types)

    with contextlib.closing(_in_order(prepare, blocks, 1, "skbert-prepare")) as prepared:
        for (_, n_real), (ids, types) in prepared:
            with torch.inference_mode():
                ids = ids.to(device, non_blocking=pin)
                types = types.to(device, non_blocking=pin)
                parts.append(encode(ids, None, types)[:n_real].float())
            bar.update()
    with torch.inference_mode():
        return torch.cat(parts)[inverse]


class _NoBar:
    """What ``verbose=0`` shows: nothing."""

    def update(self, n=1):
        pass

    def close(self):
        pass

"""The one prediction path: encoded texts -> network outputs, in fixed-shape blocks.

``transform``, ``predict``, ``predict_proba`` and the validation scores of early stopping all
run :func:`predict_rows`, so a validation score is what ``score`` gives on the same rows.

The bit-invariance contract
---------------------------
``predict_rows(X)[i]`` equals ``predict_rows([X[i]])[0]`` bit for bit: every row (a text, or
one chunk of it) is computed with the same shapes whatever else is encoded with it, so cached
and new vectors mix freely and a row met several times is computed once. What keeps it, each
in its own module of this wing:

- the block sizes are functions of the device and the model only
  (:mod:`skbert._inference.tuning`), and rows are encoded in blocks of one length and a fixed
  number of rows per length (:func:`~skbert._text.encoding.row_blocks`);
- the network's seams are composed so that the layers seeing rows of many texts at once run
  on fixed-size blocks (:mod:`skbert._inference.composition`,
  :mod:`skbert._inference.fixed_blocks`);
- on the CPU, each core runs its own blocks with one thread, through the tiled layers where
  they apply, whose every operation sees a fixed shape (:mod:`skbert._inference.cpu.runner`,
  :mod:`skbert._inference.cpu.tiled_layers`), and the choice of matrix products depends on
  the machine only (:mod:`skbert._inference.cpu.products`).

The torch modules know nothing of this: training runs their plain ``forward``.
"""

from __future__ import annotations

import contextlib
import copy

import numpy as np
import torch

from .._core.messages import progress
from .._text.encoding import Encoded, distinct_rows, row_blocks
from .accelerator import run_on_accelerator
from .composition import combine_texts, row_readers
from .cpu.runner import one_thread_per_block, run_on_cpu
from .tuning import CPU_ROW_BLOCK_SCALE, block_tokens

__all__ = [
    "NoBar",
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


def predict_rows(
    network,
    encoded: Encoded,
    *,
    device: torch.device,
    all_layers: bool = False,
    int8: bool = False,
    verbose: int = 0,
    desc: str = "Encoding",
) -> np.ndarray:
    """The network's output for every text of ``encoded``, float32, in input order.

    Rows (a text, or each chunk of one) are encoded in blocks of one length and a fixed number
    of rows per length (:func:`~skbert._text.encoding.row_blocks`), then the chunks of each
    text are pooled and, for a :class:`~skbert._nn.network.TaskNetwork`, the output layer
    applied, in blocks of fixed size too (:func:`~skbert._inference.composition.combine_texts`),
    so that a row's bits never depend on its company (the contract of this module's
    docstring). On the CPU each core runs its own groups of blocks with one thread
    (:func:`~skbert._inference.cpu.runner.run_on_cpu`); on an accelerator, the next blocks are
    prepared on the host while the device works, and the outputs stay on the device until the
    end (:func:`~skbert._inference.accelerator.run_on_accelerator`).

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        In eval mode, on ``device`` (see :func:`low_precision_copy`).
    encoded : Encoded
        The texts' model rows.
    device : torch.device
        Where ``network`` is.
    all_layers : bool, default=False
        Return :meth:`~skbert._nn.network.SentenceEncoder.all_layer_rows` (every weight-free
        pooling of every hidden state, shape ``(n, 3, n_hidden_states, hidden)``) for the
        feature cache.
    int8 : bool, default=False
        On the CPU, the encoder's linear layers as int8 products (``precision="int8"``: a
        float32 ``network`` whose encoder the tiled layers run, see
        :func:`~skbert._inference.int8.int8_unavailable`); each row's bits still depend on
        that row alone.
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
    config = getattr(network.backbone, "config", None)
    budget = block_tokens(device, config)
    rows_budget = budget
    if device.type == "cpu":  # the tiles keep `budget`; blocks of rows get fewer repeats
        rows_budget = block_tokens(device, config, most=CPU_ROW_BLOCK_SCALE)
    blocks = list(row_blocks([len(ids) for ids, _ in distinct], rows_budget))
    chunked = len(rows) > len(encoded)
    bar = progress(None, desc=desc, unit="block", verbose=verbose, total=len(blocks))
    bar = NoBar() if bar is None else bar
    with one_thread_per_block(device) as cores, contextlib.closing(bar):
        if device.type == "cpu":
            out = run_on_cpu(network, distinct, blocks, bar, cores, budget, all_layers, int8)
        else:
            encode, _ = row_readers(network, all_layers)
            out = run_on_accelerator(encode, distinct, blocks, bar, device)
        with torch.inference_mode():
            if len(distinct) < len(rows):
                out = out[torch.from_numpy(where).to(out.device)]
            param = next(network.parameters())
            texts = combine_texts(
                network,
                out.to(dtype=param.dtype),
                torch.from_numpy(owner).to(device) if chunked else None,
                len(encoded),
                all_layers,
            )
            return texts.float().cpu().numpy()


class NoBar:
    """What ``verbose=0`` shows: nothing."""

    def update(self, n=1):
        pass

    def close(self):
        pass

"""The one prediction path: encoded texts -> network outputs, in padding-free batches.

``transform``, ``predict``, ``predict_proba`` and the validation scores of early stopping all
run :func:`predict_rows`, so a validation score is what ``score`` gives on the same rows.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from ._encoding import Encoded, row_batches, stack_rows
from ._runtime import progress

__all__ = ["low_precision_copy", "predict_rows"]


def low_precision_copy(network: torch.nn.Module, device: torch.device, dtype) -> torch.nn.Module:
    """``network`` for inference on ``device``: itself in float32, else a copy cast to ``dtype``.

    A copy whose weights are in bf16 (or fp16) is faster than autocast, which under
    ``inference_mode`` casts every weight again on every batch; on the CPU the copy also uses
    plain ("eager") attention, faster than the fused kernel in bf16 on short inputs.

    Parameters
    ----------
    network : torch.nn.Module
        A :class:`~skbert._network.SentenceEncoder` or :class:`~skbert._network.TaskNetwork`.
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
    batch_size: int,
    device: torch.device,
    all_layers: bool = False,
    verbose: int = 0,
    desc: str = "Encoding",
) -> np.ndarray:
    """The network's output for every text of ``encoded``, float32, in input order.

    Rows (a text, or each chunk of one) are encoded in batches of equal length with no padding
    (:func:`~skbert._encoding.row_batches`), so a text's output does not depend on the other
    texts encoded with it; then the chunks of each text are pooled (and, for a
    :class:`~skbert._network.TaskNetwork`, the output layer applied).

    Parameters
    ----------
    network : SentenceEncoder or TaskNetwork
        In eval mode, on ``device`` (see :func:`low_precision_copy`).
    encoded : Encoded
        The texts' model rows.
    batch_size : int
        Token budget: up to ``batch_size * TOKENS_PER_TEXT`` token positions per forward pass.
    device : torch.device
        Where ``network`` is.
    all_layers : bool, default=False
        Return :meth:`SentenceEncoder.all_layer_rows` (every weight-free pooling of every
        hidden state, shape ``(n, 3, n_hidden_states, hidden)``) for the feature cache.
    verbose : int, default=0
        Show a progress bar over the batches.
    desc : str, default="Encoding"
        Label of the progress bar.

    Returns
    -------
    ndarray of float32
        One row per text.
    """
    rows = [row for text_rows in encoded.rows for row in text_rows]
    owner = np.repeat(np.arange(len(encoded)), [len(r) for r in encoded.rows])
    if all_layers:
        encode, combine = network.all_layer_rows, network.combine_all_layers
    else:
        encode, combine = network.encode_rows, network.combine
    out = None  # (n_rows, ...) float32, allocated once the row width is known
    batches = list(row_batches([len(ids) for ids, _ in rows], batch_size))
    with torch.inference_mode():
        for batch in progress(batches, desc=desc, unit="batch", verbose=verbose):
            ids, types = stack_rows([rows[r] for r in batch])
            ids = torch.from_numpy(ids).to(device)
            vectors = encode(ids, torch.ones_like(ids), torch.from_numpy(types).to(device))
            if out is None:
                out = np.empty((len(rows), *vectors.shape[1:]), dtype=np.float32)
            out[batch] = vectors.float().cpu().numpy()
        chunked = len(rows) > len(encoded)
        param = next(network.parameters())
        vectors = torch.from_numpy(out).to(device=device, dtype=param.dtype)
        texts = combine(
            vectors,
            torch.from_numpy(owner).to(device) if chunked else None,
            len(encoded),
        )
        return texts.float().cpu().numpy()

"""How prediction composes a network's plain seams so that a row's bits never depend on its
company.

The torch modules (:mod:`skbert._nn.network`, :mod:`skbert.pooling`) are plain PyTorch:
their ``forward`` is what training runs. Prediction runs the same operations, split where the
bits of a row could depend on the other rows computed with it (the contract stated in
:mod:`skbert._inference.predict`):

- rows (a text, or one chunk of it): the backbone's outputs for a padding-free block of one
  length, from the transformers forward
  (:meth:`~skbert._nn.network.SentenceEncoder.backbone_outputs`) or, on the CPU, from the
  tiled layers of :mod:`skbert._inference.cpu.tiled_layers`; then read into row vectors
  (:meth:`~skbert._nn.network.SentenceEncoder.read_rows`), row by row already;
- texts: the row-wise parts that see rows of many texts at once, the chunk scores of
  :class:`~skbert.pooling.AttentionChunkPooling` and the output layer of a
  :class:`~skbert._nn.network.TaskNetwork`, run on blocks of a fixed number of rows
  (:func:`~skbert._inference.fixed_blocks.in_fixed_blocks`); the weighting of the chunks of
  a text, and the mean or max of :class:`~skbert.pooling.ChunkPooling`, combine each text's
  own rows only.

Used by :func:`~skbert._inference.predict.predict_rows` and the CPU runner
(:mod:`skbert._inference.cpu.runner`).
"""

from __future__ import annotations

import torch

from .._nn.network import SentenceEncoder, TaskNetwork
from ..pooling import AttentionChunkPooling
from .fixed_blocks import in_fixed_blocks

__all__ = ["combine_texts", "encoder_of", "pool_chunks", "row_readers"]


def encoder_of(network) -> SentenceEncoder:
    """The :class:`~skbert._nn.network.SentenceEncoder` of ``network`` (itself, or a
    :class:`~skbert._nn.network.TaskNetwork`'s)."""
    return network.encoder if isinstance(network, TaskNetwork) else network


def row_readers(network, all_layers: bool = False):
    """``(encode, read)``: the row vectors of one block, from token ids or from given backbone
    outputs.

    ``encode(input_ids, attention_mask, token_type_ids)`` runs the backbone;
    ``read(outputs, attention_mask=None)`` reads backbone outputs computed elsewhere (the tiled
    layers). ``all_layers``: every weight-free pooling of every hidden state instead
    (:meth:`~skbert._nn.network.SentenceEncoder.all_layer_rows`, for the feature cache).
    """
    encoder = encoder_of(network)
    if all_layers:
        return encoder.all_layer_rows, encoder.read_all_layer_rows
    return encoder.encode_rows, encoder.read_rows


def pool_chunks(chunk_pooling, vectors: torch.Tensor, owner, n_texts: int) -> torch.Tensor:
    """``chunk_pooling(vectors, owner, n_texts)`` with an attention pooling's row-wise scores
    computed in fixed blocks."""
    if isinstance(chunk_pooling, AttentionChunkPooling):
        scores = in_fixed_blocks(chunk_pooling.chunk_scores, vectors)
        return chunk_pooling.weigh(vectors, scores, owner, n_texts)
    return chunk_pooling(vectors, owner, n_texts)


def combine_texts(network, rows, owner=None, n_texts=None, all_layers=False) -> torch.Tensor:
    """``network.combine(rows, owner, n_texts)`` in eval mode, each text's bits its own: the
    chunks of a text pooled (:func:`pool_chunks`), then, for a
    :class:`~skbert._nn.network.TaskNetwork`, dropout (none in eval mode) and the output layer
    in fixed blocks.

    ``all_layers``: rows of :meth:`~skbert._nn.network.SentenceEncoder.all_layer_rows`,
    pooled by :meth:`~skbert._nn.network.SentenceEncoder.combine_all_layers` (a mean or max
    without weights, which combines each text's own rows only).
    """
    encoder = encoder_of(network)
    if all_layers:
        return encoder.combine_all_layers(rows, owner, n_texts)
    texts = rows if owner is None else pool_chunks(encoder.chunk_pooling, rows, owner, n_texts)
    if isinstance(network, TaskNetwork):
        return in_fixed_blocks(network.output_layer, network.dropout(texts))
    return texts

"""Pooling modules: token states -> one vector per input, and chunk vectors -> one per text.

Every module is mask-aware: padding never reaches a mean or a max, and no tensor is written in
place, so the modules are safe under autograd and autocast.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ._core import names as _names

# The names of the poolings: their one home is skbert._core.names (every layer reads them
# there); they are public here, documented for the API reference.
#: The token poolings: the values of the estimators' ``pooling``.
TOKEN_POOLINGS = _names.TOKEN_POOLINGS
#: The chunk poolings: the values of ``chunk_pooling`` (how the windows of a text combine).
CHUNK_POOLINGS = _names.CHUNK_POOLINGS
#: The token poolings without weights, in the order the frozen-feature cache stores them.
FROZEN_POOLINGS = _names.FROZEN_POOLINGS
#: The token poolings with new weights of their own, which need training.
TRAINABLE_POOLINGS = _names.TRAINABLE_POOLINGS
#: The chunk poolings with new weights of their own.
TRAINABLE_CHUNK_POOLINGS = _names.TRAINABLE_CHUNK_POOLINGS
#: The token poolings with weights from the checkpoint (the model's own pooler).
PRETRAINED_POOLINGS = _names.PRETRAINED_POOLINGS

__all__ = [
    *_names.__all__,  # their one home is skbert._core.names
    "CLSPooling",
    "MeanPooling",
    "MaxPooling",
    "CNNPooling",
    "PoolerPooling",
    "pooler_dense",
    "ChunkPooling",
    "AttentionChunkPooling",
    "make_pooling",
    "make_chunk_pooling",
]


class _TokenPooling(nn.Module):
    """The interface of the token poolings: token states and their mask -> one vector each."""

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Pool each input's token states into one vector.

        Parameters
        ----------
        states : torch.Tensor of shape (batch, seq, dim)
            The encoder's token states (the chosen layer, or the mean of several).
        mask : torch.Tensor of shape (batch, seq)
            The attention mask: 1 at the tokens, 0 at the padding.

        Returns
        -------
        torch.Tensor of shape (batch, output_dim)
            One vector per input; ``output_dim`` is ``dim`` but for :class:`CNNPooling`.
        """
        raise NotImplementedError


class _ChunkCombiner(nn.Module):
    """The interface of the chunk poolings: window vectors -> one vector per text."""

    def forward(self, vectors: torch.Tensor, owner: torch.Tensor, n_texts: int) -> torch.Tensor:
        """Combine the vectors of each text's windows into one vector.

        Parameters
        ----------
        vectors : torch.Tensor of shape (n_chunks, dim)
            One vector per window, the windows of all texts together.
        owner : torch.Tensor of shape (n_chunks,)
            The index of each window's text, in ``range(n_texts)``; every text has a window.
        n_texts : int
            How many texts.

        Returns
        -------
        torch.Tensor of shape (n_texts, dim)
            One vector per text.
        """
        raise NotImplementedError


class CLSPooling(_TokenPooling):
    """The state of the first token ([CLS] for BERT, <s> for RoBERTa).

    It has no weights; it is ``pooling="cls"``.
    """

    def __init__(self):
        super().__init__()

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return states[:, 0]


class PoolerPooling(_TokenPooling):
    """The model's own pooler: ``tanh(dense(first token's state))``.

    It reads a text as BERT's next-sentence head and transformers'
    ``*ForSequenceClassification`` heads of BERT and ALBERT do (and sentence-transformers'
    ``CrossEncoder`` through them; MPNet's and RoBERTa's heads have a new dense layer of their
    own over the first token instead); it is ``pooling="pooler"``.

    Parameters
    ----------
    dense : torch.nn.Linear
        The pooler's dense layer, copied (the backbone's own pooler is left unused and
        unchanged); see :func:`pooler_dense`.
    """

    def __init__(self, dense: nn.Linear):
        super().__init__()
        self.dense = copy.deepcopy(dense)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(states[:, 0]))


def pooler_dense(backbone) -> nn.Linear | None:
    """The dense layer of ``backbone``'s pooler (dense + tanh over the first token), or None.

    Parameters
    ----------
    backbone : transformers.PreTrainedModel
        The encoder, as ``AutoModel`` loads it.

    Returns
    -------
    torch.nn.Linear or None
        BERT's, RoBERTa's and MPNet's ``pooler.dense``, and ALBERT's ``pooler`` (a Linear
        followed by ``pooler_activation``); None for models without one (DistilBERT, DeBERTa,
        ELECTRA, ModernBERT). The layer itself, not a copy.
    """
    pooler = getattr(backbone, "pooler", None)
    if isinstance(pooler, nn.Linear) and isinstance(
        getattr(backbone, "pooler_activation", None), nn.Tanh
    ):
        return pooler
    dense = getattr(pooler, "dense", None)
    activation = getattr(pooler, "activation", None)
    if isinstance(dense, nn.Linear) and isinstance(activation, nn.Tanh):
        return dense
    return None


class MeanPooling(_TokenPooling):
    """Mean of the token states over the non-padding positions.

    It has no weights; it is ``pooling="mean"``.
    """

    def __init__(self):
        super().__init__()

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.unsqueeze(-1).to(states.dtype)
        total = (states * weights).sum(dim=1)
        count = weights.sum(dim=1).clamp(min=1.0)
        return total / count


class MaxPooling(_TokenPooling):
    """Element-wise maximum of the token states over the non-padding positions.

    It has no weights; it is ``pooling="max"``.
    """

    def __init__(self):
        super().__init__()

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).bool()
        lowest = torch.finfo(states.dtype).min
        return states.masked_fill(~keep, lowest).amax(dim=1)


class CNNPooling(_TokenPooling):
    """A CNN pooling network over token states (Choi et al.'s CNN-SBERT; Kim 2014).

    1-D convolutions of several widths run over the token states; padding positions are zeroed
    before the convolution and excluded from the max over time, so the output does not depend
    on how much padding a batch has.

    Parameters
    ----------
    input_dim : int
        Width of the token states.
    kernel_sizes : tuple of int
        Convolution widths (in tokens), one convolution each.
    channels : int
        Output channels of each convolution; the output width is
        ``channels * len(kernel_sizes)``.
    """

    def __init__(self, input_dim: int, kernel_sizes=(1, 3, 5), channels: int = 128):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(input_dim, channels, k, padding="same") for k in kernel_sizes
        )
        self.output_dim = channels * len(kernel_sizes)

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(1).bool()  # (batch, 1, seq)
        x = states.transpose(1, 2)  # (batch, dim, seq)
        x = x.masked_fill(~keep, 0.0)
        pooled = []
        for conv in self.convs:
            h = torch.relu(_same_width(conv, x))
            pooled.append(h.masked_fill(~keep, torch.finfo(h.dtype).min).amax(dim=-1))
        return torch.cat(pooled, dim=-1)


def _same_width(conv: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` of a ``padding="same"`` convolution, quietly for an even width too.

    An even width needs one zero more on the right than on the left; torch then pads a copy of
    the input and warns that it does. The same pad and the same convolution are run here, so
    the output is the one ``conv(x)`` gives, bit for bit, without the warning.
    """
    total = conv.dilation[0] * (conv.kernel_size[0] - 1)
    if conv.padding != "same" or conv.padding_mode != "zeros" or total % 2 == 0:
        return conv(x)
    left = total // 2
    padded = F.pad(x, (0, total - 2 * left))
    return F.conv1d(padded, conv.weight, conv.bias, conv.stride, left, conv.dilation, conv.groups)


class ChunkPooling(_ChunkCombiner):
    """Combine the vectors of a text's chunks (Sun et al.'s hierarchical pooling).

    Parameters
    ----------
    mode : {"mean", "max"}
        How the chunk vectors of one text are combined.
    """

    def __init__(self, mode: str = "mean"):
        super().__init__()
        if mode not in ("mean", "max"):
            raise ValueError(f"mode={mode!r} is not allowed; use 'mean' or 'max'.")
        self.mode = mode

    def forward(self, vectors: torch.Tensor, owner: torch.Tensor, n_texts: int) -> torch.Tensor:
        if vectors.shape[0] == n_texts and torch.equal(
            owner, torch.arange(n_texts, device=owner.device)
        ):  # one chunk per text, in order: nothing to combine
            return vectors
        index = owner.unsqueeze(-1).expand_as(vectors)
        empty = vectors.new_zeros((n_texts, vectors.shape[1]))
        if self.mode == "max":
            return empty.scatter_reduce(0, index, vectors, reduce="amax", include_self=False)
        return empty.scatter_reduce(0, index, vectors, reduce="mean", include_self=False)


class AttentionChunkPooling(_ChunkCombiner):
    """Self-attention over the chunk vectors of each text (Sun et al.'s hierarchical variant).

    Each chunk gets a score ``w . tanh(W v)``; the scores are soft-maxed among the chunks of
    the same text and the text vector is the weighted sum of its chunk vectors.

    Parameters
    ----------
    dim : int
        Width of the chunk vectors (``W`` is ``dim`` x ``dim``, ``w`` has ``dim`` weights).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.project = nn.Linear(dim, dim)
        self.score = nn.Linear(dim, 1, bias=False)

    def chunk_scores(self, vectors: torch.Tensor) -> torch.Tensor:
        """The score ``w . tanh(W v)`` of each chunk vector, from that vector alone.

        Parameters
        ----------
        vectors : torch.Tensor of shape (n_chunks, dim)
            The chunk vectors.

        Returns
        -------
        torch.Tensor of shape (n_chunks, 1)
            The scores, before the soft-max.
        """
        return self.score(torch.tanh(self.project(vectors)))

    def weigh(
        self, vectors: torch.Tensor, scores: torch.Tensor, owner: torch.Tensor, n_texts: int
    ) -> torch.Tensor:
        """Text vectors from chunk vectors and their :meth:`chunk_scores`.

        The scores are soft-maxed among the chunks of each text (same ``owner``), in float32,
        and weigh the text's chunk vectors.

        Parameters
        ----------
        vectors : torch.Tensor of shape (n_chunks, dim)
            The chunk vectors.
        scores : torch.Tensor of shape (n_chunks, 1)
            Their :meth:`chunk_scores`.
        owner : torch.Tensor of shape (n_chunks,)
            The index of each chunk's text.
        n_texts : int
            How many texts.

        Returns
        -------
        torch.Tensor of shape (n_texts, dim)
            The weighted sum of each text's chunk vectors.
        """
        scores = scores.squeeze(-1).float()
        top = scores.new_full((n_texts,), float("-inf"))
        top = top.scatter_reduce(0, owner, scores, reduce="amax", include_self=True)
        weights = torch.exp(scores - top[owner])
        totals = weights.new_zeros(n_texts).index_add(0, owner, weights)
        weights = (weights / totals[owner]).to(vectors.dtype)
        out = vectors.new_zeros((n_texts, vectors.shape[1]))
        return out.index_add(0, owner, vectors * weights.unsqueeze(-1))

    def forward(self, vectors: torch.Tensor, owner: torch.Tensor, n_texts: int) -> torch.Tensor:
        return self.weigh(vectors, self.chunk_scores(vectors), owner, n_texts)


def make_pooling(
    name: str,
    input_dim: int | None = None,
    *,
    kernel_sizes=(1, 3, 5),
    channels: int = 128,
    pooler: nn.Linear | None = None,
) -> nn.Module:
    """Build the token pooling module called ``name``.

    Parameters
    ----------
    name : {"cls", "mean", "max", "cnn", "pooler"}
        The pooling.
    input_dim : int or None, default=None
        Width of the token states; needed by ``"cnn"``.
    kernel_sizes : tuple of int, default=(1, 3, 5)
        Convolution widths of ``"cnn"``.
    channels : int, default=128
        Channels per convolution of ``"cnn"``.
    pooler : torch.nn.Linear or None, default=None
        The dense layer of the model's pooler, needed by ``"pooler"`` (:func:`pooler_dense`).

    Returns
    -------
    torch.nn.Module
        ``(states, mask) -> vectors``.
    """
    if name == "cnn":
        if input_dim is None:
            raise ValueError("pooling='cnn' needs input_dim, the width of the token states.")
        return CNNPooling(input_dim, kernel_sizes=tuple(kernel_sizes), channels=channels)
    if name == "pooler":
        if pooler is None:
            raise ValueError(
                "pooling='pooler' reads the model's own pooler (a dense layer and tanh over "
                "the first token: BERT, ALBERT, RoBERTa, MPNet, ...), and this model has none; "
                "use pooling='cls' (the first token's state) or 'mean'."
            )
        return PoolerPooling(pooler)
    modules = {"cls": CLSPooling, "mean": MeanPooling, "max": MaxPooling}
    if name not in modules:
        raise ValueError(f"pooling={name!r} is not allowed; use one of {TOKEN_POOLINGS}.")
    return modules[name]()


def make_chunk_pooling(name: str, dim: int | None = None) -> nn.Module:
    """Build the chunk pooling module called ``name``.

    Parameters
    ----------
    name : {"mean", "max", "attention"}
        The chunk pooling (an estimator's ``chunk_pooling``).
    dim : int or None, default=None
        Width of the chunk vectors; needed by ``"attention"``.

    Returns
    -------
    torch.nn.Module
        ``(vectors, owner, n_texts) -> text vectors``.
    """
    if name == "attention":
        if dim is None:
            raise ValueError("chunk_pooling='attention' needs dim, the width of the vectors.")
        return AttentionChunkPooling(dim)
    if name not in ("mean", "max"):
        raise ValueError(
            f"chunk_pooling={name!r} is not allowed; use 'mean', 'max' or 'attention'."
        )
    return ChunkPooling(name)

"""Pooling modules: token states -> one vector per input, and chunk vectors -> one per text.

Every module is mask-aware: padding never reaches a mean or a max, and no tensor is written in
place, so the modules are safe under autograd and autocast.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "TOKEN_POOLINGS",
    "CHUNK_POOLINGS",
    "CLSPooling",
    "MeanPooling",
    "MaxPooling",
    "ChunkPooling",
    "make_pooling",
    "make_chunk_pooling",
]

TOKEN_POOLINGS = ("cls", "mean", "max", "cnn")
CHUNK_POOLINGS = ("mean", "max", "attention")
#: poolings that have weights of their own and so need training
TRAINABLE_POOLINGS = frozenset({"cnn"})
TRAINABLE_CHUNK_POOLINGS = frozenset({"attention"})


class CLSPooling(nn.Module):
    """The state of the first token ([CLS] for BERT, <s> for RoBERTa)."""

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return states[:, 0]


class MeanPooling(nn.Module):
    """Mean of the token states over the non-padding positions."""

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.unsqueeze(-1).to(states.dtype)
        total = (states * weights).sum(dim=1)
        count = weights.sum(dim=1).clamp(min=1.0)
        return total / count


class MaxPooling(nn.Module):
    """Element-wise maximum of the token states over the non-padding positions."""

    def forward(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).bool()
        lowest = torch.finfo(states.dtype).min
        return states.masked_fill(~keep, lowest).amax(dim=1)


class ChunkPooling(nn.Module):
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
        if vectors.shape[0] == n_texts:  # one chunk per text: nothing to combine
            return vectors
        index = owner.unsqueeze(-1).expand_as(vectors)
        empty = vectors.new_zeros((n_texts, vectors.shape[1]))
        if self.mode == "max":
            return empty.scatter_reduce(0, index, vectors, reduce="amax", include_self=False)
        return empty.scatter_reduce(0, index, vectors, reduce="mean", include_self=False)


def make_pooling(name: str) -> nn.Module:
    """Build the token pooling module called ``name`` ("cls", "mean" or "max")."""
    modules = {"cls": CLSPooling, "mean": MeanPooling, "max": MaxPooling}
    if name not in modules:
        raise ValueError(
            f"pooling={name!r} cannot be built without training; allowed here: {sorted(modules)}."
        )
    return modules[name]()


def make_chunk_pooling(name: str) -> nn.Module:
    """Build the chunk pooling module called ``name`` ("mean" or "max")."""
    return ChunkPooling(name)

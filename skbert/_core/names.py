"""The vocabulary of the read-out: the names of the poolings, and which of them have weights.

Foundation-level so that every layer can name the poolings without importing the torch
modules: :mod:`skbert.pooling` re-exports them as its public constants, the estimators check
their parameters against them, and the feature cache (:mod:`skbert._storage.feature_cache`)
stores the weight-free poolings in the order of :data:`FROZEN_POOLINGS`.
"""

from __future__ import annotations

__all__ = [
    "TOKEN_POOLINGS",
    "CHUNK_POOLINGS",
    "FROZEN_POOLINGS",
    "TRAINABLE_POOLINGS",
    "TRAINABLE_CHUNK_POOLINGS",
    "PRETRAINED_POOLINGS",
]

TOKEN_POOLINGS = ("cls", "mean", "max", "cnn", "pooler")
CHUNK_POOLINGS = ("mean", "max", "attention")
#: token poolings that have new weights of their own, and so need training
TRAINABLE_POOLINGS = frozenset({"cnn"})
TRAINABLE_CHUNK_POOLINGS = frozenset({"attention"})
#: token poolings with weights taken from the checkpoint (the model's own pooler): usable
#: frozen, but not a weight-free pooling that the frozen-feature cache can assemble
PRETRAINED_POOLINGS = frozenset({"pooler"})
#: token poolings without weights, in the order the frozen-feature cache stores them
FROZEN_POOLINGS = tuple(
    p for p in TOKEN_POOLINGS if p not in TRAINABLE_POOLINGS | PRETRAINED_POOLINGS
)

"""Scoring sentence embeddings on semantic textual similarity (STS)."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

__all__ = ["paired_cosine", "cosine_spearman"]


def paired_cosine(u, v) -> np.ndarray:
    """Cosine similarity of each row of ``u`` with the same row of ``v``.

    Parameters
    ----------
    u, v : array-like of shape (n_pairs, dim)

    Returns
    -------
    ndarray of shape (n_pairs,)
    """
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if u.shape != v.shape or u.ndim != 2:
        raise ValueError(f"u and v must be 2-D of the same shape, got {u.shape} and {v.shape}.")
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    return (u * v).sum(axis=1) / np.maximum(norms, np.finfo(np.float64).tiny)


def cosine_spearman(u, v, scores) -> float:
    """Spearman rank correlation between the cosine of each pair and gold ``scores``.

    This is the STS-B measure of Reimers & Gurevych (2019) and Choi et al. (2021); multiply
    by 100 for the figures papers report.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(u),):
        raise ValueError(f"scores has shape {scores.shape}; expected ({len(u)},).")
    return float(spearmanr(paired_cosine(u, v), scores).statistic)

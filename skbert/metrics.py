"""Scoring sentence embeddings on semantic textual similarity (STS)."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

__all__ = ["paired_cosine", "cosine_spearman", "sts_spearman_scorer", "sts_pearson_scorer"]


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


def _similarity(estimator, X):
    if not hasattr(estimator, "similarity"):
        raise TypeError(
            f"{type(estimator).__name__} has no similarity(); STS scorers take a "
            "BertSentenceTransformer (or an estimator with a similarity method)."
        )
    return estimator.similarity(X)


def sts_spearman_scorer(estimator, X, y) -> float:
    """Scorer for ``GridSearchCV(scoring=...)``: Spearman of ``estimator.similarity(X)`` and y.

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skbert import BertSentenceTransformer
    >>> from skbert.metrics import sts_spearman_scorer
    >>> search = GridSearchCV(BertSentenceTransformer(), {"pooling": ["cls", "mean"]},
    ...                       scoring=sts_spearman_scorer)  # doctest: +SKIP
    """
    return float(spearmanr(_similarity(estimator, X), np.asarray(y, dtype=np.float64)).statistic)


def sts_pearson_scorer(estimator, X, y) -> float:
    """Scorer for ``GridSearchCV(scoring=...)``: Pearson of ``estimator.similarity(X)`` and y."""
    from scipy.stats import pearsonr

    return float(pearsonr(_similarity(estimator, X), np.asarray(y, dtype=np.float64)).statistic)

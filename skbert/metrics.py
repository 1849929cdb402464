"""Scoring sentence embeddings on semantic textual similarity (STS)."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

__all__ = ["paired_cosine", "cosine_spearman", "sts_spearman_scorer", "sts_pearson_scorer"]


def paired_cosine(u, v) -> np.ndarray:
    """Compute the cosine similarity of each row of ``u`` with the same row of ``v``.

    Parameters
    ----------
    u : array-like of shape (n_pairs, dim)
        The vectors of the first sentence of each pair.
    v : array-like of shape (n_pairs, dim)
        The vectors of the second sentence of each pair.

    Returns
    -------
    ndarray of shape (n_pairs,)
        The cosine of each pair, in float64; 0 for a pair with a zero vector.
    """
    u = np.asarray(u, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if u.shape != v.shape or u.ndim != 2:
        raise ValueError(f"u and v must be 2-D of the same shape, got {u.shape} and {v.shape}.")
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    return (u * v).sum(axis=1) / np.maximum(norms, np.finfo(np.float64).tiny)


def cosine_spearman(u, v, scores) -> float:
    """Compute the Spearman rank correlation of each pair's cosine with gold ``scores``.

    This is the STS-B measure of Reimers & Gurevych (2019) and Choi et al. (2021); multiply
    by 100 for the figures papers report.

    Parameters
    ----------
    u : array-like of shape (n_pairs, dim)
        The vectors of the first sentence of each pair.
    v : array-like of shape (n_pairs, dim)
        The vectors of the second sentence of each pair.
    scores : array-like of shape (n_pairs,)
        The gold similarity score of each pair (STS-B: 0 to 5).

    Returns
    -------
    float
        The Spearman correlation, between -1 and 1.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (len(u),):
        raise ValueError(f"scores has shape {scores.shape}; expected ({len(u)},).")
    return float(spearmanr(paired_cosine(u, v), scores).statistic)


def _similarity_correlation(correlation, estimator, X, y) -> float:
    """``correlation`` (scipy's ``spearmanr`` or ``pearsonr``) of ``estimator.similarity(X)``
    with the gold scores ``y``, as a float."""
    if not hasattr(estimator, "similarity"):
        raise TypeError(
            f"{type(estimator).__name__} has no similarity(); STS scorers take a "
            "BertSentenceTransformer (or an estimator with a similarity method)."
        )
    similarity = estimator.similarity(X)
    return float(correlation(similarity, np.asarray(y, dtype=np.float64)).statistic)


def sts_spearman_scorer(estimator, X, y) -> float:
    """Score sentence pairs by the Spearman correlation of their cosine with gold scores.

    A scorer for ``GridSearchCV(scoring=...)`` and ``cross_val_score``: the Spearman rank
    correlation of ``estimator.similarity(X)`` with ``y``.

    Parameters
    ----------
    estimator : BertSentenceTransformer
        A fitted estimator with a ``similarity`` method.
    X : array-like of shape (n_pairs, 2)
        The sentence pairs.
    y : array-like of shape (n_pairs,)
        The gold similarity score of each pair.

    Returns
    -------
    float
        The Spearman correlation, between -1 and 1 (higher is better).

    See Also
    --------
    sts_pearson_scorer : The same with the Pearson correlation.

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skbert import BertSentenceTransformer
    >>> from skbert.metrics import sts_spearman_scorer
    >>> search = GridSearchCV(BertSentenceTransformer(), {"pooling": ["cls", "mean"]},
    ...                       scoring=sts_spearman_scorer)  # doctest: +SKIP
    """
    return _similarity_correlation(spearmanr, estimator, X, y)


def sts_pearson_scorer(estimator, X, y) -> float:
    """Score sentence pairs by the Pearson correlation of their cosine with gold scores.

    Like :func:`sts_spearman_scorer`, with Pearson's linear correlation in place of
    Spearman's rank correlation.

    Parameters
    ----------
    estimator, X, y : BertSentenceTransformer, pairs and gold scores
        As for :func:`sts_spearman_scorer`: a fitted estimator with a ``similarity``
        method, an array-like of shape (n_pairs, 2) and one gold score per pair.

    Returns
    -------
    float
        The Pearson correlation, between -1 and 1 (higher is better).

    See Also
    --------
    sts_spearman_scorer : The same with the Spearman rank correlation, the usual STS measure.
    """
    from scipy.stats import pearsonr

    return _similarity_correlation(pearsonr, estimator, X, y)

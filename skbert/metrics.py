"""Scoring semantic textual similarity (STS): the cosine of sentence embeddings, or a model's
predicted scores.

Two families of scorers for ``GridSearchCV(scoring=...)`` and ``cross_val_score``, one
correlation each: ``sts_spearman_scorer`` / ``sts_pearson_scorer`` correlate the cosine of a
bi-encoder's vectors (``estimator.similarity(X)``, :class:`~skbert.BertSentenceTransformer`)
with the gold scores; ``spearman_scorer`` / ``pearson_scorer`` correlate a regressor's
predictions (``estimator.predict(X)``: a cross-encoder, :class:`~skbert.BertTextRegressor`
on sentence pairs, or any regressor) with them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
from scipy.stats import spearmanr

__all__ = [
    "paired_cosine",
    "cosine_spearman",
    "sts_spearman_scorer",
    "sts_pearson_scorer",
    "spearman_scorer",
    "pearson_scorer",
]


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
        The Spearman correlation, between -1 and 1; NaN (with an ``UndefinedMetricWarning``,
        as the scorers give it) for fewer than 2 pairs.

    Raises
    ------
    ValueError
        For ``scores`` of another shape than the pairs', or holding NaN or infinity.
    """
    cosines = paired_cosine(u, v)  # checks u and v first
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != cosines.shape:
        raise ValueError(f"scores has shape {scores.shape}; expected {cosines.shape}.")
    bad = np.flatnonzero(~np.isfinite(scores))  # NaN gave nan, inf ranked as the highest
    if len(bad):
        raise ValueError(
            f"scores[{bad[0]}] is {float(scores[bad[0]])!r}; gold scores must be finite."
        )
    if len(scores) < 2:  # as the scorers say it (scipy warned its own way, or raised)
        from sklearn.exceptions import UndefinedMetricWarning

        from ._core.messages import user_stacklevel

        warnings.warn(
            f"Spearman's correlation is not defined for {len(scores)} pair; it needs at least "
            "2 pairs. Returning nan.",
            UndefinedMetricWarning,
            stacklevel=user_stacklevel(),
        )
        return float("nan")
    return _coefficient(spearmanr(cosines, scores))


def _coefficient(result) -> float:
    """The coefficient of a scipy correlation's result: its first item (scipy before 1.10
    returns ``SpearmanrResult(correlation, pvalue)``, without ``statistic``; scikit-learn
    1.6 takes scipy from 1.6)."""
    return float(result[0])


def _similarity_correlation(correlation, estimator, X, y) -> float:
    """``correlation`` (scipy's ``spearmanr`` or ``pearsonr``) of ``estimator.similarity(X)``
    with the gold scores ``y``, as a float."""
    if not hasattr(estimator, "similarity"):
        raise TypeError(
            f"{type(estimator).__name__} has no similarity(); STS scorers take a "
            "BertSentenceTransformer (or an estimator with a similarity method). For the "
            "predictions of a regressor (a BertTextRegressor cross-encoder), use "
            "spearman_scorer or pearson_scorer."
        )
    from sklearn.base import BaseEstimator
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.utils.validation import check_is_fitted

    from ._core.messages import user_stacklevel
    from ._estimator.targets import check_gold_scores
    from ._estimator.validation import check_texts

    if isinstance(estimator, BaseEstimator):  # any object with similarity() may be scored
        check_is_fitted(estimator)
    if isinstance(X, Iterator):  # read here and by similarity(): a generator is read once
        X = list(X)
    first, second = check_texts(X)
    if second is None:
        raise ValueError("STS scores take sentence pairs: X must have 2 columns.")
    gold = check_gold_scores(y, len(first))  # finite, one per pair, as score() wants them
    if len(gold) < 2:
        name = "Pearson" if correlation.__name__ == "pearsonr" else "Spearman"
        warnings.warn(
            f"{name}'s correlation is not defined for {len(gold)} pair; it needs at least 2 "
            "pairs. Returning nan.",
            UndefinedMetricWarning,
            stacklevel=user_stacklevel(),
        )
        return float("nan")
    return _coefficient(correlation(estimator.similarity(X), gold))


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
        The Spearman correlation, between -1 and 1 (higher is better); nan (with a warning)
        for a single pair or when all similarities or all gold scores are equal.

    Raises
    ------
    ValueError
        If ``X`` is not sentence pairs, or ``y`` is not one finite score per pair.

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

    Called on its own, it scores the cosine of the untrained vectors (``fine_tune="none"``)
    on 200 pairs of the STS-B test set:

    >>> from skbert.datasets import load_stsb
    >>> X, y = load_stsb("test", return_X_y=True)
    >>> est = BertSentenceTransformer().fit(X[:200])  # doctest: +SKIP
    >>> round(sts_spearman_scorer(est, X[:200], y[:200]), 3)  # doctest: +SKIP
    0.931
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
        The Pearson correlation, between -1 and 1 (higher is better); nan (with a warning)
        for a single pair or when all similarities or all gold scores are equal.

    See Also
    --------
    sts_spearman_scorer : The same with the Spearman rank correlation, the usual STS measure.
    """
    from scipy.stats import pearsonr

    return _similarity_correlation(pearsonr, estimator, X, y)


def _correlation(measure, estimator, X, y) -> float:
    """``measure`` (Spearman's or Pearson's) of ``estimator.predict(X)`` with ``y``; for
    several outputs, the mean over the outputs (as ``r2_score`` averages)."""
    from sklearn.exceptions import UndefinedMetricWarning

    from ._core.messages import user_stacklevel
    from ._estimator.targets import _as_array, _refuse_non_reals, refuse_non_finite

    predicted = np.asarray(estimator.predict(X), dtype=np.float64)
    # as the sts_* scorers read y: a missing value or a string is named (None read as nan,
    # '1.5' as 1.5), one value per prediction
    gold = _as_array(y, len(predicted), shapes="y takes one gold value per sample (and output).")
    _refuse_non_reals(gold, "gold values are numbers")
    gold = gold.astype(np.float64)
    if {predicted.shape, gold.shape} == {(len(gold),), (len(gold), 1)}:
        predicted, gold = predicted.ravel(), gold.ravel()  # one output: (n,) and (n, 1) alike
    if predicted.shape != gold.shape:
        raise ValueError(
            f"y has shape {gold.shape} and the predictions {predicted.shape}; they must match."
        )
    if gold.ndim > 2:  # a column of a 3-D array is 2-D: scipy gave a matrix, averaged silently
        raise ValueError(
            f"y has {gold.ndim} dimensions (shape {gold.shape}); a correlation takes one value "
            "per sample, or one per sample and output (1 or 2 dimensions)."
        )
    refuse_non_finite(gold, "gold values")  # a NaN gave a NaN score, silently
    if len(gold) < 2:
        warnings.warn(
            f"a correlation is not defined for {len(gold)} sample; it needs at least 2. "
            "Returning nan.",
            UndefinedMetricWarning,
            stacklevel=user_stacklevel(),
        )
        return float("nan")
    if predicted.ndim == 1:
        return _coefficient(measure(predicted, gold))
    columns = range(predicted.shape[1])
    return float(np.mean([_coefficient(measure(predicted[:, j], gold[:, j])) for j in columns]))


def spearman_scorer(estimator, X, y) -> float:
    """Score predictions by their Spearman rank correlation with the gold values.

    A scorer for ``GridSearchCV(scoring=...)`` and ``cross_val_score``: the Spearman
    correlation of ``estimator.predict(X)`` with ``y``, the STS measure for a cross-encoder
    (:class:`~skbert.BertTextRegressor` on sentence pairs); for several outputs, the mean of
    the outputs' correlations.

    Parameters
    ----------
    estimator : regressor
        A fitted estimator with a ``predict`` method (a :class:`~skbert.BertTextRegressor`,
        a pipeline, any scikit-learn regressor).
    X : array-like
        What ``estimator.predict`` takes (sentence pairs for a cross-encoder).
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        The gold values, in the shape of the predictions.

    Returns
    -------
    float
        The Spearman correlation, between -1 and 1 (higher is better); NaN for constant
        predictions, and (with an ``UndefinedMetricWarning``) for a single sample.

    Raises
    ------
    ValueError
        When ``y`` holds a missing, NaN or infinite value or one that is no number (a
        string; its position is named), or its shape is not the predictions' (but ``(n,)``
        and ``(n, 1)``, read alike).

    See Also
    --------
    pearson_scorer : The same with the Pearson correlation.
    sts_spearman_scorer : The Spearman correlation of a bi-encoder's cosine.

    Examples
    --------
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skbert import BertTextRegressor
    >>> from skbert.metrics import spearman_scorer
    >>> search = GridSearchCV(BertTextRegressor(), {"pooling": ["cls", "mean"]},
    ...                       scoring=spearman_scorer)  # doctest: +SKIP

    Any regressor: ridge regression on the untrained vectors of 150 STS-B pairs (each pair
    encoded as one input), cross-validated:

    >>> from sklearn.linear_model import Ridge
    >>> from sklearn.model_selection import cross_val_score
    >>> from sklearn.pipeline import make_pipeline
    >>> from skbert import BertSentenceTransformer
    >>> from skbert.datasets import load_stsb
    >>> X, y = load_stsb("train", return_X_y=True)
    >>> pipe = make_pipeline(BertSentenceTransformer(), Ridge())
    >>> scores = cross_val_score(pipe, X[:150], y[:150], scoring=spearman_scorer,
    ...                          cv=3)  # doctest: +SKIP
    >>> print(round(scores.mean(), 3))  # doctest: +SKIP
    0.522
    """
    return _correlation(spearmanr, estimator, X, y)


def pearson_scorer(estimator, X, y) -> float:
    """Score predictions by their Pearson correlation with the gold values.

    Like :func:`spearman_scorer`, with Pearson's linear correlation in place of Spearman's
    rank correlation.

    Parameters
    ----------
    estimator, X, y : regressor, its input and gold values
        As for :func:`spearman_scorer`: a fitted estimator with a ``predict`` method, what
        it takes and the gold values in the shape of its predictions.

    Returns
    -------
    float
        The Pearson correlation, between -1 and 1 (higher is better); NaN where
        :func:`spearman_scorer` gives NaN.

    Raises
    ------
    ValueError
        As :func:`spearman_scorer`: for a gold value that is not finite, or shapes apart.

    See Also
    --------
    spearman_scorer : The same with the Spearman rank correlation, the usual STS measure.
    sts_pearson_scorer : The Pearson correlation of a bi-encoder's cosine.
    """
    from scipy.stats import pearsonr

    return _correlation(pearsonr, estimator, X, y)

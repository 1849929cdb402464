"""Checks of the targets ``y``: class labels, multi-label indicators and similarity scores.

Each check gives the error scikit-learn's own estimators and metrics give (or a clearer one that
names the position), instead of a raw comparison error or a model that learned nothing.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils.multiclass import type_of_target

__all__ = ["check_class_labels", "check_scores", "check_gold_scores"]


def _as_array(y, n_samples: int | None, name: str = "y") -> np.ndarray:
    if y is None:
        raise ValueError(f"{name} is required: pass one target per sample.")
    if isinstance(y, (str, bytes)):
        raise TypeError(
            f"{name} must be an array-like of targets, got a single {type(y).__name__}."
        )
    raw = np.asarray(y)
    y = np.asarray(y, dtype=object) if raw.dtype.kind in "OUS" else raw
    if y.ndim == 0:
        raise ValueError(f"{name} must be an array-like of targets, got the scalar {y.item()!r}.")
    if n_samples is not None and y.shape[0] != n_samples:
        raise ValueError(f"X has {n_samples} samples but {name} has {y.shape[0]}.")
    return y


def _check_missing(y: np.ndarray, name: str) -> None:
    for i, value in enumerate(y.ravel()):
        if value is None or (isinstance(value, numbers.Real) and np.isnan(value)):
            pos = ", ".join(str(int(p)) for p in np.unravel_index(i, y.shape))
            raise ValueError(f"{name}[{pos}] is missing ({value!r}); every sample needs a target.")


def _label_kind(value) -> str:
    if isinstance(value, (str, np.str_)):
        return "str"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, numbers.Number):
        return "number"
    return type(value).__name__


def _check_one_label_type(y: np.ndarray, name: str) -> None:
    """Labels must be all strings or all numbers (sorting a mix fails deep inside numpy)."""
    if y.dtype != object:
        return
    kinds: dict = {}
    for i, value in enumerate(y):
        kinds.setdefault(_label_kind(value), i)
    if len(kinds) > 1:
        where = ", ".join(f"{kind} at {name}[{i}]" for kind, i in kinds.items())
        raise ValueError(
            f"{name} mixes label types ({where}); use one type for all labels, e.g. "
            f"{name} = [str(label) for label in {name}]."
        )


def check_class_labels(y, n_samples: int, *, allow_multilabel: bool, estimator: str):
    """Class labels (1-D) or, if allowed, a binary indicator matrix.

    Parameters
    ----------
    y : array-like
        The targets given to ``fit``.
    n_samples : int
        Rows of X.
    allow_multilabel : bool
        Accept a 2-D binary indicator matrix (multi-label).
    estimator : str
        Who asks, for the messages.

    Returns
    -------
    y : ndarray
        1-D labels (object dtype for strings), or float32 indicators.
    multilabel : bool
        Whether ``y`` is an indicator matrix.

    Raises
    ------
    ValueError
        For a wrong length, a missing label, more than 2 dimensions, mixed label types,
        continuous values, a 2-D y that is not an indicator matrix, or a single class.
    """
    y = _as_array(y, n_samples)
    _check_missing(y, "y")
    if y.ndim > 2:
        raise ValueError(
            f"y has {y.ndim} dimensions (shape {y.shape}); expected a 1-D array of labels"
            + (" or a 2-D binary indicator matrix (multi-label)." if allow_multilabel else ".")
        )
    if y.ndim == 2 and y.shape[1] > 1:
        if not allow_multilabel:
            raise ValueError(f"y has shape {y.shape}; {estimator} takes a 1-D array of labels.")
        if type_of_target(y) != "multilabel-indicator":
            raise ValueError(
                "a 2-D y must be a binary indicator matrix (multi-label: one column per "
                "label, values 0/1)."
            )
        return y.astype(np.float32), True
    y = y.ravel()
    _check_one_label_type(y, "y")
    if type_of_target(y) == "continuous":
        raise ValueError(
            f"y holds continuous values; {estimator} needs class labels here (similarity "
            "scores train BertSentenceTransformer's objective='cosine' on sentence pairs)."
        )
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError(
            f"y has a single class ({classes[0]!r}); {estimator} needs samples of at least 2 "
            "classes to learn from."
        )
    return y, False


def _finite_scores(y, n_samples: int, what: str) -> np.ndarray:
    """``y`` as 1-D finite float64 scores, with errors that say which ``what``."""
    y = _as_array(y, n_samples)
    if y.ndim != 1:
        raise ValueError(f"{what} y must be 1-D; got shape {y.shape}.")
    y = y.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(y))
    if len(bad):
        raise ValueError(f"y[{bad[0]}] is {float(y[bad[0]])!r}; {what} must be finite.")
    return y


def check_scores(y, n_samples: int) -> np.ndarray:
    """Similarity scores for training: 1-D, finite, not all equal; returned as float64.

    Raises
    ------
    ValueError
        For a wrong shape or length, NaN or infinite scores, or constant scores (the cosine
        objective scales scores by their range, which is then 0: nothing can be learned).
    """
    y = _finite_scores(y, n_samples, "similarity scores")
    if y.min() == y.max():
        raise ValueError(
            f"y holds one score ({float(y[0])!r}) for every pair; the cosine objective learns from "
            "differences between scores, so it needs at least two distinct values."
        )
    return y


def check_gold_scores(y, n_samples: int) -> np.ndarray:
    """Gold scores for :meth:`BertSentenceTransformer.score`: 1-D and finite, as float64.

    Raises
    ------
    ValueError
        For a wrong shape or length, or NaN or infinite scores (scikit-learn's metrics refuse
        them too).
    """
    return _finite_scores(y, n_samples, "gold scores")

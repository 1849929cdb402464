"""``fit(X, y, sample_weight)`` of the classifier and the regressor: the weights checked, and
each row's weight in the training loss.

A row's loss is multiplied by its weight, as scikit-learn's estimators weigh samples
(``LogisticRegression``, ``Ridge``, ...): a weight of 2 counts a row's loss twice, 0 not at
all. A batch's loss is the sum of its weighted row losses over the batch's size times the
mean weight of the training rows (those ``early_stopping`` does not hold out), so that the
loss keeps its scale, and a batch of light rows moves the model less than one of heavy rows
(torch's weighted mean, dividing by the batch's own sum of weights, would cancel the weights
of a batch of one class). Weights all equal are no weights (the fit is the unweighted one).
"""

from __future__ import annotations

import hashlib
import numbers

import numpy as np
import torch

__all__ = ["check_sample_weight", "row_weights", "weighted_mean_loss", "weights_digest"]


def check_sample_weight(sample_weight, n_samples: int) -> np.ndarray | None:
    """``sample_weight`` as a float64 array of ``n_samples`` weights, or None.

    Parameters
    ----------
    sample_weight : array-like of shape (n_samples,) or None
        The weights given to ``fit``.
    n_samples : int
        Rows of X.

    Returns
    -------
    ndarray of shape (n_samples,) or None
        None for None, and for weights that are all equal (they weigh every row alike: the
        fit is the unweighted one, bit for bit).

    Raises
    ------
    ValueError
        For another length or shape, a missing, infinite, negative or non-numeric weight
        (its position is named), or weights that are all 0.
    """
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Number) or np.ndim(sample_weight) == 0:
        raise ValueError(
            f"sample_weight={sample_weight!r} is a single value; give one weight per sample "
            f"(an array-like of {n_samples} numbers), or None to weigh them all 1."
        )
    values = np.asarray(sample_weight)
    if values.ndim != 1 or len(values) != n_samples:
        raise ValueError(
            f"sample_weight has shape {values.shape}; X has {n_samples} samples: give one "
            "weight per sample (shape (n_samples,))."
        )
    if values.dtype.kind in "US":
        raise ValueError(
            f"sample_weight[0] is {np.asarray(values[0]).item()!r}, a string; weights are "
            "non-negative numbers."
        )
    if values.dtype.kind not in "biuf":  # objects: numbers (a pandas object column), or not
        first = next((i for i, v in enumerate(values) if not _is_number(v)), None)
        if first is not None:  # None would become NaN
            raise ValueError(
                f"sample_weight[{first}] is {values[first]!r}, not a number; weights are "
                "non-negative numbers."
            )
    values = values.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        raise ValueError(
            f"sample_weight[{bad[0]}] is {float(values[bad[0]])!r}; weights must be finite and "
            "non-negative (0 leaves a sample out)."
        )
    if not values.any():
        raise ValueError(
            "sample_weight is 0 for every sample: no sample would train the model; give some "
            "samples a positive weight."
        )
    return None if (values == values[0]).all() else values


def _is_number(value) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (str, bytes))


def row_weights(weights: np.ndarray, train_rows: np.ndarray, why: str) -> torch.Tensor:
    """The rows' ``weights`` as float32 (the loss's dtype), refusing weights that leave every
    training row out.

    Raises
    ------
    ValueError
        If every row of ``train_rows`` has weight 0 (``why`` says what weighed them).
    """
    if not np.any(weights[train_rows]):
        raise ValueError(
            f"{why} give every training row weight 0 (the rows early_stopping holds out aside): "
            "no row would train the model."
        )
    return torch.as_tensor(weights, dtype=torch.float32)


def weighted_mean_loss(losses: torch.Tensor, weights: torch.Tensor, mean_weight: float) -> tuple:
    """``(loss, size)``: the sum of the rows' ``losses`` times their ``weights``, over the
    batch's size times ``mean_weight`` (the mean weight of the training rows), and that
    divisor."""
    size = len(losses) * mean_weight
    return (losses * weights).sum() / size, size


def weights_digest(weights: np.ndarray | None) -> dict:
    """What the weights add to a checkpoint's data key: nothing for None (so that a fit
    without weights keeps its checkpoints), else a hash of their values."""
    if weights is None:
        return {}
    digest = hashlib.blake2b(np.ascontiguousarray(weights).tobytes(), digest_size=16)
    return {"sample_weight": digest.hexdigest()}

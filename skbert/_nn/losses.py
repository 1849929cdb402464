"""The regression losses of :class:`~skbert.BertTextRegressor`, on standardised targets.

The regressor trains its output layer on targets scaled to mean 0 and standard deviation 1
per output (scikit-learn's ``StandardScaler``), so one loss setting serves targets in [0, 5]
and around 1e6 alike; the Huber loss's threshold is then one standard deviation of the
target. The names are scikit-learn's (``SGDRegressor``, ``HistGradientBoostingRegressor``).
"""

from __future__ import annotations

from torch import nn

__all__ = ["REGRESSION_LOSSES", "HUBER_DELTA", "regression_loss"]

#: the Huber loss is squared within this many standard deviations of the target, linear outside
HUBER_DELTA = 1.0

#: ``loss`` names and what they are: the mean over the rows and outputs of a batch
REGRESSION_LOSSES = {
    "squared_error": "squared error (mean squared error)",
    "huber": f"Huber loss, quadratic within {HUBER_DELTA:g} standard deviation of the target",
    "absolute_error": "absolute error (mean absolute error)",
}


def regression_loss(name: str, reduction: str = "mean") -> nn.Module:
    """The torch criterion of the regression loss ``name`` (a key of :data:`REGRESSION_LOSSES`).

    Parameters
    ----------
    name : {"squared_error", "huber", "absolute_error"}
        The loss.
    reduction : {"mean", "none"}, default="mean"
        The mean over the rows and outputs of a batch, or each element's loss (for weighted
        rows).

    Returns
    -------
    torch.nn.Module
        ``MSELoss``, ``HuberLoss(delta=HUBER_DELTA)`` or ``L1Loss``.

    Raises
    ------
    ValueError
        For another name.
    """
    if name == "squared_error":
        return nn.MSELoss(reduction=reduction)
    if name == "huber":
        return nn.HuberLoss(delta=HUBER_DELTA, reduction=reduction)
    if name == "absolute_error":
        return nn.L1Loss(reduction=reduction)
    raise ValueError(f"loss={name!r} is not one of {sorted(REGRESSION_LOSSES)}.")

"""The old spellings of skbert's parameters: how they are accepted, read and warned about.

Two spellings were renamed in skbert 0.1 and are removed in 0.3:

- ``fine_tune="head"`` is ``fine_tune="top"`` (train the layers on top of the frozen encoder);
- ``head_learning_rate`` is ``top_learning_rate`` (its default, ``"deprecated"``, means "not
  given"; a value given is used as ``top_learning_rate``).

Everything about them is here: the parameter constraints that accept them
(:func:`fine_tune_constraint`, :func:`head_learning_rate_constraint`, used in the estimators'
``_parameter_constraints``), their reading (:func:`read_fine_tune`,
:func:`read_top_learning_rate`, used by :mod:`skbert._estimator.training_settings`, the
sentence transformer's cache and :func:`skbert.optim.layerwise_param_groups`) and their
FutureWarnings (:func:`warn_renamed`, at the start of an estimator's ``fit``;
:func:`warn_head_learning_rate`, in :func:`~skbert.optim.layerwise_param_groups`). Removing
them in 0.3 is removing this module and its uses.
"""

from __future__ import annotations

import warnings

from sklearn.utils._param_validation import Hidden, StrOptions

__all__ = [
    "NOT_GIVEN",
    "fine_tune_constraint",
    "head_learning_rate_constraint",
    "read_fine_tune",
    "read_top_learning_rate",
    "warn_head_learning_rate",
    "warn_renamed",
]

#: ``fine_tune`` values renamed, and their new spelling
RENAMED_FINE_TUNE = {"head": "top"}

#: The default of ``head_learning_rate``: not given
NOT_GIVEN = "deprecated"

_FINE_TUNE_MESSAGE = (
    "fine_tune='head' was renamed fine_tune='top' (train the layers on top of the frozen "
    "encoder) in skbert 0.1 and will be removed in 0.3."
)
_HEAD_LEARNING_RATE_MESSAGE = (
    "head_learning_rate was renamed top_learning_rate in skbert 0.1 and will be removed in "
    "0.3; its value is used as top_learning_rate."
)


def fine_tune_constraint(modes) -> StrOptions:
    """The constraint of ``fine_tune``: ``modes``, and the old spelling ``"head"`` of
    ``"top"`` (accepted, and left out of the error message's list)."""
    return StrOptions({*modes, *RENAMED_FINE_TUNE}, deprecated=set(RENAMED_FINE_TUNE))


def head_learning_rate_constraint(top_learning_rate_constraint: list) -> list:
    """The constraint of ``head_learning_rate``: whatever ``top_learning_rate`` takes, and its
    hidden default :data:`NOT_GIVEN`."""
    return [*top_learning_rate_constraint, Hidden(StrOptions({NOT_GIVEN}))]


def read_fine_tune(fine_tune: str) -> str:
    """``fine_tune`` with the old spelling ``"head"`` read as ``"top"``."""
    return RENAMED_FINE_TUNE.get(fine_tune, fine_tune)


def read_top_learning_rate(top_learning_rate, head_learning_rate=NOT_GIVEN):
    """``top_learning_rate``, or the deprecated ``head_learning_rate`` when it is given."""
    return top_learning_rate if head_learning_rate == NOT_GIVEN else head_learning_rate


def warn_head_learning_rate(stacklevel: int) -> None:
    """The FutureWarning that ``head_learning_rate`` was renamed; ``stacklevel`` counts from
    the caller of this function, as ``warnings.warn``'s own does from its caller."""
    warnings.warn(_HEAD_LEARNING_RATE_MESSAGE, FutureWarning, stacklevel=stacklevel + 1)


def warn_renamed(params: dict, stacklevel: int) -> None:
    """A FutureWarning for each old spelling among an estimator's parameters ``params``
    (``get_params(deep=False)``); ``stacklevel`` counts from the caller of this function."""
    if params.get("fine_tune") in RENAMED_FINE_TUNE:
        warnings.warn(_FINE_TUNE_MESSAGE, FutureWarning, stacklevel=stacklevel + 1)
    if params.get("head_learning_rate", NOT_GIVEN) != NOT_GIVEN:
        warn_head_learning_rate(stacklevel + 1)

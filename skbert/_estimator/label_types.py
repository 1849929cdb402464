"""Class labels that scikit-learn's metrics cannot read (their type is ``'unknown'``).

A classifier's ``score`` and every cross-validation score compare the labels ``y`` as the user
passes them with ``predict``'s; scikit-learn's metrics refuse labels of type ``'unknown'``
(numbers in an object array or an object-dtype DataFrame, ``Decimal`` values as ``read_sql``
gives, ...). :func:`check_class_labels <skbert._estimator.targets.check_class_labels>` refuses
them before the fit (as ``LogisticRegression`` does), with the cast that makes them readable,
instead of a fit that trains to the end and then fails to score (a grid search scored NaN).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
from scipy.sparse import issparse
from sklearn.utils.multiclass import type_of_target

__all__ = [
    "read_as_unknown",
    "refuse_object_indicator",
    "refuse_object_numbers",
    "refuse_unknown_labels",
]

_INT64 = np.iinfo(np.int64)
_FAILS = (
    "scikit-learn's metrics refuse class labels of that dtype (type 'unknown'), so score() and "
    "cross-validation would fail after fitting"
)


def read_as_unknown(given, y: np.ndarray) -> bool:
    """Whether scikit-learn's metrics read the labels ``given`` (as passed to ``fit``, as
    ``score`` will see them) as of type ``'unknown'``.

    Parameters
    ----------
    given : array-like
        ``y`` as the user passed it.
    y : ndarray
        ``given`` as an array: judged in its place when ``given`` is no sequence or array (an
        iterator, which judging would consume).

    Returns
    -------
    bool
        True also when ``type_of_target`` raises (as for bytes labels): the metrics raise too.
    """
    array_like = isinstance(given, Sequence) or issparse(given) or hasattr(given, "__array__")
    try:
        return type_of_target(given if array_like else y) == "unknown"
    except (TypeError, ValueError):
        return True


def _is_frame(given) -> bool:
    return getattr(given, "ndim", None) == 2 and hasattr(given, "columns")


def refuse_object_indicator(given) -> None:
    """Raise when a 2-D ``given`` (a multi-label indicator) reads as an object array: a
    DataFrame of nullable ``Int64`` or ``boolean`` columns, or of mixed column dtypes, which
    ``type_of_target`` calls an indicator and scikit-learn's metrics then refuse.

    Raises
    ------
    ValueError
        Naming the cast that makes the indicator readable.
    """
    if getattr(given, "ndim", None) != 2 or issparse(given):
        return
    if np.asarray(given).dtype != object:
        return
    raise ValueError(
        "y is a 2-D indicator whose values numpy reads as dtype object (as a DataFrame of "
        "nullable Int64 or boolean columns, or of mixed column dtypes, gives); "
        f"{_FAILS}. Pass {_cast(given, 'int')}."
    )


def refuse_object_numbers(given, y: np.ndarray) -> None:
    """Raise when labels ``given`` of type ``'unknown'`` are numbers in an object array or an
    object-dtype DataFrame (``y`` is them as numbers), naming the cast that makes them readable.
    Scores (floats not whole) are left to the check that says they are continuous.

    Raises
    ------
    ValueError
        If ``y`` holds bools, ints or whole floats.
    """
    if y.dtype.kind not in "biuf" or (y.dtype.kind == "f" and not np.all(np.mod(y, 1) == 0)):
        return
    kind = "bool" if y.dtype.kind == "b" else "int"
    if _is_frame(given):
        raise ValueError(
            "y is a DataFrame with columns of dtype object and holds numbers; "
            f"{_FAILS}. Pass y.astype({kind}) (or y.to_numpy(dtype={kind}))."
        )
    raise ValueError(
        "y has dtype object and holds numbers (as DataFrame.to_numpy() of mixed columns "
        f"gives); {_FAILS}. Pass y.astype({kind})."
    )


def _whole_int64(value) -> bool:
    try:
        return value == int(value) and _INT64.min <= int(value) <= _INT64.max
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return False


def _cast(given, kind: str) -> str:
    """How to convert labels ``given`` to ``kind`` (int or str), by what ``given`` is."""
    if _is_frame(given):
        return f"y.astype({kind}) (or y.to_numpy(dtype={kind}))"
    if hasattr(given, "astype"):
        return f"y.astype({kind})"
    return f"[{kind}(label) for label in y]"


def refuse_unknown_labels(given, y: np.ndarray) -> None:
    """Raise for labels ``given`` of type ``'unknown'`` that are no plain numbers (``y``, their
    array, holds them as objects): ``Decimal`` or ``Fraction`` values, ints past int64, ...

    Raises
    ------
    ValueError
        Saying what the labels are and how to convert them: to int for whole numbers that
        int64 holds, else to str.
    """
    values = [value for value in np.ravel(y) if not isinstance(value, str)]
    kinds = sorted({type(value).__name__ for value in values}) or [str(y.dtype)]
    what = f"{'/'.join(kinds)} values"
    if any(isinstance(value, numbers.Integral) and not _whole_int64(value) for value in values):
        what += " past int64"
    if "Decimal" in kinds:
        what += " (as read_sql gives for a NUMERIC column)"
    if _is_frame(given):
        where = "a DataFrame of dtype object"
    else:
        where = "an object array" if hasattr(given, "dtype") else f"a {type(given).__name__}"
    numeric = bool(values) and all(isinstance(value, numbers.Number) for value in values)
    if numeric and all(_whole_int64(value) for value in values):
        how = f"pass {_cast(given, 'int')} instead"
    else:
        how = f"pass {_cast(given, 'str')} instead"
        if numeric and not all(isinstance(value, numbers.Integral) for value in values):
            how += ", or, for continuous values rather than classes, use BertTextRegressor"
    raise ValueError(
        f"y holds {what} in {where}, which scikit-learn's metrics cannot read as class labels "
        "(type 'unknown'): score() and cross-validation would fail after fitting. Class labels "
        f"are ints or strings: {how}."
    )

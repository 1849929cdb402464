"""The column names of a DataFrame of texts (``feature_names_in_``), recorded by ``fit`` and
checked by the predictions, as scikit-learn's estimators do.

The columns of a DataFrame of sentence pairs are read by position: the first is the first
text of each pair (a premise, a query), the second the other. A frame whose columns come in
another order, or under other names, than in ``fit`` would be read as other texts, and its
predictions would change without a word; it is refused, naming both. A plain list or array,
which has no names, is read by position as always, whatever ``fit`` saw.
"""

from __future__ import annotations

import numpy as np

__all__ = ["column_names", "record_column_names", "check_column_names"]

NAMES = "feature_names_in_"


def column_names(X) -> np.ndarray | None:
    """The column names of a pandas DataFrame ``X`` (an object array) where all are str, as
    scikit-learn records them; None for any other ``X``."""
    if not (hasattr(X, "iloc") and hasattr(X, "columns")):
        return None
    names = list(X.columns)
    if not names or not all(isinstance(name, str) for name in names):
        return None
    return np.asarray(names, dtype=object)


def record_column_names(estimator, X) -> None:
    """Set ``feature_names_in_`` to ``X``'s column names, or remove it where ``X`` has none."""
    names = column_names(X)
    if names is None:
        vars(estimator).pop(NAMES, None)
    else:
        setattr(estimator, NAMES, names)


def check_column_names(estimator, X) -> None:
    """Raise ValueError where ``X`` and the fitted estimator both have as many named columns,
    under other names or in another order.

    Raises
    ------
    ValueError
        Naming ``X``'s columns and those of ``fit``, and how to pass them.
    """
    fitted = vars(estimator).get(NAMES)
    names = column_names(X)
    if fitted is None or names is None or np.array_equal(fitted, names):
        return
    if len(fitted) != len(names):  # texts where fit read pairs, or pairs where it read texts:
        return  # another kind of input, which the method itself takes or refuses
    seen, given = list(fitted), list(names)
    how = "in another order" if sorted(seen) == sorted(given) else "under other names"
    raise ValueError(
        f"X has the columns {given}, and fit read {seen} (feature_names_in_): a DataFrame's "
        f"columns are read by position, so these, {how}, would be read as other texts. Pass "
        f"X[{seen}] (after renaming, if the columns hold the same texts under other names), "
        "or X.to_numpy() to read the columns by position."
    )

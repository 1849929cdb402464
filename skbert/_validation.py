"""Input checks for texts and sentence pairs, with errors that name the position."""

from __future__ import annotations

import math
import numbers
import os

import numpy as np

__all__ = ["check_texts", "check_layers", "check_output_dir"]


def _is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return math.isnan(value)
    # pandas.NA, pandas.NaT and friends without importing pandas
    return type(value).__name__ in {"NAType", "NaTType"}


def _check_item(value, where: str) -> str:
    if isinstance(value, str):
        return value
    if _is_missing(value):
        raise ValueError(
            f"X{where} is missing ({value!r}); every item must be a str. "
            "Drop or fill missing texts first (an empty string '' is a valid text)."
        )
    raise TypeError(
        f"X{where} is a {type(value).__name__} ({value!r:.50}); every item must be a str."
    )


def _to_rows(X):
    """Return X as a list of rows (each a scalar or a sequence) and its number of columns."""
    if hasattr(X, "iloc") and hasattr(X, "columns"):  # pandas DataFrame
        values = X.to_numpy(dtype=object)
        return list(values), values.shape[1]
    if hasattr(X, "iloc"):  # pandas Series
        return list(X.to_numpy(dtype=object)), None
    if isinstance(X, np.ndarray):
        if X.ndim == 1:
            return list(X), None
        if X.ndim == 2:
            return list(X), X.shape[1]
        raise ValueError(
            f"X has {X.ndim} dimensions; expected a 1-D collection of texts or a 2-D array of "
            "shape (n_samples, 1) or (n_samples, 2) for sentence pairs."
        )
    rows = list(X)
    if rows and all(isinstance(r, (list, tuple, np.ndarray)) for r in rows):
        widths = {len(r) for r in rows}
        if len(widths) > 1:
            raise ValueError(
                f"X has rows of different lengths {sorted(widths)}; sentence pairs must all have "
                "exactly 2 items."
            )
        return rows, widths.pop()
    return rows, None


def check_texts(X):
    """Validate texts or sentence pairs.

    Parameters
    ----------
    X : 1-D iterable of str, or 2-D array-like of str with 1 or 2 columns
        Texts, or sentence pairs (2 columns). pandas Series and DataFrames are accepted.

    Returns
    -------
    first : list of str
        The texts, or the first sentence of each pair.
    second : list of str or None
        The second sentence of each pair, or None for single texts.

    Raises
    ------
    TypeError
        If X is a bare string or an item is not a str.
    ValueError
        If X is empty, an item is missing (None, NaN) or X has the wrong shape.
    """
    if isinstance(X, (str, bytes)):
        raise TypeError(
            f"X must be a collection of texts, got a single {type(X).__name__} ({X!r:.50}). "
            "Wrap it in a list: [text]."
        )
    if X is None or not hasattr(X, "__iter__") and not hasattr(X, "__len__"):
        raise TypeError(
            f"X must be a 1-D collection of texts or a 2-column array of sentence pairs, "
            f"got {type(X).__name__}."
        )
    rows, width = _to_rows(X)
    if not rows:
        raise ValueError("X is empty; it must contain at least one text.")
    if width is None or width == 1:
        if width is None:
            return [_check_item(row, f"[{i}]") for i, row in enumerate(rows)], None
        return [_check_item(row[0], f"[{i}, 0]") for i, row in enumerate(rows)], None
    if width == 2:
        first = [_check_item(row[0], f"[{i}, 0]") for i, row in enumerate(rows)]
        second = [_check_item(row[1], f"[{i}, 1]") for i, row in enumerate(rows)]
        return first, second
    raise ValueError(
        f"X has {width} columns; expected 1 column of texts or 2 columns of sentence pairs."
    )


def check_layers(layer, n_hidden_states: int) -> tuple:
    """Normalise the ``layer`` parameter to a tuple of indices into the hidden states.

    Parameters
    ----------
    layer : int or tuple of int
        0 is the embedding output, -1 the last layer.
    n_hidden_states : int
        Number of hidden states the encoder returns (its layers + 1).

    Returns
    -------
    tuple of int
        Non-negative indices, in the order given.

    Raises
    ------
    TypeError
        If ``layer`` is not an int or a tuple of ints.
    ValueError
        If ``layer`` is empty or an index is out of range for this model.
    """
    layers = (layer,) if isinstance(layer, numbers.Integral) else tuple(layer)
    if not layers:
        raise ValueError("layer=() is empty; give an int or a non-empty tuple of ints.")
    for value in layers:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"layer={layer!r} must be an int or a tuple of ints.")
        if not -n_hidden_states <= value < n_hidden_states:
            raise ValueError(
                f"layer={layer!r} is out of range: this model has {n_hidden_states} hidden "
                f"states (0 = embeddings ... {n_hidden_states - 1} = last layer), so each index "
                f"must be in [{-n_hidden_states}, {n_hidden_states - 1}]."
            )
    return tuple(int(value) % n_hidden_states for value in layers)


def check_output_dir(path, name: str) -> str:
    """``path`` as a str, if a checkpoint folder can be written there.

    Hugging Face's ``save_pretrained`` only logs an error and returns when ``path`` is an
    existing file, so a save would report success while writing nothing: refuse it first.

    Parameters
    ----------
    path : str or os.PathLike
        The folder to write (created if missing).
    name : str
        The parameter's name, for the error message.

    Returns
    -------
    str
        ``os.fspath(path)``.

    Raises
    ------
    NotADirectoryError
        If ``path`` exists and is not a folder.
    """
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(
            f"{name}={path!r} is an existing file; a checkpoint is a folder. Give a new path or "
            "an existing folder (its files of the same names are overwritten)."
        )
    return path

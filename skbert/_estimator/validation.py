"""Input checks for texts and sentence pairs, with errors that name the position."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, MappingView, Set

import numpy as np

__all__ = ["check_texts", "check_layers", "check_kernel_sizes", "pandas_missing"]


def _is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return math.isnan(value)
    return pandas_missing(value)


def pandas_missing(value) -> bool:
    """pandas.NA or pandas.NaT (told by type name: pandas is not imported for it)."""
    return type(value).__name__ in {"NAType", "NaTType"}


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "a str", "an int", "an OrderedDict"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _index_labels(X):
    """The pandas index of ``X``'s rows when its labels are not their positions, else None
    (the messages then name the label beside the position: ``X[5] (index label 105)``)."""
    index = getattr(X, "index", None) if hasattr(X, "iloc") else None
    if index is None:
        return None
    values = index.to_numpy()
    if values.dtype.kind in "iu" and np.array_equal(values, np.arange(len(values))):
        return None  # a default RangeIndex, or labels 0 ... n-1
    return index


def _check_item(value, position, name: str, hint: str = "", X=None) -> str:
    """``value`` if it is a str, else an error naming ``name[position]`` (``position`` an
    int, or ``(row, column)``) and, for pandas ``X``, the row's index label."""
    if isinstance(value, str):
        return value
    row, column = position if isinstance(position, tuple) else (position, None)
    where = f"[{row}]" if column is None else f"[{row}, {column}]"
    labels = _index_labels(X)  # looked up for the error only, off the valid texts' path
    if labels is not None:
        where += f" (index label {labels.tolist()[row]!r})"  # Python values, not np.int64
    if _is_missing(value):
        raise ValueError(
            f"{name}{where} is missing ({value!r}); every item must be a str. "
            "Drop or fill missing texts first (an empty string '' is a valid text)."
        )
    raise TypeError(
        f"{name}{where} is {_a(type(value).__name__)} ({value!r:.50}); every item must be a "
        f"str.{hint}"
    )


def _pairs_hint(X, name: str, column: int) -> str:
    """Where a label column given as the 2nd (or 1st) of 2 columns belongs (in y)."""
    columns = list(X.columns) if hasattr(X, "iloc") and hasattr(X, "columns") else []
    if len(columns) == 2:
        text, label = columns[1 - column], columns[column]
        example = f"fit({name}[{text!r}], {name}[{label!r}])"
    else:
        example = "fit(texts, labels)"
    return (
        f" {name} has 2 columns, which are read as sentence pairs (text, text); a label column "
        f"belongs in y, not in {name}: e.g. {example}."
    )


def _to_rows(X, name: str):
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
            f"{name} has {X.ndim} dimensions; expected a 1-D collection of texts or a 2-D array of "
            "shape (n_samples, 1) or (n_samples, 2) for sentence pairs."
        )
    rows = list(X)
    if (
        isinstance(X, tuple)
        and len(rows) == 2
        and all(isinstance(r, list) or getattr(r, "ndim", 0) == 1 for r in rows)
        and len(rows[0]) == len(rows[1]) > 2
    ):  # (first_sentences, second_sentences): columns, which would be read as rows
        raise ValueError(
            f"{name} is a tuple of 2 lists of {len(rows[0])} texts, read as {len(rows)} rows of "
            f"{len(rows[0])} columns; for sentence pairs pass list(zip(first, second)) (one "
            "pair per row) or an array of shape (n_pairs, 2)."
        )
    if rows and all(
        isinstance(r, (list, tuple)) or (isinstance(r, np.ndarray) and r.ndim) for r in rows
    ):
        widths = {len(r) for r in rows}
        if len(widths) > 1:
            raise ValueError(
                f"{name} has rows of different lengths {sorted(widths)}; sentence pairs must "
                "all have exactly 2 items."
            )
        return rows, widths.pop()
    return rows, None


def _check_container(X, name: str) -> None:
    """Refuse what is not a collection of texts, or one whose iteration would mislead."""
    if isinstance(X, (str, bytes)):
        raise TypeError(
            f"{name} must be a collection of texts, got a single {type(X).__name__} ({X!r:.50}). "
            "Wrap it in a list: [text]."
        )
    if isinstance(X, Mapping):
        raise TypeError(
            f"{name} is {_a(type(X).__name__)}: iterating it would encode its keys, not its "
            f"values. Pass the texts as a list: list({name}.values()) for the values, list({name}) "
            "for the keys."
        )
    if isinstance(X, Set) and not isinstance(X, MappingView):  # dict.keys() has an order
        raise TypeError(
            f"{name} is {_a(type(X).__name__)}, which is unordered: its texts would come out in "
            "hash order, matching neither y nor any order of yours. Pass a list (e.g. "
            f"sorted({name}))."
        )
    if hasattr(X, "tocsr") and hasattr(X, "nnz"):  # scipy.sparse, without importing it
        raise TypeError(
            f"{name} is a sparse matrix of {getattr(X, 'dtype', 'numbers')} (a vectorizer's "
            "output?); skbert estimators take the texts themselves: a 1-D collection of str "
            "or a 2-column array of sentence pairs."
        )
    if X is None or not hasattr(X, "__iter__") and not hasattr(X, "__len__"):
        raise TypeError(
            f"{name} must be a 1-D collection of texts or a 2-column array of sentence pairs, "
            f"got {type(X).__name__}."
        )


def _check_encodable(columns, pairs: bool, name: str) -> None:
    """Raise if a text cannot be encoded as UTF-8 (it holds a lone surrogate, ``"\\ud800"``).

    All texts are encoded once, joined; the culprit is searched for only when that fails.
    """
    try:
        "".join("".join(column) for column in columns).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    for j, column in enumerate(columns):
        for i, text in enumerate(column):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                where = f"[{i}, {j}]" if pairs else f"[{i}]"
                raise ValueError(
                    f"{name}{where} cannot be encoded as UTF-8: it holds a lone surrogate "
                    f"{text[exc.start]!r} at character {exc.start} ({text!r:.60}), half of a "
                    "UTF-16 pair that is no character. It usually comes from a wrong decoding; "
                    "fix that, or replace them: text.encode('utf-8', 'replace').decode()."
                ) from None


def check_texts(X, name: str = "X"):
    """Validate texts or sentence pairs.

    Parameters
    ----------
    X : 1-D iterable of str, or 2-D array-like of str with 1 or 2 columns
        Texts, or sentence pairs (2 columns). pandas Series and DataFrames are accepted.
    name : str, default="X"
        The parameter's name, for the error messages (``X[3] is missing``).

    Returns
    -------
    first : list of str
        The texts, or the first sentence of each pair.
    second : list of str or None
        The second sentence of each pair, or None for single texts.

    Raises
    ------
    TypeError
        If X is a bare string, a mapping (its keys would be read), a set (it has no order),
        or an item is not a str.
    ValueError
        If X is empty, an item is missing (None, NaN), a text cannot be encoded as UTF-8 (a
        lone surrogate) or X has the wrong shape.
    """
    _check_container(X, name)
    rows, width = _to_rows(X, name)
    if not rows:
        if isinstance(X, Iterator):
            raise ValueError(
                f"{name} is an iterator with nothing left to read ({type(X).__name__}); a "
                f"generator is read once, so pass list({name}) where it is read again."
            )
        raise ValueError(f"{name} is empty; it must contain at least one text.")
    if width is None:
        first = [_check_item(row, i, name, "", X) for i, row in enumerate(rows)]
        _check_encodable([first], pairs=False, name=name)
        return first, None
    if width not in (1, 2):
        raise ValueError(
            f"{name} has {width} columns; expected 1 column of texts or 2 columns of sentence "
            "pairs."
        )
    columns = []
    for j in range(width):
        hint = _pairs_hint(X, name, j) if width == 2 else ""
        columns.append([_check_item(row[j], (i, j), name, hint, X) for i, row in enumerate(rows)])
    _check_encodable(columns, pairs=True, name=name)
    return columns[0], (columns[1] if width == 2 else None)


def check_layers(layer, n_hidden_states: int) -> tuple:
    """Normalise the ``layer`` parameter to a tuple of indices into the hidden states.

    Parameters
    ----------
    layer : int or tuple of int
        0 is the embedding output, -1 the last layer. numpy integers (as
        ``GridSearchCV(..., {"layer": np.arange(1, 3)})`` gives) and lists are accepted.
    n_hidden_states : int
        Number of hidden states the encoder returns (its layers + 1).

    Returns
    -------
    tuple of int
        Non-negative indices, in the order given.

    Raises
    ------
    TypeError
        If ``layer`` is not an int or a tuple (or list) of ints.
    ValueError
        If ``layer`` is empty or an index is out of range for this model.
    """
    if isinstance(layer, bool) or not isinstance(layer, (numbers.Integral, tuple, list)):
        raise TypeError(f"layer={layer!r} must be an int or a tuple of ints.")
    layers = (layer,) if isinstance(layer, numbers.Integral) else tuple(layer)
    if not layers:
        raise ValueError(f"layer={layer!r} is empty; give an int or a non-empty tuple of ints.")
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


def check_kernel_sizes(value, name: str = "cnn_kernel_sizes") -> tuple:
    """Check the kernel sizes of a CNN pooling and return them as a tuple of ints.

    Parameters
    ----------
    value : tuple or list of int
        Kernel widths in tokens, each at least 1 (numpy integers accepted, bools refused).
    name : str, default="cnn_kernel_sizes"
        The parameter's name, for the error message.

    Returns
    -------
    tuple of int
        The sizes as Python ints, in the order given.

    Raises
    ------
    TypeError
        If ``value`` is not a tuple or list, or a size is not an int.
    ValueError
        If ``value`` is empty or a size is below 1.
    """
    if not isinstance(value, (tuple, list)):
        raise TypeError(
            f"{name}={value!r} must be a tuple or list of ints (kernel widths in tokens), "
            f"not {_a(type(value).__name__)}; e.g. (1, 3, 5)."
        )
    if not value:
        raise ValueError(f"{name}={value!r} is empty; give at least one kernel width, e.g. (3,).")
    for size in value:
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise TypeError(
                f"{name}={value!r} holds {size!r}, {_a(type(size).__name__)}; every kernel width "
                "must be an int >= 1."
            )
        if size < 1:
            raise ValueError(
                f"{name}={value!r} holds {size!r}; every kernel width must be an int >= 1."
            )
    return tuple(int(size) for size in value)

"""Checks of the targets ``y``: class labels, multi-label indicators, similarity scores and
regression targets.

Each check gives the error scikit-learn's own estimators and metrics give (or a clearer one that
names the position), instead of a raw comparison error or a model that learned nothing. Used by
:class:`~skbert.BertTextClassifier`, :class:`~skbert.BertTextRegressor` and
:class:`~skbert.BertSentenceTransformer` before they train (or score);
:func:`check_validation_split` checks the ``early_stopping`` split of ``y`` before it is drawn.
"""

from __future__ import annotations

import decimal
import math
import numbers
import warnings

import numpy as np
from scipy.sparse import issparse
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import type_of_target

from .._core.messages import user_stacklevel
from .label_types import (
    read_as_unknown,
    refuse_object_indicator,
    refuse_object_numbers,
    refuse_unknown_labels,
)
from .validation import pandas_missing

__all__ = [
    "check_class_labels",
    "check_gold_scores",
    "check_regression_targets",
    "check_scores",
    "check_validation_split",
    "holds_scores",
    "refuse_non_finite",
    "squares_hold",
    "standardisation",
]

_MULTILABEL_SHAPES = (
    "y takes 1-D labels (one per sample) or, for multi-label, a 2-D binary indicator matrix "
    "(one column per label, values 0/1). For lists of label sets, make that matrix with "
    "sklearn.preprocessing.MultiLabelBinarizer: y = MultiLabelBinarizer().fit_transform(y)."
)


def _single_target_shapes(estimator: str) -> str:
    return (
        f"{estimator} takes a 1-D y: one class label or similarity score per sample. "
        "Multi-label targets (a set of labels per text) train BertTextClassifier, as a 2-D "
        "binary indicator matrix (sklearn.preprocessing.MultiLabelBinarizer makes one)."
    )


def _describe_item(item) -> str:
    if isinstance(item, (str, bytes)) or not hasattr(item, "__len__"):
        return f"the single value {item!r}"
    return f"a {type(item).__name__} of length {len(item)}"


def _first_mismatch(items, path: tuple):
    """Positions of the first two items of one level that differ in length, or None."""
    try:
        items = list(items)
    except TypeError:
        return None
    lengths = {}
    for i, item in enumerate(items):
        size = None if isinstance(item, (str, bytes)) or not hasattr(item, "__len__") else len(item)
        lengths.setdefault(size, i)
        if len(lengths) > 1:
            (a, b) = lengths.values()
            return (*path, a), items[a], (*path, b), items[b]
    for i, item in enumerate(items):
        if not isinstance(item, (str, bytes)) and hasattr(item, "__len__"):
            found = _first_mismatch(item, (*path, i))
            if found is not None:
                return found
    return None


def _numbers_as_numeric(y: np.ndarray) -> np.ndarray:
    """An object array of numbers of one kind (all bools, or ints and floats) as the numeric
    array numpy makes of them; any other object array as it is.

    A DataFrame of mixed columns gives object arrays (``df.to_numpy()[:, -1]``): its int
    labels were labels of no type (``classes_`` and ``predict`` of object dtype, which
    scikit-learn's scorers refuse) and its float scores were class labels.
    """
    kinds = set()
    for value in y.flat:
        if isinstance(value, (bool, np.bool_)):
            kinds.add(bool)
        elif isinstance(value, numbers.Real) and not isinstance(value, decimal.Decimal):
            kinds.add(numbers.Real)
        else:  # strings, None, pandas' NA, ...: as given, for the checks that name them
            return y
    if len(kinds) > 1:  # bools and numbers: a mix of label types, refused as such
        return y
    numeric = np.asarray(y.tolist())
    return numeric if numeric.dtype.kind in "biuf" else y  # ints past int64 stay objects


def _asarray(y, name: str, shapes: str) -> np.ndarray:
    """``np.asarray(y)``, with an error that says ``y`` is ragged (and what it may be); an
    object array of numbers as a numeric one (:func:`_numbers_as_numeric`)."""
    try:
        raw = np.asarray(y)
        return _numbers_as_numeric(raw) if raw.dtype == object and raw.size else raw
    except ValueError as error:
        found = _first_mismatch(y, ())
        if found is None:
            raise
        pos_a, item_a, pos_b, item_b = found
        where = ", ".join(map(str, pos_a)), ", ".join(map(str, pos_b))
        raise ValueError(
            f"{name} is ragged: {name}[{where[0]}] is {_describe_item(item_a)} but "
            f"{name}[{where[1]}] is {_describe_item(item_b)}. {shapes}"
        ) from error


def _as_array(y, n_samples: int | None, name: str = "y", *, shapes: str) -> np.ndarray:
    if y is None:
        raise ValueError(f"{name} is required: pass one target per sample.")
    if isinstance(y, (str, bytes)):
        raise TypeError(
            f"{name} must be an array-like of targets, got a single {type(y).__name__}."
        )
    if issparse(y):  # e.g. MultiLabelBinarizer(sparse_output=True): one row per sample
        y = y.toarray()
    raw = _asarray(y, name, shapes)
    y = np.asarray(y, dtype=object) if raw.dtype.kind in "OUS" else raw
    if y.ndim == 0:
        raise ValueError(f"{name} must be an array-like of targets, got the scalar {y.item()!r}.")
    if n_samples is not None and y.shape[0] != n_samples:
        raise ValueError(f"X has {n_samples} samples but {name} has {y.shape[0]}.")
    return y


def _undefined(value) -> bool:
    """None, pandas' NA or NaT, NaN or infinite (an int is always finite, however large)."""
    if value is None or pandas_missing(value):
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return not math.isfinite(value)
    return False


def _position(index: int, shape: tuple) -> str:
    """The position ``"i, j"`` in an array of ``shape`` of the ``index``-th value of its ravel."""
    return ", ".join(str(int(p)) for p in np.unravel_index(index, shape))


def _check_defined(y: np.ndarray, name: str) -> None:
    if y.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(y.ravel()))
        first = int(bad[0]) if len(bad) else None
    elif y.dtype == object:
        first = next((i for i, value in enumerate(y.ravel()) if _undefined(value)), None)
    else:  # ints, bools: always defined
        first = None
    if first is None:
        return
    value = y.ravel()[first]
    pos = _position(first, y.shape)
    if value is None or pandas_missing(value):
        raise ValueError(f"{name}[{pos}] is missing ({value!r}); every sample needs a target.")
    shown = float(value)
    if math.isnan(shown):
        raise ValueError(f"{name}[{pos}] is missing ({shown!r}); every sample needs a target.")
    raise ValueError(
        f"{name}[{pos}] is {shown!r}, which is not a class label (nor a similarity score): "
        "every target must be finite. Drop or fix that sample."
    )


def holds_scores(y, estimator: str, *, allow_multilabel: bool = False) -> bool:
    """Whether ``y`` holds floats, which :class:`~skbert.BertSentenceTransformer` takes as
    similarity scores (even whole numbers) for sentence pairs, in a float array or an object
    array of numbers; ints and strings are class labels.

    Raises
    ------
    ValueError
        If ``y`` is ragged (lists of different lengths), with the shapes ``y`` may have (a
        multi-label indicator among them if ``allow_multilabel``).
    """
    shapes = _MULTILABEL_SHAPES if allow_multilabel else _single_target_shapes(estimator)
    return _asarray(y, "y", shapes).dtype.kind == "f"


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


def check_class_labels(
    y, n_samples: int, *, allow_multilabel: bool, estimator: str, scored: bool = True
):
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
    scored : bool, default=True
        Whether scikit-learn's metrics will read these labels (a classifier's ``score`` and
        cross-validation): labels they read as of type ``'unknown'`` (numbers in an object
        array or DataFrame, ``Decimal`` values, ...) are then refused, as those metrics refuse
        them; else numbers in an object array are read as numbers.

    Returns
    -------
    y : ndarray
        1-D labels (object dtype for strings), or float32 indicators.
    multilabel : bool
        Whether ``y`` is an indicator matrix.

    Raises
    ------
    ValueError
        For a wrong length, a ragged y, a missing or infinite label, more than 2 dimensions or
        no column, mixed label types, continuous values, a 2-D y that is not an indicator
        matrix, a single class, or (when ``scored``) labels of type ``'unknown'``.
    """
    shapes = _MULTILABEL_SHAPES if allow_multilabel else _single_target_shapes(estimator)
    given = y
    y = _as_array(y, n_samples, shapes=shapes)
    _check_defined(y, "y")
    expected = "a 1-D array of labels" + (
        " or a 2-D binary indicator matrix (multi-label)" if allow_multilabel else ""
    )
    if y.ndim > 2:
        raise ValueError(f"y has {y.ndim} dimensions (shape {y.shape}); expected {expected}.")
    if y.ndim == 2 and y.shape[1] == 0:  # MultiLabelBinarizer of samples that have no label
        raise ValueError(
            f"y has shape {y.shape}: no column, so no label to learn; expected {expected} "
            "with at least one column (MultiLabelBinarizer gives none when no sample has a label)."
        )
    unknown = scored and read_as_unknown(given, y)  # as score() and cross-validation read it
    if unknown:
        refuse_object_numbers(given, y)
    if y.ndim == 2 and y.shape[1] > 1:
        if scored and allow_multilabel:  # e.g. nullable Int64 columns: an indicator to
            refuse_object_indicator(given)  # type_of_target, objects to the metrics
        if not allow_multilabel:
            hint = (
                " (multi-label y, a 0/1 indicator matrix, trains objective='contrastive')"
                if estimator == "BertSentenceTransformer"
                else ""
            )
            raise ValueError(
                f"y has shape {y.shape}; {estimator} takes a 1-D array of labels here{hint}."
            )
        if type_of_target(y) != "multilabel-indicator" or not np.isin(y, (0, 1)).all():
            raise ValueError(
                "a 2-D y must be a binary indicator matrix (multi-label: one column per "
                "label, values 0/1). For lists of label sets, make that matrix with "
                "sklearn.preprocessing.MultiLabelBinarizer: y = MultiLabelBinarizer()"
                ".fit_transform(y)."
            )
        if unknown:
            refuse_unknown_labels(given, y)
        return y.astype(np.float32), True
    y = _column_to_1d(y)
    _check_one_label_type(y, "y")
    if type_of_target(y) == "continuous":
        raise ValueError(
            f"y holds continuous values; {estimator} needs class labels here (similarity "
            "scores train BertSentenceTransformer's objective='cosine' on sentence pairs, or "
            "BertTextRegressor, a cross-encoder over the pairs)."
        )
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError(
            f"y has a single class ({classes[0]!r}); {estimator} needs samples of at least 2 "
            "classes to learn from."
        )
    if unknown:
        refuse_unknown_labels(given, y)
    return y, False


def refuse_non_finite(y: np.ndarray, what: str) -> None:
    """Raise for the first NaN or infinite value of float ``y``, naming its position."""
    bad = np.flatnonzero(~np.isfinite(y.ravel()))
    if len(bad):
        pos = _position(bad[0], y.shape)
        raise ValueError(f"y[{pos}] is {float(y.ravel()[bad[0]])!r}; {what} must be finite.")


def _column_to_1d(y: np.ndarray) -> np.ndarray:
    """``y`` raveled; a column vector ``(n, 1)`` with scikit-learn's DataConversionWarning
    (as ``column_or_1d(y, warn=True)`` gives: a 1-D y was expected)."""
    if y.ndim == 2:
        warnings.warn(
            "A column-vector y was passed when a 1d array was expected. Please change the "
            "shape of y to (n_samples,), for example using ravel().",
            DataConversionWarning,
            stacklevel=user_stacklevel(),
        )
    return y.ravel()


def _refuse_non_reals(y: np.ndarray, why: str) -> None:
    """Raise for the first value of ``y`` that is missing or not a real number, naming its
    position and ``why`` it must be one (object, string or complex ``y`` only: numeric
    dtypes hold numbers)."""
    if y.dtype.kind not in "OUSc":
        return
    for i, value in enumerate(y.ravel()):
        if value is None or pandas_missing(value):
            raise ValueError(
                f"y[{_position(i, y.shape)}] is missing ({value!r}); every sample needs a target."
            )
        if not isinstance(value, (numbers.Real, decimal.Decimal)):  # read_sql gives Decimal
            raise ValueError(f"y[{_position(i, y.shape)}] is {value!r}, not a real number; {why}.")


def _finite_scores(y, n_samples: int, what: str) -> np.ndarray:
    """``y`` as 1-D finite float64 scores, with errors that say which ``what``."""
    y = _as_array(y, n_samples, shapes=f"y takes 1-D {what}: one per sentence pair.")
    if y.ndim == 2 and y.shape[1] == 1:
        y = _column_to_1d(y)
    if y.ndim != 1:
        raise ValueError(f"{what} y must be 1-D; got shape {y.shape}.")
    _refuse_non_reals(y, f"{what} are numbers")
    y = y.astype(np.float64)
    refuse_non_finite(y, what)
    return y


def check_regression_targets(y, n_samples: int, *, estimator: str) -> np.ndarray:
    """Real-valued targets for a regressor: 1-D, or 2-D with one column per output; finite;
    no output constant. Returned as float64, in the shape given.

    Parameters
    ----------
    y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        The targets given to ``fit``.
    n_samples : int
        Rows of X.
    estimator : str
        Who asks, for the messages.

    Raises
    ------
    ValueError
        For a wrong length, a ragged y, more than 2 dimensions or no column, a value that is
        not a number, NaN, None or infinite (its position is named), or an output that holds
        one value for every sample (nothing to learn, and standardising it would divide by 0).
    """
    shapes = (
        f"{estimator} takes a 1-D y (one real value per sample) or a 2-D y (one column per output)."
    )
    y = _as_array(y, n_samples, shapes=shapes)
    if y.ndim > 2 or (y.ndim == 2 and y.shape[1] == 0):
        raise ValueError(f"y has shape {y.shape}; {shapes}")
    _refuse_non_reals(
        y, f"{estimator} learns real-valued targets (class labels train BertTextClassifier)"
    )
    y = y.astype(np.float64)
    refuse_non_finite(y, "regression targets")
    columns = y.reshape(len(y), -1)
    constant = np.flatnonzero(columns.min(axis=0) == columns.max(axis=0))
    if len(constant):
        raise ValueError(
            f"{_output(y, constant[0])} holds one value ({float(columns[0, constant[0]])!r}) "
            f"for every sample; {estimator} learns from differences between targets, so each "
            "output needs at least two distinct values."
        )
    standardisation(y)  # raises for a spread float64 cannot hold
    return y


def _output(y: np.ndarray, column) -> str:
    """How the messages name output ``column`` of ``y``: ``y`` itself when it is 1-D."""
    return "y" if y.ndim == 1 else f"y[:, {int(column)}]"


def squares_hold(spread) -> np.ndarray:
    """Whether float64 squares of values of this ``spread`` (per output) neither overflow nor
    lose bits: numpy's std and scikit-learn's R^2 are then exact enough as they are."""
    return (np.asarray(spread) > 1e-100) & (np.asarray(spread) < 1e100)


def standardisation(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of each output of real-valued ``y`` (1-D, or 2-D with one
    column per output), computed without overflow or underflow for any finite float64.

    Raises
    ------
    ValueError
        When an output's standard deviation is 0 or not finite in float64 (targets spread
        over more than about 1e308, or by less than about 1e-300), naming the output.
    """
    columns = y.reshape(len(y), -1)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        mean = columns.mean(axis=0)
        if not np.isfinite(mean).all():  # a sum past float64's range: scale first
            peak = np.abs(columns).max(axis=0)
            mean = peak * (columns / peak).mean(axis=0)
        deviations = columns - mean
        reach = np.abs(deviations).max(axis=0)
        # squares of deviations past 1e154 overflow and under 1e-154 lose bits or vanish;
        # there the deviations are scaled to 1 first (elsewhere numpy's std, as it was)
        plain = squares_hold(reach)
        scale = np.where(plain, columns.std(axis=0), reach * (deviations / reach).std(axis=0))
    bad = np.flatnonzero(~(np.isfinite(scale) & (scale > 0)) | ~np.isfinite(mean))
    if len(bad):
        raise ValueError(
            f"{_output(y, bad[0])} spans {float(columns[:, bad[0]].min())!r} to "
            f"{float(columns[:, bad[0]].max())!r}: its standard deviation is not a positive "
            "float64, so the targets cannot be standardised; rescale y (for example with "
            "sklearn.compose.TransformedTargetRegressor)."
        )
    return mean, scale


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


def _split_sizes(n_samples: int, fraction: float) -> tuple[int, int]:
    """(train, validation) sizes, as :func:`sklearn.model_selection.train_test_split` draws."""
    n_validation = math.ceil(fraction * n_samples)
    return n_samples - n_validation, n_validation


def _fits(n_samples: int, fraction: float, n_classes: int) -> bool:
    n_train, n_validation = _split_sizes(n_samples, fraction)
    return n_train >= n_classes and n_validation >= n_classes


def _fraction_that_fits(n_samples: int, n_classes: int, *, smallest: bool) -> float | None:
    """A round ``validation_fraction`` at the edge of those whose split fits, or None."""
    edge = (n_classes if smallest else n_samples - n_classes) / n_samples
    rounded = (math.ceil if smallest else math.floor)(round(edge * 100, 6)) / 100
    for fraction in (round(edge, 3), rounded, edge):
        if 0 < fraction < 1 and _fits(n_samples, fraction, n_classes):
            return fraction
    return None


def _samples_that_fit(fraction: float, n_classes: int) -> int:
    """The fewest samples whose split by ``fraction`` holds every class on both sides."""
    n = max(2 * n_classes, math.floor((n_classes - 1) / fraction) + 1)
    n = max(n, math.ceil(n_classes / (1 - fraction)))
    while n > 2 * n_classes and _fits(n - 1, fraction, n_classes):  # bounds rounded up a float
        n -= 1  # error: e.g. 1 - 0.9 is 0.0999..., so 2 / (1 - 0.9) is 20.000000000000004
    while not _fits(n, fraction, n_classes):
        n += 1
    return n


def check_validation_split(y: np.ndarray, validation_fraction: float, *, multilabel: bool):
    """That ``early_stopping`` can hold out ``validation_fraction`` of ``y``.

    The split is :func:`sklearn.model_selection.train_test_split` (stratified for single-label
    y); this checks its conditions, in its order, before it is drawn, with errors that name
    ``validation_fraction`` and what to change instead of scikit-learn's internal ``test_size``.

    Parameters
    ----------
    y : ndarray
        Targets as :func:`check_class_labels` returns them.
    validation_fraction : float
        Share held out, in (0, 1).
    multilabel : bool
        Whether ``y`` is split without stratification: an indicator matrix, or a regressor's
        real-valued targets.

    Raises
    ------
    ValueError
        If no sample is left to train on, a class has a single sample, or the training or
        validation part is smaller than the number of classes.
    """
    n = len(y)
    n_train, n_validation = _split_sizes(n, validation_fraction)
    held_out = (
        f"early_stopping=True holds out validation_fraction={validation_fraction!r} of the {n} "
        f"samples for validation: ceil({validation_fraction!r} * {n}) = {n_validation}"
    )
    if n_train == 0:
        raise ValueError(
            f"{held_out}, which leaves none to train on. Use a smaller validation_fraction, "
            "more data, or early_stopping=False."
        )
    if multilabel:
        return
    classes, counts = np.unique(y, return_counts=True)
    if counts.min() < 2:
        single = classes[counts < 2].tolist()
        raise ValueError(
            f"early_stopping=True holds out a stratified validation split (validation_fraction="
            f"{validation_fraction!r}), and scikit-learn's stratified split needs at least 2 "
            f"samples of every class; y has a single sample of {single}. Add samples of "
            f"{'that class' if len(single) == 1 else 'those classes'}, or use "
            "early_stopping=False."
        )
    n_classes = len(classes)
    if n_train >= n_classes and n_validation >= n_classes:
        return
    if n_validation < n_classes:
        problem = (
            f"{held_out}, fewer than the {n_classes} classes of y; scikit-learn's stratified "
            "split holds out at least as many samples as there are classes"
        )
        fraction = _fraction_that_fits(n, n_classes, smallest=True)
        larger_or_smaller = f"a larger validation_fraction (e.g. {fraction!r}, which holds out"
    else:
        problem = (
            f"{held_out}, which leaves {n_train} to train on, fewer than the {n_classes} "
            "classes of y; scikit-learn's stratified split keeps at least as many samples as "
            "there are classes"
        )
        fraction = _fraction_that_fits(n, n_classes, smallest=False)
        larger_or_smaller = f"a smaller validation_fraction (e.g. {fraction!r}, which holds out"
    options = []
    if fraction is not None:  # every class has 2 samples, so k / n fits (but for rounding)
        options.append(f"{larger_or_smaller} {_split_sizes(n, fraction)[1]})")
    more = _samples_that_fit(validation_fraction, n_classes)
    options += [
        f"more data (at least {more} samples with validation_fraction={validation_fraction!r})",
        "early_stopping=False",
    ]
    raise ValueError(f"{problem}. Use {', '.join(options[:-1])}, or {options[-1]}.")

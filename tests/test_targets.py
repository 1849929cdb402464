"""Checks of the targets (skbert/_estimator/targets.py): errors that name the position of a bad
target, say what ``y`` may be, and name ``validation_fraction`` when early stopping's split is
too small (issue 27)."""

import itertools
import re
import warnings
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from sklearn.exceptions import DataConversionWarning
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MultiLabelBinarizer
from sklearn.utils.multiclass import type_of_target

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._estimator.objectives import resolve_objective
from skbert._estimator.targets import (
    check_class_labels,
    check_gold_scores,
    check_scores,
    check_validation_split,
    holds_scores,
)

TEXTS = ["great film", "a good movie", "bad dog", "the cat", "not good", "love it"]
PAIRS = [(a, b) for a, b in zip(TEXTS, TEXTS[::-1], strict=True)]
FAST = {"device": "cpu", "batch_size": 4, "max_epochs": 1, "random_state": 0}


def labels(**kw):
    return check_class_labels(kw.pop("y"), kw.pop("n", 6), estimator="BertTextClassifier", **kw)


# ---------------------------------------------------------------- missing and infinite targets
@pytest.mark.parametrize("allow_multilabel", [True, False])
@pytest.mark.parametrize(
    "y", [[0.0, 1.0, np.nan, 1.0], [0, 1, None, 1], np.array(["a", "b", np.nan, "a"], dtype=object)]
)
def test_missing_label_names_the_position(y, allow_multilabel):
    with pytest.raises(ValueError, match=r"^y\[2\] is missing \((nan|None)\); every sample needs"):
        labels(y=y, n=4, allow_multilabel=allow_multilabel)


@pytest.mark.parametrize("dtype", ["string", object, "Int64"])
def test_pandas_missing_label_is_missing_not_a_type(dtype):
    """pandas' NA (a StringDtype or nullable-int column) is a missing label, not a mix of
    label types whose suggested fix would make "<NA>" a class."""
    values = ["a", "b", pd.NA, "a"] if dtype != "Int64" else [0, 1, pd.NA, 1]
    y = pd.Series(values, dtype=dtype)
    shown = "nan" if dtype == "Int64" else "<NA>"  # a nullable int column reads as floats
    with pytest.raises(ValueError, match=rf"^y\[2\] is missing \({shown}\); every sample"):
        labels(y=y, n=4, allow_multilabel=False)


def test_a_column_vector_y_is_raveled_with_sklearns_warning():
    with pytest.warns(DataConversionWarning, match="column-vector y"):
        y, multilabel = labels(y=np.array([[0], [1], [0], [1]]), n=4, allow_multilabel=True)
    assert not multilabel and y.tolist() == [0, 1, 0, 1]
    with pytest.warns(DataConversionWarning, match="column-vector y"):
        assert check_scores(np.array([[0.5], [2.0]]), 2).tolist() == [0.5, 2.0]


def test_sparse_indicator_is_the_dense_one():
    dense = np.array([[1, 0], [0, 1], [1, 1], [0, 0]])
    y, multilabel = labels(y=sparse.csr_matrix(dense), n=4, allow_multilabel=True)
    assert multilabel
    np.testing.assert_array_equal(y, dense)


@pytest.mark.parametrize("inf", [np.inf, -np.inf, float("inf")])
@pytest.mark.parametrize("dtype", [float, object, np.float32])
def test_infinite_label_names_the_position_and_says_it_is_no_label(inf, dtype):
    y = np.array([0, 1, 1, inf], dtype=dtype)
    with pytest.raises(ValueError, match=r"^y\[3\] is -?inf, which is not a class label \(nor a "):
        labels(y=y, n=4, allow_multilabel=True)


def test_infinite_indicator_names_row_and_column():
    y = np.array([[0, 1], [1, np.inf], [1, 0]])
    with pytest.raises(ValueError, match=r"^y\[1, 1\] is inf, .*must be finite"):
        labels(y=y, n=3, allow_multilabel=True)


def test_big_ints_are_finite_labels():
    y = np.array([10**400, 1] * 3, dtype=object)
    assert len(labels(y=y, allow_multilabel=False, scored=False)[0]) == 6
    with pytest.raises(ValueError, match=r"^y holds int values past int64 .*y\.astype\(str\)"):
        labels(y=y, allow_multilabel=False)  # scikit-learn's metrics cannot read them


def test_scores_name_nan_and_inf_positions():
    with pytest.raises(ValueError, match=r"^y\[1\] is inf; similarity scores must be finite"):
        check_scores([0.0, np.inf, 1.0], 3)
    with pytest.raises(ValueError, match=r"^y\[0\] is nan; gold scores must be finite"):
        check_gold_scores([np.nan, 1.0], 2)
    with pytest.raises(ValueError, match=r"^y\[1\] is 'high', not a real number; gold scores"):
        check_gold_scores([4.5, "high"], 2)
    with pytest.raises(ValueError, match=r"^y\[0\] is missing \(None\)"):
        check_scores([None, 1.0], 2)


# ------------------------------------------------------------------------------ ragged targets
RAGGED = [["a"], ["a", "b"], []]


def test_ragged_label_sets_point_to_the_indicator_matrix():
    with pytest.raises(ValueError) as info:
        labels(y=RAGGED, n=3, allow_multilabel=True)
    message = str(info.value)
    assert message.startswith("y is ragged: y[0] is a list of length 1 but y[1] is a list of")
    assert "1-D labels" in message and "2-D binary indicator matrix" in message
    assert "sklearn.preprocessing.MultiLabelBinarizer" in message


def test_ragged_is_found_deeper_and_next_to_single_values():
    with pytest.raises(ValueError, match=r"^y is ragged: y\[0\] is the single value .a. but"):
        labels(y=["a", ["a", "b"]], n=2, allow_multilabel=True)
    with pytest.raises(ValueError, match=r"^y is ragged: y\[0, 0\] is a list of length 1 but"):
        labels(y=[[["a"], ["b", "c"]], [["a"], ["b"]]], n=2, allow_multilabel=True)


def test_ragged_without_multilabel_names_the_estimator_and_the_classifier():
    for check in (
        lambda: check_class_labels(RAGGED, 3, allow_multilabel=False, estimator="Est"),
        lambda: holds_scores(RAGGED, "Est"),
    ):
        with pytest.raises(ValueError, match=r"^y is ragged: .*Est takes a 1-D y.*TextClassifier"):
            check()
    with pytest.raises(ValueError, match=r"^y is ragged: .*y takes 1-D gold scores"):
        check_gold_scores([[1.0], [1.0, 2.0]], 2)


def test_label_sets_of_one_length_are_no_indicator_matrix():
    with pytest.raises(ValueError, match=r"binary indicator matrix .*MultiLabelBinarizer"):
        labels(y=[["a", "b"], ["b", "c"], ["a", "c"]], n=3, allow_multilabel=True)


def test_holds_scores():
    assert holds_scores([0.5, 1.0], "Est") and holds_scores(np.array([1.0, 2.0]), "Est")
    assert not holds_scores([0, 1], "Est") and not holds_scores(["a", "b"], "Est")


@pytest.mark.parametrize(
    "y, kind",
    [
        (np.array([1, 0, 1, 2, 0, 1], dtype=object), "int"),
        (pd.Series([1, 0, 1, 2, 0, 1], dtype=object), "int"),
        (np.array([True, False] * 3, dtype=object), "bool"),
        (np.array([1.0, 0.0] * 3, dtype=object), "int"),
        (np.array([[1, 0], [0, 1]] * 3, dtype=object), "int"),
    ],
)
def test_labels_of_object_dtype_holding_numbers_are_refused_with_the_cast(y, kind):
    # df.to_numpy() of mixed columns: fitted, then score() and every CV split failed
    with pytest.raises(ValueError, match=rf"dtype object and holds numbers .*y\.astype\({kind}\)"):
        labels(y=y, allow_multilabel=True)


def test_numbers_in_object_arrays_are_read_as_numbers():
    scores = np.array([4.2, 1.0, 3.5], dtype=object)
    assert holds_scores(scores, "Est") and check_scores(scores, 3).dtype == np.float64
    with pytest.raises(ValueError, match="y holds continuous values"):
        labels(y=scores, n=3, allow_multilabel=False)
    category = pd.Series([1, 0, 1]).astype("category")  # no object array: labels as before
    np.testing.assert_array_equal(labels(y=category, n=3, allow_multilabel=False)[0], [1, 0, 1])
    assert (
        labels(y=np.array(["a", "b", "a"], dtype=object), n=3, allow_multilabel=False)[0].dtype
        == object
    )
    past_int64 = np.array([2**70, 1], dtype=object)
    read = labels(y=past_int64, n=2, allow_multilabel=False, scored=False)[0]
    assert read.dtype == object


OBJECT_INTS = pd.Series([1, 0] * 3, dtype=object)


@pytest.mark.parametrize(
    "y",
    [
        pd.DataFrame({"a": [0, 1, 1, 0, 1, 0], "b": [1, 0, 1, 0, 0, 1]}).astype("Int64"),
        pd.DataFrame({"a": [0, 1, 1, 0, 1, 0], "b": [True, False] * 3}),
    ],
    ids=["nullable Int64", "int and bool columns"],
)
def test_an_indicator_the_metrics_read_as_objects_is_refused(y):
    """An indicator to type_of_target, objects to accuracy_score: the fit trained, then
    score() failed and cross-validation scored NaN."""
    assert type_of_target(y) == "multilabel-indicator"
    with pytest.raises(ValueError, match=r"^y is a 2-D indicator .*dtype object.*astype\(int\)"):
        labels(y=y, allow_multilabel=True)
    labels(y=y.astype(int), allow_multilabel=True)
    if (y.dtypes == "Int64").all():  # a transformer only trains on them
        labels(y=y, allow_multilabel=True, scored=False)


@pytest.mark.parametrize(
    "y, match",
    [
        (
            OBJECT_INTS.to_frame("label"),
            r"^y is a DataFrame .*dtype object .*y\.astype\(int\) \(or y",
        ),
        (
            pd.DataFrame({"a": OBJECT_INTS, "b": 1 - OBJECT_INTS.astype(int)}).astype(object),
            r"^y is a DataFrame .*dtype object .*y\.to_numpy\(dtype=int\)",
        ),
        (
            np.array([Decimal(1), Decimal(0)] * 3, dtype=object),
            r"^y holds Decimal values \(as read_sql gives .*\) in an object array, .*"
            r"type 'unknown'.*pass y\.astype\(int\) instead\.$",
        ),
        (
            pd.DataFrame({"a": [Decimal(1), Decimal(0)] * 3}),
            r"^y holds Decimal values .* in a DataFrame of dtype object.*to_numpy\(dtype=int\)",
        ),
        ([Decimal("0.5"), Decimal(1)] * 3, r"in a list, .*\[str\(label\) for label in y\]"),
        ([Fraction(1), Fraction(0)] * 3, r"^y holds Fraction values in a list.*\[int\(label\)"),
    ],
)
def test_labels_scikit_learns_metrics_cannot_read_are_refused(y, match):
    """score() and cross-validation read y as passed: of type 'unknown', they failed after
    the fit (and a grid search scored NaN), where LogisticRegression refuses it up front."""
    assert type_of_target(y) == "unknown"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataConversionWarning)  # a 1-column DataFrame
        with pytest.raises(ValueError, match=match):
            labels(y=y, allow_multilabel=True)
        labels(y=y, allow_multilabel=True, scored=False)  # a transformer only trains on them


@pytest.mark.parametrize(
    "y, match",
    [
        ([Decimal(1)] * 6, r"^y has a single class \(Decimal\('1'\)\)"),
        ([Decimal(1), "a"] * 3, r"^y mixes label types"),
        ([Decimal(1), None] * 3, r"^y\[1\] is missing \(None\)"),
        (pd.DataFrame({"a": [0.5, 1.5] * 3}, dtype=object), r"^y holds continuous values"),
    ],
)
def test_unknown_labels_keep_the_more_specific_messages(y, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataConversionWarning)
        with pytest.raises(ValueError, match=match):
            labels(y=y, allow_multilabel=False)


def test_classifier_refuses_decimal_labels_before_training(tiny_bert):
    clf = BertTextClassifier(tiny_bert, **FAST)
    with pytest.raises(ValueError, match=r"^y holds Decimal values"):
        clf.fit(TEXTS, np.array([Decimal(0), Decimal(1)] * 3, dtype=object))
    assert not hasattr(clf, "network_")


@pytest.mark.parametrize("allow_multilabel", [True, False])
@pytest.mark.parametrize(
    "y",
    [
        MultiLabelBinarizer().fit_transform([[] for _ in TEXTS]),  # no text has a label
        pd.DataFrame({"a": [0, 1] * 3})[[]],
    ],
)
def test_y_without_a_column_is_refused(y, allow_multilabel):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "column-vector y" warning first
        with pytest.raises(ValueError, match=r"^y has shape \(6, 0\): no column, .*Binarizer"):
            labels(y=y, allow_multilabel=allow_multilabel)


@pytest.mark.parametrize("objective", ["softmax", "auto"])
def test_objective_reads_whole_floats_of_an_object_array_as_classes(objective):
    # np.isfinite raised a TypeError for the object array
    y = np.array([0.0, 1.0, 2.0] * 2, dtype=object)
    assert resolve_objective(objective, "full", None, y) == "softmax"
    with pytest.raises(ValueError, match="objective='softmax' needs class labels"):
        resolve_objective(objective, "full", None, np.array([0.5, 1.2] * 3, dtype=object))


def test_a_transformer_reads_object_numbers_as_labels(tiny_bert):
    # its labels only train (no score()): refusing them, as the classifier does, broke fits
    y = np.array([1, 0, 2, 1, 0, 2], dtype=object)
    read, _ = check_class_labels(y, 6, allow_multilabel=False, estimator="E", scored=False)
    assert read.dtype == np.int64
    est = BertSentenceTransformer(tiny_bert, fine_tune="full", objective="softmax", **FAST)
    assert est.fit(TEXTS, y).classes_.tolist() == [0, 1, 2]


def test_sentence_pairs_with_object_scores_train_the_cosine_objective(tiny_bert):
    X = np.array(PAIRS, dtype=object)
    y = np.array([4.2, 1.0, 3.5, 0.4, 2.8, 5.0], dtype=object)
    est = BertSentenceTransformer(tiny_bert, fine_tune="full", **FAST).fit(X, y)
    assert est.objective_ == "cosine"  # was "pair-softmax" over 6 classes


# ------------------------------------------------------------------ early stopping's split
def test_validation_split_smaller_than_the_classes_says_what_to_change():
    y = np.array([0, 1] * 4)
    with pytest.raises(ValueError) as info:
        check_validation_split(y, 0.1, multilabel=False)
    message = str(info.value)
    assert message.startswith(
        "early_stopping=True holds out validation_fraction=0.1 of the 8 samples for validation: "
        "ceil(0.1 * 8) = 1, fewer than the 2 classes of y"
    )
    assert "a larger validation_fraction (e.g. 0.25, which holds out 2)" in message
    assert "more data (at least 11 samples with validation_fraction=0.1)" in message
    assert message.endswith("or early_stopping=False.")
    check_validation_split(y, 0.25, multilabel=False)
    check_validation_split(np.array([0, 1] * 6)[:11], 0.1, multilabel=False)


def test_validation_split_leaving_too_few_to_train_on():
    y = np.array([0, 1, 2] * 3)
    with pytest.raises(
        ValueError,
        match=r"= 8, which leaves 1 to train on, fewer than the 3 classes .*"
        r"a smaller validation_fraction \(e\.g\. 0\.66, which holds out 6\)",
    ):
        check_validation_split(y, 0.8, multilabel=False)
    with pytest.raises(ValueError, match=r"= 9, which leaves none to train on.*smaller valid"):
        check_validation_split(y, 0.95, multilabel=True)


def test_validation_split_class_of_one_sample():
    y = np.array(["a"] * 7 + ["b"])
    with pytest.raises(
        ValueError,
        match=r"at least 2 samples.*a single sample of \['b'\]\. Add "
        r"samples of that class, or use early_stopping=False",
    ):
        check_validation_split(y, 0.5, multilabel=False)


def test_validation_split_refuses_exactly_what_train_test_split_refuses():
    """The check mirrors scikit-learn's conditions: never refuses a split it would draw."""
    for n, n_classes, fraction in itertools.product(
        range(2, 16), range(1, 5), [0.01, 0.1, 0.125, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.7, 0.9, 0.99]
    ):
        y = np.arange(n) % n_classes
        for multilabel in (False, True):
            try:
                train_test_split(
                    np.arange(n), test_size=fraction, stratify=None if multilabel else y
                )
            except ValueError:
                with pytest.raises(ValueError, match="early_stopping"):
                    check_validation_split(y, fraction, multilabel=multilabel)
            else:
                check_validation_split(y, fraction, multilabel=multilabel)


def _stratified_split_fits(n, n_classes, fraction):
    y = np.arange(n) % n_classes
    try:
        train_test_split(np.arange(n), test_size=fraction, stratify=y, random_state=0)
    except ValueError:
        return False
    return True


FRACTIONS = [0.01, 0.05, 0.1, 0.125, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]


@pytest.mark.parametrize("n_classes", [2, 3, 4, 7])
def test_more_data_suggestion_is_the_fewest_samples_that_split(n_classes):
    """'at least N samples' is N that train_test_split splits, and N - 1 it does not (the
    split fits more samples once it fits: N is the fewest). It said 21 for 2 classes at 0.9,
    where 20 split (1 - 0.9 is 0.0999... in floats)."""
    for fraction in FRACTIONS:
        found = None
        for n in itertools.count(2 * n_classes):  # 2 samples a class: the fewest to stratify
            try:
                check_validation_split(np.arange(n) % n_classes, fraction, multilabel=False)
            except ValueError as error:  # "none to train on" suggests no figure: one more
                found = re.search(r"at least (\d+) samples", str(error))
            if found is not None or _stratified_split_fits(n, n_classes, fraction):
                break
        if found is None:  # it split before any error gave a figure
            continue
        more = int(found.group(1))
        assert _stratified_split_fits(more, n_classes, fraction), (fraction, more)
        assert not _stratified_split_fits(more - 1, n_classes, fraction), (fraction, more)
        check_validation_split(np.arange(more) % n_classes, fraction, multilabel=False)


# --------------------------------------------------------------------- through the estimators
@pytest.mark.parametrize(
    ("y", "match"),
    [
        ([0, 1, np.nan, 1, 0, 1], r"y\[2\] is missing \(nan\)"),
        ([0, 1, np.inf, 1, 0, 1], r"y\[2\] is inf, which is not a class label"),
        (RAGGED * 2, r"y is ragged: .*MultiLabelBinarizer"),
    ],
)
def test_classifier_fit_names_the_bad_target(tiny_bert, y, match):
    with pytest.raises(ValueError, match=match):
        BertTextClassifier(tiny_bert, **FAST).fit(TEXTS, y)


def test_classifier_early_stopping_on_too_few_samples(tiny_bert):
    clf = BertTextClassifier(tiny_bert, early_stopping=True, **FAST)
    with pytest.raises(
        ValueError,
        match=r"validation_fraction=0\.1 of the 8 samples.*fewer than "
        r"the 2 classes.*larger validation_fraction.*early_stopping=False",
    ):
        clf.fit(TEXTS + TEXTS[:2], [0, 1] * 4)
    assert not hasattr(clf, "network_")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.set_params(validation_fraction=0.25).fit(TEXTS + TEXTS[:2], [0, 1] * 4)
    assert len(clf.validation_scores_) >= 1


@pytest.mark.parametrize(
    ("pairs", "objective"),
    [(False, "auto"), (False, "softmax"), (True, "auto"), (True, "pair-softmax"), (True, "cosine")],
)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_sentence_fit_names_the_bad_target(tiny_bert, pairs, objective, bad):
    X = PAIRS if pairs else TEXTS
    est = BertSentenceTransformer(tiny_bert, fine_tune="full", objective=objective, **FAST)
    scores = pairs and objective in ("auto", "cosine")  # float y on pairs: similarity scores
    if scores:
        match = rf"y\[2\] is {bad}; similarity scores must be finite"
    elif np.isnan(bad):
        match = r"y\[2\] is missing \(nan\); every sample needs a target"
    else:
        match = r"y\[2\] is inf, which is not a class label \(nor a similarity score\)"
    with pytest.raises(ValueError, match=match):
        est.fit(X, [0, 1, bad, 1, 0, 1])


@pytest.mark.parametrize("X", [TEXTS[:3], PAIRS[:3]])
def test_sentence_fit_and_score_refuse_ragged_y(tiny_bert, X):
    est = BertSentenceTransformer(tiny_bert, fine_tune="full", **FAST)
    with pytest.raises(ValueError, match=r"^y is ragged: .*BertSentenceTransformer takes a 1-D y"):
        est.fit(X, RAGGED)
    frozen = BertSentenceTransformer(tiny_bert, **FAST).fit(TEXTS)
    with pytest.raises(ValueError, match=r"^y is ragged: .*gold scores"):
        frozen.score(PAIRS[:3], [[1.0], [1.0, 2.0], []])

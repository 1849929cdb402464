import numpy as np
import pandas as pd
import pytest

from skbert._validation import check_texts


def test_list_of_texts():
    assert check_texts(["a", "", "b"]) == (["a", "", "b"], None)


@pytest.mark.parametrize(
    "X",
    [
        np.array(["a", "b"], dtype=object),
        np.array(["a", "b"]),
        pd.Series(["a", "b"]),
        np.array([["a"], ["b"]], dtype=object),
        pd.DataFrame({"text": ["a", "b"]}),
        ("a", "b"),
        (t for t in ["a", "b"]),
    ],
)
def test_single_text_containers(X):
    assert check_texts(X) == (["a", "b"], None)


@pytest.mark.parametrize(
    "X",
    [
        [("a", "b"), ("c", "d")],
        np.array([["a", "b"], ["c", "d"]], dtype=object),
        pd.DataFrame({"s1": ["a", "c"], "s2": ["b", "d"]}),
    ],
)
def test_pairs(X):
    assert check_texts(X) == (["a", "c"], ["b", "d"])


def test_bare_string():
    with pytest.raises(TypeError, match=r"single str .*Wrap it in a list"):
        check_texts("a text")


def test_empty():
    with pytest.raises(ValueError, match="empty"):
        check_texts([])


@pytest.mark.parametrize("missing", [None, float("nan"), np.nan, pd.NA])
def test_missing_items_name_the_position(missing):
    with pytest.raises(ValueError, match=r"X\[2\] is missing"):
        check_texts(["a", "b", missing])


def test_missing_in_pair_names_row_and_column():
    with pytest.raises(ValueError, match=r"X\[1, 1\] is missing"):
        check_texts([("a", "b"), ("c", None)])


@pytest.mark.parametrize("bad", [3, 2.5, b"bytes", ["nested"]])
def test_non_string_items_name_the_position(bad):
    with pytest.raises(TypeError, match=r"X\[1\] is a"):
        check_texts(["a", bad])


def test_wrong_width():
    with pytest.raises(ValueError, match="3 columns"):
        check_texts(np.array([["a", "b", "c"]], dtype=object))


def test_ragged_pairs():
    with pytest.raises(ValueError, match="different lengths"):
        check_texts([("a", "b"), ("c",)])


def test_three_dimensions():
    with pytest.raises(ValueError, match="3 dimensions"):
        check_texts(np.empty((2, 2, 2), dtype=object))


def test_nan_detection_does_not_flag_strings():
    assert check_texts(["nan", "None"]) == (["nan", "None"], None)

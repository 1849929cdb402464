"""A DataFrame's column names are recorded by fit (feature_names_in_) and checked by the
predictions: sentence pairs whose columns come in another order, or under other names, would
be read as other texts (they are read by position), and were predicted without a word."""

import pickle

import numpy as np
import pandas as pd
import pytest

import skbert
from skbert import BertTextClassifier, BertTextRegressor

FIRST = ["a good film", "a bad plot", "great cast", "dull story", "fine acting", "awful end"]
SECOND = ["it was fine", "not at all", "loved it", "boring", "quite good", "hated it"]
PAIRS = pd.DataFrame({"premise": FIRST * 2, "hypothesis": SECOND * 2})
LABELS = [1, 0, 1, 0, 1, 0] * 2
TRAIN = dict(max_epochs=1, batch_size=4, random_state=0, device="cpu")


@pytest.fixture(scope="module")
def fitted(tiny_bert):
    return BertTextClassifier(tiny_bert, **TRAIN).fit(PAIRS, LABELS)


def test_fit_records_the_column_names_and_predictions_refuse_others(fitted):
    assert fitted.feature_names_in_.tolist() == ["premise", "hypothesis"]
    expected = fitted.predict_proba(PAIRS)
    swapped = PAIRS[["hypothesis", "premise"]]
    for method in ("predict", "predict_proba", "decision_function", "score"):
        args = (swapped, LABELS) if method == "score" else (swapped,)
        with pytest.raises(ValueError, match=r"in another order.*X\[\['premise', 'hypothesis'\]\]"):
            getattr(fitted, method)(*args)
    renamed = PAIRS.set_axis(["query", "document"], axis=1)
    with pytest.raises(ValueError, match=r"\['query', 'document'\].*under other names"):
        fitted.predict(renamed)
    # what the message advises reads the texts fit's way; lists and arrays by position
    np.testing.assert_array_equal(fitted.predict_proba(swapped[fitted.feature_names_in_]), expected)
    np.testing.assert_array_equal(
        fitted.predict_proba(list(zip(FIRST * 2, SECOND * 2, strict=True))), expected
    )
    np.testing.assert_array_equal(fitted.predict_proba(renamed.to_numpy()), expected)


def test_the_names_survive_pickle_and_save(fitted, tmp_path):
    for copy in (pickle.loads(pickle.dumps(fitted)), skbert.load(fitted.save(tmp_path / "s"))):
        assert copy.feature_names_in_.tolist() == ["premise", "hypothesis"]
        with pytest.raises(ValueError, match="in another order"):
            copy.predict(PAIRS[["hypothesis", "premise"]])


def test_no_names_without_a_frame_of_str_names(tiny_bert):
    regressor = BertTextRegressor(tiny_bert, **TRAIN).fit(PAIRS, np.arange(12.0))
    assert regressor.feature_names_in_.tolist() == ["premise", "hypothesis"]
    with pytest.raises(ValueError, match="in another order"):
        regressor.predict(PAIRS[["hypothesis", "premise"]])
    regressor.fit(PAIRS.to_numpy(), np.arange(12.0))  # a refit on an array forgets them
    assert not hasattr(regressor, "feature_names_in_")
    regressor.predict(PAIRS[["hypothesis", "premise"]])  # nothing to compare with
    numbered = PAIRS.set_axis([0, 1], axis=1)
    assert not hasattr(regressor.fit(numbered, np.arange(12.0)), "feature_names_in_")
    single = BertTextClassifier(tiny_bert, **TRAIN).fit(PAIRS["premise"], LABELS)
    assert not hasattr(single, "feature_names_in_")  # a Series has no columns

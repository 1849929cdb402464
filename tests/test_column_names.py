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


@pytest.mark.parametrize("fine_tune", ["none", "full"])
def test_the_sentence_transformer_records_and_checks_them_too(tiny_bert, fine_tune, tmp_path):
    """BertSentenceTransformer recorded no names: pairs with swapped columns were encoded
    as [CLS] b [SEP] a [SEP] without a word (vectors 0.998 apart), and a Pipeline starting
    with it had no feature_names_in_."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from skbert import BertSentenceTransformer

    est = BertSentenceTransformer(tiny_bert, fine_tune=fine_tune, **TRAIN)
    pipe = make_pipeline(est, LogisticRegression()).fit(PAIRS, LABELS)
    assert pipe.feature_names_in_.tolist() == ["premise", "hypothesis"]
    swapped = PAIRS[["hypothesis", "premise"]]
    with pytest.raises(ValueError, match="in another order"):
        pipe.predict_proba(swapped)
    with pytest.raises(ValueError, match="in another order"):
        est.transform(swapped)
    with pytest.raises(ValueError, match="under other names"):
        est.similarity(PAIRS.set_axis(["query", "document"], axis=1))
    np.testing.assert_array_equal(est.transform(PAIRS), est.transform(PAIRS.to_numpy()))
    loaded = skbert.load(est.save(tmp_path / "saved"))
    assert loaded.feature_names_in_.tolist() == ["premise", "hypothesis"]
    # fitted again on a list: no names recorded, frames read by position
    est.fit(list(zip(FIRST, SECOND, strict=True)), LABELS[:6])
    assert not hasattr(est, "feature_names_in_")
    assert est.transform(swapped).shape == (len(swapped), est.readout_.output_dim)


def test_another_number_of_columns_is_left_to_the_method(tiny_bert):
    """A sentence transformer fitted on one named column compares pairs, and one fitted on
    named pairs encodes single texts: the column check refused both (naming 'other names'
    and suggesting a column selection that the method then refused)."""
    from skbert import BertSentenceTransformer

    est = BertSentenceTransformer(tiny_bert, fine_tune="none").fit(PAIRS[["premise"]])
    assert est.feature_names_in_.tolist() == ["premise"]
    np.testing.assert_array_equal(est.similarity(PAIRS), est.similarity(PAIRS.to_numpy()))
    est.fit(PAIRS)
    single = est.transform(PAIRS[["premise"]])
    np.testing.assert_array_equal(single, est.transform(PAIRS["premise"]))
    with pytest.raises(ValueError, match="under other names"):  # as many columns: checked
        est.transform(PAIRS.set_axis(["query", "document"], axis=1))

"""fit(X, y, sample_weight) of BertTextClassifier and BertTextRegressor: the weights checked,
each row's loss weighted, the early-stopping score weighted as score() weighs it, and the
weights routed through Pipeline and GridSearchCV."""

import numpy as np
import pytest
import sklearn
import torch
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state

from skbert import BertTextClassifier, BertTextRegressor
from skbert._estimator.sample_weights import check_sample_weight

POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
X = np.array(POS + NEG + POS[::-1] + NEG[::-1], dtype=object)
LABELS = np.array(([1] * 5 + [0] * 5) * 2)
RATINGS = np.array([4.5, 4.0, 3.5, 4.2, 4.8, 0.5, 1.0, 1.5, 0.8, 0.2] * 2)
WEIGHTS = np.array([1.0, 2.0, 0.5, 3.0, 0.0] * 4)
FAST = {
    "learning_rate": 5e-3,
    "top_learning_rate": 5e-2,
    "batch_size": 4,
    "max_epochs": 2,
    "device": "cpu",
    "random_state": 0,
}


def outputs(est):
    if isinstance(est, BertTextClassifier):
        return est.predict_proba(X)
    return est.predict(X)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (1.0, r"sample_weight=1.0 is a single value"),
        (np.ones(3), r"sample_weight has shape \(3,\); X has 20 samples"),
        (np.ones((20, 1)), r"sample_weight has shape \(20, 1\)"),
        ([1.0] * 19 + [-1.0], r"sample_weight\[19\] is -1.0; weights must be finite and non-neg"),
        ([1.0, np.nan] + [1.0] * 18, r"sample_weight\[1\] is nan"),
        (["1"] * 5 + ["heavy"] + ["1"] * 14, r"sample_weight\[0\] is '1', a string"),
        (np.array([1.0] * 5 + [None] * 15, dtype=object), r"sample_weight\[5\] is None, not a"),
        (np.zeros(20), r"sample_weight is 0 for every sample"),
    ],
)
def test_weights_are_checked(weights, message):
    with pytest.raises(ValueError, match=message):
        check_sample_weight(weights, 20)


def test_all_equal_weights_are_no_weights():
    assert check_sample_weight(None, 3) is None
    assert check_sample_weight([2, 2, 2], 3) is None
    np.testing.assert_array_equal(check_sample_weight([1, 0, 2], 3), [1.0, 0.0, 2.0])


@pytest.mark.parametrize("cls", [BertTextClassifier, BertTextRegressor])
def test_fit_refuses_bad_weights_before_any_work(cls, tmp_path):
    y = LABELS if cls is BertTextClassifier else RATINGS
    with pytest.raises(ValueError, match="sample_weight has shape"):
        cls(str(tmp_path / "no-model"), **FAST).fit(X, y, sample_weight=np.ones(3))


@pytest.mark.parametrize("cls", [BertTextClassifier, BertTextRegressor])
def test_equal_weights_train_bit_for_bit_as_none(cls, tiny_bert):
    y = LABELS if cls is BertTextClassifier else RATINGS
    plain = cls(tiny_bert, **FAST).fit(X, y)
    weighted = cls(tiny_bert, **FAST).fit(X, y, sample_weight=np.full(len(X), 3.0))
    np.testing.assert_array_equal(outputs(weighted), outputs(plain))


@pytest.mark.parametrize("cls", [BertTextClassifier, BertTextRegressor])
def test_a_sample_weighted_0_is_left_out_bit_for_bit(cls, tiny_bert):
    """Its target changes nothing; other weights change the model."""
    y = LABELS.copy() if cls is BertTextClassifier else RATINGS.copy()
    one = cls(tiny_bert, **FAST).fit(X, y, sample_weight=WEIGHTS)
    left_out = WEIGHTS == 0
    y[left_out] = (1 - y[left_out]) if cls is BertTextClassifier else y[left_out] + 10.0
    other = cls(tiny_bert, **FAST).fit(X, y, sample_weight=WEIGHTS)
    np.testing.assert_array_equal(outputs(other), outputs(one))
    plain = cls(tiny_bert, **FAST).fit(X, y)
    assert not np.array_equal(outputs(plain), outputs(one))


def test_the_loss_weighs_each_row_by_its_class_and_its_own_weight(tiny_bert):
    est = BertTextClassifier(tiny_bert, **FAST, class_weight={0: 1.0, 1: 3.0})
    est.classes_, est.multilabel_ = np.array([0, 1]), False
    rows = np.arange(len(X))
    loss = est._training_loss(LABELS, "cpu", WEIGHTS, rows)
    logits = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    batch = torch.tensor([0, 1, 4, 5, 8, 9])
    value, size = loss(logits, batch)
    each = torch.nn.functional.cross_entropy(
        logits, torch.as_tensor(LABELS[batch]), reduction="none"
    )
    row_weights = np.where(LABELS == 1, 3.0, 1.0) * WEIGHTS
    expected = (each.double() * torch.as_tensor(row_weights[batch])).sum() / (
        6 * row_weights.mean()
    )
    assert size == pytest.approx(6 * row_weights.mean())
    assert float(value) == pytest.approx(float(expected), rel=1e-6)
    multilabel = BertTextClassifier(tiny_bert, **FAST)
    indicator = np.stack([LABELS, 1 - LABELS], axis=1).astype(np.float32)
    multilabel.classes_, multilabel.multilabel_ = np.arange(2), True
    value, size = multilabel._training_loss(indicator, "cpu", WEIGHTS, rows)(logits, batch)
    each = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, torch.as_tensor(indicator[batch]), reduction="none"
    ).mean(dim=1)
    expected = (each.double() * torch.as_tensor(WEIGHTS[batch])).sum() / (6 * WEIGHTS.mean())
    assert float(value) == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("cls", [BertTextClassifier, BertTextRegressor])
def test_early_stopping_scores_as_score_weighs(cls, tiny_bert):
    y = LABELS if cls is BertTextClassifier else RATINGS
    weights = WEIGHTS + 0.25  # every held-out sample counts
    params = {"early_stopping": True, "validation_fraction": 0.4, "n_iter_no_change": 3}
    est = cls(tiny_bert, **{**FAST, "max_epochs": 3}, **params).fit(X, y, sample_weight=weights)
    rows = _held_out(y, stratified=cls is BertTextClassifier)
    expected = est.score(X[rows], y[rows], sample_weight=weights[rows])
    assert est.best_validation_score_ == pytest.approx(expected, abs=1e-12)
    unweighted = est.score(X[rows], y[rows])
    assert expected != unweighted  # the weights matter to this held-out set


def _held_out(y, stratified: bool) -> np.ndarray:
    """The rows fit holds out with validation_fraction=0.4 and random_state=0."""
    seed = int(check_random_state(0).randint(2**31 - 1))
    stratify = LabelEncoder().fit_transform(y) if stratified else None
    return train_test_split(np.arange(len(X)), test_size=0.4, stratify=stratify, random_state=seed)[
        1
    ]


def test_held_out_or_training_samples_all_weighted_0_are_refused(tiny_bert):
    weights = np.ones(len(X))
    weights[_held_out(LABELS, stratified=True)] = 0
    est = BertTextClassifier(tiny_bert, **FAST, early_stopping=True, validation_fraction=0.4)
    with pytest.raises(ValueError, match="held out 8 samples whose sample_weight is 0"):
        est.fit(X, LABELS, sample_weight=weights)
    weights = np.zeros(len(X))
    weights[_held_out(RATINGS, stratified=False)] = 1
    est = BertTextRegressor(tiny_bert, **FAST, early_stopping=True, validation_fraction=0.4)
    with pytest.raises(ValueError, match="sample_weight give every training row weight 0"):
        est.fit(X, RATINGS, sample_weight=weights)


def test_weights_reach_fit_through_pipelines_and_searches(tiny_bert):
    pipe = make_pipeline(BertTextClassifier(tiny_bert, **FAST))
    pipe.fit(X, LABELS, berttextclassifier__sample_weight=WEIGHTS)
    direct = BertTextClassifier(tiny_bert, **FAST).fit(X, LABELS, sample_weight=WEIGHTS)
    np.testing.assert_array_equal(pipe.predict_proba(X), direct.predict_proba(X))
    with sklearn.config_context(enable_metadata_routing=True):
        est = BertTextClassifier(tiny_bert, **FAST).set_fit_request(sample_weight=True)
        est.set_score_request(sample_weight=True)
        search = GridSearchCV(est, {"pooling": ["mean", "cls"]}, cv=2, error_score="raise")
        search.fit(X, LABELS, sample_weight=WEIGHTS + 0.5)
        assert np.isfinite(search.cv_results_["mean_test_score"]).all()


@pytest.mark.parametrize("cls", [BertTextClassifier, BertTextRegressor])
def test_held_out_weights_do_not_scale_the_training_loss(cls, tiny_bert):
    """The loss divided by the mean weight of all rows, held-out ones too: training rows of
    weight 1 with held-out rows of 10 reported a loss 4.6 times smaller (and, gradients
    being clipped, trained another model)."""
    y = LABELS if cls is BertTextClassifier else RATINGS
    rows = _held_out(y, stratified=cls is BertTextClassifier)
    weights = np.ones(len(X))
    weights[rows] = 10.0
    params = {"early_stopping": True, "validation_fraction": 0.4, "n_iter_no_change": 3}
    plain = cls(tiny_bert, **FAST, **params).fit(X, y)
    weighted = cls(tiny_bert, **FAST, **params).fit(X, y, sample_weight=weights)
    np.testing.assert_allclose(weighted.loss_curve_, plain.loss_curve_, rtol=1e-5)
    np.testing.assert_allclose(outputs(weighted), outputs(plain), rtol=0, atol=1e-5)


def test_one_target_value_among_the_weighted_samples_names_the_weights(tiny_bert, tmp_path):
    y = np.array([1.0, 1.0, 1.0, 1.0, 2.0] * 4)
    weights = np.array([1.0, 1.0, 1.0, 1.0, 0.0] * 4)
    with pytest.raises(ValueError, match=r"samples of positive sample_weight hold one value"):
        BertTextRegressor(tiny_bert, **FAST).fit(X, y, sample_weight=weights)

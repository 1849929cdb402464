"""BertTextRegressor on the tiny BERT and ALBERT fixtures, and a cross-encoder on MiniLM."""

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import LONG_TEXT
from scipy.stats import pearsonr, spearmanr
from sklearn.base import clone, is_regressor
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import InvalidParameterError

from skbert import BertTextRegressor
from skbert.metrics import pearson_scorer, spearman_scorer

POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
X = np.array(POS + NEG, dtype=object)
#: a rating that the words decide: high for the positive texts, low for the negative ones
Y = np.array([4.5, 4.0, 3.5, 4.2, 4.8, 0.5, 1.0, 1.5, 0.8, 0.2])
PAIRS = np.array([[a, b] for a, b in zip(POS + NEG, POS[::-1] + POS, strict=True)], dtype=object)

FAST = {"learning_rate": 5e-3, "top_learning_rate": 5e-2, "batch_size": 4, "device": "cpu"}


def make(model, **params):
    return BertTextRegressor(model, **{**FAST, "random_state": 0, **params})


def test_learns_a_rating(tiny_model):
    reg = make(tiny_model, max_epochs=15)
    assert reg.fit(X, Y) is reg
    assert is_regressor(reg)
    # chance (predicting the mean) is R^2 = 0; measured 0.90 (BERT) with this seed
    assert reg.score(X, Y) > 0.6
    assert reg.loss_curve_[-1] < 0.5 * reg.loss_curve_[0]
    assert reg.n_iter_ == 15 and reg.validation_scores_ is None
    predicted = reg.predict(X)
    assert predicted.shape == (10,) and predicted.dtype == np.float64
    assert predicted[:5].mean() > predicted[5:].mean() + 1.0  # in y's units


def test_standardised_targets_learn_alike_in_any_units(tiny_bert):
    small = make(tiny_bert, max_epochs=6).fit(X, Y)
    big_y = 1e6 + 1e3 * Y
    big = make(tiny_bert, max_epochs=6).fit(X, big_y)
    assert small.target_mean_ == pytest.approx([Y.mean()]) and small.target_scale_ > 0
    assert big.target_mean_ == pytest.approx([big_y.mean()])
    assert big.score(X, big_y) == pytest.approx(small.score(X, Y), abs=1e-6)
    np.testing.assert_allclose(big.predict(X), 1e6 + 1e3 * small.predict(X), rtol=1e-9)
    # the network trained on the same standardised targets: the same loss curve
    np.testing.assert_allclose(big.loss_curve_, small.loss_curve_, rtol=1e-5)


@pytest.mark.parametrize("scale", [1e160, 1e-170])
def test_targets_past_the_squares_range_of_float64_learn_alike(tiny_bert, scale):
    # numpy's std squares the deviations: inf at 1e160 (predict gave inf), 0 at 1e-170
    small = make(tiny_bert, max_epochs=3).fit(X, Y)
    extreme = make(tiny_bert, max_epochs=3).fit(X, scale * Y)
    assert extreme.target_scale_ == pytest.approx(scale * small.target_scale_, rel=1e-12)
    np.testing.assert_allclose(extreme.loss_curve_, small.loss_curve_, rtol=1e-5)
    np.testing.assert_allclose(extreme.predict(X), scale * small.predict(X), rtol=1e-9)
    # early stopping's R^2 squared the targets: NaN ("diverged") at 1e160, 1.0 at 1e-170
    stopping = {"max_epochs": 3, "early_stopping": True, "validation_fraction": 0.3}
    small = make(tiny_bert, **stopping).fit(X, Y)
    extreme = make(tiny_bert, **stopping).fit(X, scale * Y)
    np.testing.assert_allclose(extreme.validation_scores_, small.validation_scores_, rtol=1e-5)


def test_decimal_targets_train_as_their_floats(tiny_bert):
    from decimal import Decimal  # pandas.read_sql gives SQL NUMERIC columns as Decimal

    floats = make(tiny_bert, max_epochs=2).fit(X, Y)
    decimals = make(tiny_bert, max_epochs=2).fit(X, [Decimal(str(v)) for v in Y])
    np.testing.assert_array_equal(decimals.predict(X), floats.predict(X))


def test_early_stopping_refuses_held_out_targets_of_one_value(tiny_bert, monkeypatch):
    two_values = np.where(Y > 2.5, 4.0, 1.0)
    params = {"max_epochs": 2, "early_stopping": True, "validation_fraction": 0.2}
    # seed 0 holds out two texts rated 1.0 (R^2 0 at every epoch: it stopped silently)
    loads = []
    monkeypatch.setattr(BertTextRegressor, "_build_encoder", lambda *a, **k: loads.append(1))
    with pytest.raises(ValueError, match=r"held out 2 samples .* whose targets are all \[1.0\]"):
        make(tiny_bert, random_state=0, **params).fit(X, two_values)
    assert not loads  # refused before the encoder loads (and mlm_steps train it)
    monkeypatch.undo()
    assert make(tiny_bert, random_state=1, **params).fit(X, two_values).n_iter_ == 2
    # one constant output of two still ranks the epochs by the other
    both = np.c_[two_values, Y]
    assert make(tiny_bert, random_state=0, **params).fit(X, both).n_iter_ == 2


@pytest.mark.parametrize(
    "y, shape",
    [(Y, (10,)), (Y[:, None], (10, 1)), (np.c_[Y, -2 * Y + 1, Y**2], (10, 3))],
    ids=["1-D", "one column", "three outputs"],
)
def test_predictions_keep_the_shape_of_y(tiny_bert, y, shape):
    reg = make(tiny_bert, max_epochs=10).fit(X, y)
    assert reg.predict(X).shape == shape
    assert reg.n_outputs_ == (1 if y.ndim == 1 else y.shape[1])
    assert reg.multioutput_ == (y.ndim == 2)
    assert reg.network_.output_layer.out_features == reg.n_outputs_
    assert reg.score(X, y) > 0.3  # every output learned (uniform average of R^2)


def test_every_loss_trains_and_they_differ(tiny_bert):
    predictions = {}
    for loss in ("squared_error", "huber", "absolute_error"):
        reg = make(tiny_bert, max_epochs=10, loss=loss).fit(X, Y)
        assert reg.score(X, Y) > 0.3, loss
        predictions[loss] = reg.predict(X)
    assert not np.array_equal(predictions["squared_error"], predictions["huber"])
    assert not np.array_equal(predictions["squared_error"], predictions["absolute_error"])
    with pytest.raises(InvalidParameterError, match="'loss' parameter"):
        make(tiny_bert, loss="log_loss").fit(X, Y)


@pytest.mark.parametrize(
    "params",
    [
        {"pooling": "cnn", "cnn_channels": 4},
        {"pooling": "cls", "layer": (-2, -1), "layer_combine": "mean"},
        {"truncation": "chunks", "max_length": 12, "chunk_pooling": "attention"},
        {"truncation": "head+tail", "max_length": 12, "head_length": 4, "layer_lr_decay": 0.9},
        {"mlm_steps": 3},
        {"precision": "bf16"},
    ],
    ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()),
)
def test_read_out_and_fine_tuning_parameters(tiny_model, params):
    texts = np.array([LONG_TEXT + " " + x for x in X], dtype=object)
    reg = make(tiny_model, max_epochs=2, **params).fit(texts, Y)
    assert np.isfinite(reg.loss_curve_).all()
    assert np.isfinite(reg.predict(texts)).all()
    assert (reg.mlm_loss_curve_ is not None) == ("mlm_steps" in params)


def test_fine_tune_top_keeps_the_encoder_frozen(tiny_bert):
    before = make(tiny_bert)._build_encoder().backbone.state_dict()
    reg = make(tiny_bert, max_epochs=2, fine_tune="top").fit(X, Y)
    after = reg.network_.backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_same_seed_same_model_bit_for_bit(tiny_model):
    first = make(tiny_model, max_epochs=2, random_state=3).fit(X, Y)
    again = clone(first).fit(X, Y)
    other = make(tiny_model, max_epochs=2, random_state=4).fit(X, Y)
    np.testing.assert_array_equal(first.predict(X), again.predict(X))
    assert not np.array_equal(first.predict(X), other.predict(X))


def test_clone_and_not_fitted(tiny_bert):
    reg = make(tiny_bert, max_epochs=1, loss="huber")
    with pytest.raises(NotFittedError):
        reg.predict(X)
    reg.fit(X, Y)
    copy = clone(reg)
    assert copy.get_params() == reg.get_params()
    assert not hasattr(copy, "network_")
    with pytest.raises(NotFittedError):
        copy.predict(X)


def test_pairs_are_read_together_and_kinds_do_not_mix(tiny_model):
    reg = make(tiny_model, max_epochs=3).fit(PAIRS, Y)
    assert reg.pairs_ and reg.predict(PAIRS).shape == (10,)
    with pytest.raises(ValueError, match="X holds single texts, but this regressor was fitted"):
        reg.predict(X)
    single = make(tiny_model, max_epochs=1).fit(X, Y)
    with pytest.raises(ValueError, match=r"X holds sentence pairs \(2 columns\), but this"):
        single.predict(PAIRS)
    single.set_params(warm_start=True)
    with pytest.raises(ValueError, match="warm_start=True but the regressor was fitted on single"):
        single.fit(PAIRS, Y)
    # a pair is one input: [CLS] a [SEP] b [SEP], its second segment typed 1
    encoded = reg._encode(list(PAIRS[:1, 0]), list(PAIRS[:1, 1]))
    ids, types = encoded.rows[0][0]
    sep = reg.tokenizer_.sep_token_id
    assert ids[0] == reg.tokenizer_.cls_token_id and list(ids).count(sep) == 2
    assert set(types) == {0, 1}


@pytest.mark.parametrize(
    "y, match",
    [
        (np.r_[Y[:9], np.nan], r"y\[9\] is nan; regression targets must be finite"),
        (np.r_[Y[:3], np.inf, Y[4:]], r"y\[3\] is inf; regression targets must be finite"),
        (np.c_[Y, np.r_[Y[:6], -np.inf, Y[7:]]], r"y\[6, 1\] is -inf"),
        (list(Y[:4]) + [None] + list(Y[5:]), r"y\[4\] is missing \(None\)"),
        (pd.Series(list(Y[:4]) + [pd.NA] + list(Y[5:]), dtype=object), r"y\[4\] is missing \(<NA>"),
        (["pos"] * 5 + ["neg"] * 5, r"y\[0\] is 'pos', not a real number"),
        ([2.0] * 10, r"y holds one value \(2.0\) for every sample"),
        (np.c_[Y, np.ones(10)], r"y\[:, 1\] holds one value \(1.0\) for every sample"),
        (np.r_[Y[:7], 1.7e308, -1.7e308, 1.7e308], r"y spans .* not a positive float64"),
        (np.zeros((10, 2, 2)), r"y has shape \(10, 2, 2\)"),
        (np.zeros((10, 0)), r"y has shape \(10, 0\)"),
        (Y[:9], "X has 10 samples but y has 9"),
        (None, "y is required"),
    ],
)
def test_bad_targets_are_refused_with_their_position(tiny_bert, y, match):
    reg = make(tiny_bert, max_epochs=1)
    with pytest.raises(ValueError, match=match):
        reg.fit(X, y)
    assert not hasattr(reg, "network_")


def _auto_as_on_cuda(original):
    """resolve_precision's CUDA rule for "auto" on this CPU: a small model trains in fp32 and
    predicts in bf16."""

    def resolve(precision, device, *, training_flops=None):
        if precision != "auto":
            return original(precision, device, training_flops=training_flops)
        return None if training_flops is not None else torch.bfloat16

    return resolve


@pytest.mark.parametrize("rule", ["this machine's", "CUDA's"])
def test_early_stopping_scores_what_score_gives(tiny_bert, rule, monkeypatch):
    if rule == "CUDA's":  # training and prediction precisions differ: validate as predict
        from skbert._core import devices
        from skbert._estimator import base, supervised

        resolve = _auto_as_on_cuda(devices.resolve_precision)
        monkeypatch.setattr(base, "resolve_precision", resolve)
        monkeypatch.setattr(supervised, "resolve_precision", resolve, raising=False)
    reg = make(
        tiny_bert, max_epochs=4, early_stopping=True, validation_fraction=0.3, n_iter_no_change=4
    )
    reg.fit(X, Y)
    assert len(reg.validation_scores_) == reg.n_iter_ == 4
    assert reg.best_validation_score_ == max(reg.validation_scores_)
    # the fit's split (unstratified), from the seed drawn from random_state
    seed = int(check_random_state(0).randint(2**31 - 1))
    _, val_idx = train_test_split(np.arange(len(X)), test_size=0.3, random_state=seed)
    # the kept epoch is the best: its validation score is score() on the held-out texts
    assert reg.best_validation_score_ == reg.score(X[val_idx], Y[val_idx])
    with pytest.raises(ValueError, match="R\\^2 needs at least 2 to score"):
        make(tiny_bert, early_stopping=True, validation_fraction=0.1).fit(X, Y)


def test_warm_start_continues_with_the_fitted_standardisation(tiny_bert):
    reg = make(tiny_bert, max_epochs=1, warm_start=True).fit(X, Y)
    mean, scale, first = reg.target_mean_, reg.target_scale_, reg.predict(X)
    reg.fit(X, Y + 1.0)
    assert reg.target_mean_ is mean and reg.target_scale_ is scale
    assert not np.array_equal(first, reg.predict(X))
    with pytest.raises(ValueError, match=r"warm_start=True but y has shape \(10, 2\)"):
        reg.fit(X, np.c_[Y, Y])


def test_pipeline_grid_search_with_correlation_scorers(tiny_bert):
    pipe = make_pipeline(FunctionTransformer(lambda x: x), make(tiny_bert, max_epochs=2))
    grid = GridSearchCV(
        pipe,
        {"berttextregressor__pooling": ["cls", "mean"], "berttextregressor__loss": ["huber"]},
        cv=2,
        scoring={"spearman": spearman_scorer, "pearson": pearson_scorer, "r2": "r2"},
        refit="spearman",
        error_score="raise",
    ).fit(X, Y)
    assert len(grid.cv_results_["params"]) == 2
    for name in ("spearman", "pearson", "r2"):
        assert np.isfinite(grid.cv_results_[f"mean_test_{name}"]).all()
    predicted = grid.predict(X)
    assert spearman_scorer(grid.best_estimator_, X, Y) == spearmanr(predicted, Y).statistic
    assert pearson_scorer(grid.best_estimator_, X, Y) == pytest.approx(
        pearsonr(predicted, Y).statistic
    )


def test_correlation_scorers_average_outputs_and_check_shapes(tiny_bert):
    y = np.c_[Y, -Y]
    reg = make(tiny_bert, max_epochs=4).fit(X, y)
    predicted = reg.predict(X)
    expected = np.mean([spearmanr(predicted[:, j], y[:, j]).statistic for j in range(2)])
    assert spearman_scorer(reg, X, y) == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"y has shape \(10,\) and the predictions \(10, 2\)"):
        spearman_scorer(reg, X, Y)


@pytest.mark.parametrize("scorer", [spearman_scorer, pearson_scorer])
def test_correlation_scorers_check_y_as_r2_does(scorer):
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(0)
    features = rng.normal(size=(20, 3))
    gold = features @ [1.0, -2.0, 0.5] + rng.normal(scale=0.1, size=20)
    ridge = Ridge().fit(features, gold)
    # a one-column y against (n,) predictions, as r2 takes it (it gave NaN in cross_val_score)
    assert scorer(ridge, features, gold[:, None]) == scorer(ridge, features, gold)
    # a NaN gold value gave a NaN score without a word
    with pytest.raises(ValueError, match=r"y\[3\] is nan; gold values must be finite"):
        scorer(ridge, features, np.r_[gold[:3], np.nan, gold[4:]])
    # one sample: nan with the warning of the STS scorers (pearson raised scipy's ValueError)
    with pytest.warns(UndefinedMetricWarning, match="not defined for 1 sample"):
        assert np.isnan(scorer(ridge, features[:1], gold[:1]))
    # a label that is no number is named by its position, as the STS scorers name it
    with pytest.raises(ValueError, match=r"^y\[3\] is 'a', not a real number; gold values"):
        scorer(ridge, features, np.array([*gold[:3], "a", *gold[4:]], dtype=object))
    # None was read as nan ("y[3] is nan"), a numeric string as its number
    with pytest.raises(ValueError, match=r"^y\[3\] is missing \(None\)"):
        scorer(ridge, features, [*gold[:3], None, *gold[4:]])
    with pytest.raises(ValueError, match=r"^y\[0\] is '[-0-9.]+', not a real number"):
        scorer(ridge, features, gold.astype(str))


@pytest.mark.parametrize("scorer", [spearman_scorer, pearson_scorer])
def test_correlation_scorers_refuse_three_dimensions_and_take_old_scipy_results(
    scorer, monkeypatch
):
    """A (n, 2, 2) y gave a correlation matrix per output, averaged with its diagonal of ones
    (0.399, silently); scipy before 1.10 (which scikit-learn 1.6 allows) returns results
    without .statistic, which the scorers read (AttributeError)."""
    import scipy.stats
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(0)
    features = rng.normal(size=(10, 3))
    gold = rng.normal(size=(10, 2, 2))

    class Cube:
        def predict(self, X):
            return gold + 0.1 * rng.normal(size=gold.shape)

    with pytest.raises(ValueError, match=r"y has 3 dimensions \(shape \(10, 2, 2\)\)"):
        scorer(Cube(), features, gold)
    target = features @ [1.0, -2.0, 0.5] + rng.normal(scale=0.1, size=10)
    ridge = Ridge().fit(features, target)
    expected = scorer(ridge, features, target)
    for name in ("spearmanr", "pearsonr"):  # results as plain (coefficient, p-value) tuples
        real = getattr(scipy.stats, name)
        old_style = lambda *a, _real=real: tuple(_real(*a))  # noqa: E731
        monkeypatch.setattr(scipy.stats, name, old_style)
        if name == "spearmanr":  # imported by skbert.metrics at its top
            monkeypatch.setattr("skbert.metrics.spearmanr", old_style)
    assert scorer(ridge, features, target) == expected


def test_cosine_spearman_refuses_scores_that_are_not_finite():
    """A NaN gave nan without a word; infinity was ranked as the highest score."""
    from skbert.metrics import cosine_spearman

    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    scores = np.arange(6.0)
    assert -1 <= cosine_spearman(u, v, scores) <= 1
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match=rf"scores\[2\] is {bad!r}; gold scores must be"):
            cosine_spearman(u, v, np.r_[scores[:2], bad, scores[3:]])
    # one pair: nan with the scorers' warning (scipy warned its own way, or for none raised)
    from sklearn.exceptions import UndefinedMetricWarning

    for n in (1, 0):
        with pytest.warns(UndefinedMetricWarning, match=f"not defined for {n} pair"):
            assert np.isnan(cosine_spearman(u[:n], v[:n], scores[:n]))


@pytest.mark.real_model
@pytest.mark.shared_data
def test_cross_encoder_learns_sts_on_minilm(packaged_model, data_home):
    """A cross-encoder on the packaged MiniLM, 1 epoch on 320 STS-B training pairs."""
    from skbert.datasets import load_stsb

    X_train, y_train = load_stsb("train", data_home=data_home, return_X_y=True)
    X_test, y_test = load_stsb("test", data_home=data_home, return_X_y=True)
    reg = BertTextRegressor(
        packaged_model,
        max_length=64,
        batch_size=16,
        max_epochs=1,
        learning_rate=1e-4,
        device="cpu",
        random_state=0,
    ).fit(X_train[:320], y_train[:320])
    test = slice(0, 200)
    assert spearman_scorer(reg, X_test[test], y_test[test]) > 0.5
    assert reg.score(X_test[test], y_test[test]) > 0.1

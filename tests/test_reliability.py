"""Nothing silently wrong, nothing lost: atomic fits, warm starts that cannot change the
network, degenerate targets, input kinds, and the feature cache's model identity."""

import json
import pickle
import shutil
import warnings

import numpy as np
import pytest
import torch
from conftest import TEXTS
from sklearn.base import clone
from sklearn.exceptions import NotFittedError, UndefinedMetricWarning
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.validation import check_is_fitted

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._nn.network import SiameseNetwork, TaskNetwork
from skbert.exceptions import TrainingDivergedError

POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
X = np.array((POS + NEG) * 2, dtype=object)
Y = np.array((["pos"] * 5 + ["neg"] * 5) * 2, dtype=object)
PAIRS = np.array([[a, b] for a, b in zip(POS, NEG, strict=True)] * 2, dtype=object)


def _classifier(model, **kw):
    params = {"device": "cpu", "max_epochs": 2, "batch_size": 4, "random_state": 0, **kw}
    return BertTextClassifier(model, **params)


def _interrupt_after(monkeypatch, cls, method, n_calls, exc=KeyboardInterrupt):
    """Make ``cls.method`` raise ``exc`` on its ``n_calls``-th call during training."""
    original = getattr(cls, method)
    calls = {"n": 0}

    def patched(self, *args, **kwargs):
        if self.training:
            calls["n"] += 1
            if calls["n"] == n_calls:
                raise exc()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, patched)


def _learned(est) -> dict:
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}


# ---------------------------------------------------------------------------- atomic fits
@pytest.mark.parametrize("warm_start, fine_tune", [(False, "full"), (True, "full"), (True, "top")])
def test_interrupted_refit_keeps_the_previous_model(tiny_bert, monkeypatch, warm_start, fine_tune):
    clf = _classifier(tiny_bert, fine_tune=fine_tune).fit(X, Y)
    before = _learned(clf)
    proba = clf.predict_proba(X)
    weights = {k: v.clone() for k, v in clf.network_.state_dict().items()}
    _interrupt_after(monkeypatch, TaskNetwork, "forward", 3)
    with pytest.raises(KeyboardInterrupt):
        clf.set_params(warm_start=warm_start, max_epochs=3, learning_rate=1e-3).fit(X, Y)
    after = _learned(clf)
    assert after.keys() == before.keys()
    for name, value in before.items():
        assert after[name] is value, name  # the very same objects, not half-updated ones
    assert clf.loss_curve_ == before["loss_curve_"] and clf.n_iter_ == before["n_iter_"]
    for key, tensor in clf.network_.state_dict().items():
        assert torch.equal(tensor, weights[key]), key  # not trained in place
    assert not clf.network_.training
    assert all(p.requires_grad for p in clf.network_.parameters())
    np.testing.assert_array_equal(clf.predict_proba(X), proba)


def test_interrupted_first_fit_leaves_no_fitted_state(tiny_bert, monkeypatch):
    clf = _classifier(tiny_bert, fine_tune="top")
    _interrupt_after(monkeypatch, TaskNetwork, "forward", 2)
    with pytest.raises(KeyboardInterrupt):
        clf.fit(X, Y)
    assert _learned(clf) == {}
    with pytest.raises(NotFittedError):
        check_is_fitted(clf)
    with pytest.raises(NotFittedError):
        clf.predict(X)


def test_failed_siamese_refit_keeps_the_previous_model(tiny_bert, monkeypatch):
    est = BertSentenceTransformer(
        tiny_bert, device="cpu", fine_tune="full", batch_size=4, random_state=0
    )
    est.fit(PAIRS, np.linspace(0, 5, len(PAIRS)))
    vectors = est.transform(TEXTS)
    before = _learned(est)
    _interrupt_after(monkeypatch, SiameseNetwork, "forward", 2, exc=RuntimeError)
    with pytest.raises(RuntimeError):
        est.set_params(warm_start=True).fit(PAIRS, np.linspace(5, 0, len(PAIRS)))
    assert _learned(est).keys() == before.keys()
    assert all(_learned(est)[k] is v for k, v in before.items())
    np.testing.assert_array_equal(est.transform(TEXTS), vectors)


# ---------------------------------------------------------------------------- warm starts
@pytest.mark.parametrize(
    "change, param",
    [
        ({"pooling": "max"}, "pooling"),
        ({"layer": 1}, "layer"),
        ({"max_length": 16}, "max_length"),
        ({"truncation": "tail"}, "truncation"),
        ({"model": "another-model"}, "model"),
    ],
)
def test_warm_start_refuses_a_changed_network_setting(tiny_bert, change, param):
    clf = _classifier(tiny_bert, max_epochs=1, max_length=32).fit(X, Y)
    proba = clf.predict_proba(X)
    clf.set_params(warm_start=True, **change)
    with pytest.raises(ValueError, match=f"warm_start=True but {param} changed"):
        clf.fit(X, Y)
    np.testing.assert_array_equal(clf.predict_proba(X), proba)  # still the fitted model


def test_warm_start_from_a_fitted_model_refuses_another_fitted_model(tiny_bert, tmp_path):
    """model=fitted: another fitted estimator is another model, even of the same kind and
    checkpoint; a pickled copy of the same one is the same (as save / load gives)."""
    start = _classifier(tiny_bert, max_epochs=1).fit(X, Y)
    other = _classifier(tiny_bert, max_epochs=1, random_state=1).fit(X, Y)
    clf = _classifier(start, max_epochs=1, warm_start=True).fit(X, Y)
    clf.set_params(model=pickle.loads(pickle.dumps(start))).fit(X, Y)  # the same weights
    clf.set_params(model=other)
    with pytest.raises(ValueError, match="warm_start=True but model changed from 'a fitted"):
        clf.fit(X, Y)


def test_warm_start_accepts_training_settings_and_applies_dropout(tiny_bert):
    clf = _classifier(tiny_bert, max_epochs=1, layer=-1).fit(X, Y)
    clf.set_params(warm_start=True, layer=2, learning_rate=1e-4, dropout=0.3, fine_tune="top")
    clf.fit(X, Y)  # layer=2 is layer=-1 of this 2-layer model: the same network
    assert clf.network_.dropout.p == 0.3


def test_warm_start_refuses_pairs_after_single_texts(tiny_bert):
    clf = _classifier(tiny_bert, max_epochs=1).fit(X, Y)
    with pytest.raises(ValueError, match="fitted on single texts"):
        clf.set_params(warm_start=True).fit(PAIRS, Y[: len(PAIRS)])


# ---------------------------------------------------------------------------- inputs
def test_classifier_refuses_the_other_input_kind(tiny_bert):
    single = _classifier(tiny_bert, max_epochs=1).fit(X, Y)
    assert single.pairs_ is False
    with pytest.raises(
        ValueError, match=r"X holds sentence pairs \(2 columns\), .* fitted on single texts"
    ):
        single.predict(PAIRS)
    paired = _classifier(tiny_bert, max_epochs=1).fit(PAIRS, Y[: len(PAIRS)])
    assert paired.pairs_ is True
    with pytest.raises(ValueError, match="X holds single texts, .* fitted on sentence pairs"):
        paired.predict_proba(X)


@pytest.mark.parametrize(
    "y, match",
    [
        (np.zeros((len(X), 2, 2), dtype=int), "y has 3 dimensions"),
        (np.array([1, "a"] * (len(X) // 2), dtype=object), r"mixes label types \(number at y\[0\]"),
    ],
)
def test_bad_class_labels(tiny_bert, y, match):
    with pytest.raises(ValueError, match=match):
        _classifier(tiny_bert).fit(X, y)
    with pytest.raises(ValueError, match=match):
        BertSentenceTransformer(tiny_bert, device="cpu", fine_tune="full").fit(X, y)


@pytest.mark.parametrize("name", ["learning_rate", "top_learning_rate"])
@pytest.mark.parametrize("value", [1e6, 1e38, 0.0, -1e-5])
def test_learning_rates_outside_a_sane_range_are_refused(tiny_bert, name, value):
    for est in (_classifier(tiny_bert), BertSentenceTransformer(tiny_bert, fine_tune="full")):
        with pytest.raises(
            InvalidParameterError, match=rf"'{name}' parameter .* range \(0\.0, 1\.0\]"
        ):
            est.set_params(**{name: value}).fit(PAIRS, np.linspace(0, 1, len(PAIRS)))


def test_transformer_does_not_claim_to_preserve_float64():
    assert BertSentenceTransformer().__sklearn_tags__().transformer_tags.preserves_dtype == []


# ---------------------------------------------------------------------------- degenerate targets
def test_siamese_fit_refuses_one_class_and_constant_scores(tiny_bert):
    est = BertSentenceTransformer(tiny_bert, device="cpu", fine_tune="full", batch_size=4)
    with pytest.raises(ValueError, match="single class"):
        est.fit(PAIRS, ["entailment"] * len(PAIRS))
    with pytest.raises(ValueError, match="one score .* for every pair"):
        est.fit(PAIRS, np.full(len(PAIRS), 3.0))
    with pytest.raises(ValueError, match=r"y\[2\] is nan"):
        est.fit(PAIRS, np.r_[1.0, 2.0, np.nan, np.ones(len(PAIRS) - 3)])
    assert _learned(est) == {}


@pytest.mark.parametrize("how", ["score", "sts_spearman_scorer", "sts_pearson_scorer"])
def test_score_refuses_nan_gold_scores_and_warns_for_one_pair(tiny_bert, how):
    """The STS scorers check y as score() does (they returned nan for a NaN score, and raised
    numpy's and scipy's errors for a short y); score() of an unfitted estimator and one pair
    returned nan."""
    from sklearn.exceptions import NotFittedError

    from skbert import metrics

    def scored(est, X, y):
        return est.score(X, y) if how == "score" else getattr(metrics, how)(est, X, y)

    with pytest.raises(NotFittedError):
        scored(BertSentenceTransformer(tiny_bert), PAIRS[:1], [3.0])
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    with pytest.raises(ValueError, match=r"y\[1\] is nan; gold scores must be finite"):
        scored(est, PAIRS[:3], [1.0, np.nan, 2.0])
    with pytest.raises(ValueError, match="X has 3 samples but y has 2"):
        scored(est, PAIRS[:3], [1.0, 2.0])
    with pytest.raises(ValueError, match="STS scores take sentence pairs"):
        scored(est, TEXTS[:3], [1.0, 2.0, 3.0])
    with pytest.warns(UndefinedMetricWarning, match="at least 2 pairs") as record:
        assert np.isnan(scored(est, PAIRS[:1], [3.0]))
    assert record[0].filename == __file__  # the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(scored(est, PAIRS[:4], [1.0, 2.0, 3.0, 4.0]))


def test_sts_scorers_take_any_object_with_similarity():
    """Not only scikit-learn estimators: the scorers' messages invite any similarity()."""
    from skbert import metrics

    class Same:
        def similarity(self, X):
            return np.array([float(a == b) for a, b in X])

    pairs = [("a", "a"), ("a", "b"), ("c", "c")]
    assert metrics.sts_spearman_scorer(Same(), pairs, [5.0, 0.0, 5.0]) == pytest.approx(1.0)


# ---------------------------------------------------------------------------- feature cache
def test_deferred_load_refuses_a_model_folder_changed_after_fit(tiny_bert, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert, folder)
    cache = tmp_path / "cache"
    BertSentenceTransformer(str(folder), device="cpu", memory=cache).fit(TEXTS).transform(TEXTS)
    est = BertSentenceTransformer(str(folder), device="cpu", memory=cache).fit(TEXTS)
    assert "network_" not in vars(est)  # every text cached: the weights were not loaded
    cached = est.transform(TEXTS)

    from transformers import BertConfig, BertModel

    torch.manual_seed(1)  # other weights, same architecture, written over the folder
    BertModel(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    np.testing.assert_array_equal(est.transform(TEXTS), cached)  # fit's model, from the cache
    with pytest.raises(RuntimeError, match="changed after fit"):
        est.transform(["a text that is not cached"])
    assert "network_" not in vars(est)
    fresh = BertSentenceTransformer(str(folder), device="cpu").fit(TEXTS)
    refit = BertSentenceTransformer(str(folder), device="cpu", memory=cache).fit(TEXTS)
    np.testing.assert_array_equal(refit.transform(TEXTS), fresh.transform(TEXTS))


# ---------------------------------------------------------------------------- diverged training
def _nan_after(monkeypatch, cls, method, n_calls):
    """Make ``cls.method`` return NaN from its ``n_calls``-th call in training on."""
    original = getattr(cls, method)
    calls = {"n": 0}

    def patched(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] >= n_calls:
                return out * float("nan")
        return out

    monkeypatch.setattr(cls, method, patched)


def test_a_diverged_fit_raises_and_keeps_the_previous_model(tiny_bert, monkeypatch):
    clf = _classifier(tiny_bert).fit(X, Y)
    proba = clf.predict_proba(X)
    _nan_after(monkeypatch, TaskNetwork, "forward", 4)
    with pytest.raises(TrainingDivergedError, match=r"step 4 of 10 .* learning_rate"):
        clf.fit(X, Y)
    np.testing.assert_array_equal(clf.predict_proba(X), proba)
    fresh = _classifier(tiny_bert)
    with pytest.raises(TrainingDivergedError):
        fresh.fit(X, Y)
    assert _learned(fresh) == {}  # never a NaN model


def test_a_diverged_siamese_fit_raises(tiny_bert, monkeypatch):
    _nan_after(monkeypatch, SiameseNetwork, "forward", 2)
    est = BertSentenceTransformer(tiny_bert, device="cpu", fine_tune="full", batch_size=4)
    with pytest.raises(TrainingDivergedError, match="step 2 of"):
        est.fit(PAIRS, np.linspace(0, 5, len(PAIRS)))
    assert _learned(est) == {}


def test_a_diverged_further_pretraining_writes_no_checkpoint(tiny_bert, monkeypatch, tmp_path):
    from skbert._nn.network import MaskedLMNetwork
    from skbert.pretraining import further_pretrain

    _nan_after(monkeypatch, MaskedLMNetwork, "forward", 1)
    with pytest.raises(TrainingDivergedError, match="step 1 of"):
        further_pretrain(
            list(X), tmp_path / "out", model=tiny_bert, max_steps=3, batch_size=4, verbose=0
        )
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("stop_at", [2, 3, 5, 8])
def test_an_interrupted_fit_resumes_to_the_uninterrupted_result(
    tiny_bert, monkeypatch, tmp_path, stop_at
):
    settings = {"max_epochs": 2, "early_stopping": True, "validation_fraction": 0.2}
    reference = _classifier(tiny_bert, **settings).fit(X, Y)
    clf = _classifier(tiny_bert, checkpoint_dir=tmp_path, checkpoint_steps=2, **settings)
    with monkeypatch.context() as patch:
        _interrupt_after(patch, TaskNetwork, "forward", stop_at)
        with pytest.raises(KeyboardInterrupt):
            clf.fit(X, Y)
    clf.fit(X, Y)
    np.testing.assert_array_equal(clf.predict_proba(X), reference.predict_proba(X))
    assert clf.loss_curve_ == reference.loss_curve_
    assert clf.validation_scores_ == reference.validation_scores_


@pytest.mark.parametrize("random_state", [None, "instance"])
def test_a_resumed_fit_reuses_the_stored_seed_and_refuses_other_data(
    tiny_bert, monkeypatch, tmp_path, random_state
):
    est = BertSentenceTransformer(
        tiny_bert,
        device="cpu",
        fine_tune="full",
        batch_size=4,
        max_epochs=2,
        checkpoint_dir=tmp_path,
        checkpoint_steps=1,
        random_state=np.random.RandomState(0) if random_state else None,
    )  # a seed drawn anew at each fit: the resumed fit must take the checkpointed run's seed
    scores = np.linspace(0, 5, len(PAIRS))
    with monkeypatch.context() as patch:
        _interrupt_after(patch, SiameseNetwork, "forward", 4)
        with pytest.raises(KeyboardInterrupt):
            est.fit(PAIRS, scores)
    seed = json.loads((tmp_path / "training_state.json").read_text())["seed"]
    est = clone(est)  # as in a new session: an equal RandomState, another object
    est.fit(PAIRS, scores)
    assert len(est.loss_curve_) == 2
    with pytest.raises(ValueError, match=str(tmp_path)):
        est.fit(PAIRS, scores[::-1])
    assert seed is not None


def test_a_checkpoint_of_another_random_state_is_refused(tiny_bert, tmp_path):
    """An int random_state is the seed of the fit: a checkpoint of another seed is another
    run (a seed sweep sharing one checkpoint_dir is refused, not given one model)."""
    first = _classifier(tiny_bert, checkpoint_dir=tmp_path, random_state=0).fit(X, Y)
    with pytest.raises(ValueError, match="it differs in the seed \\(random_state\\)"):
        _classifier(tiny_bert, checkpoint_dir=tmp_path, random_state=1).fit(X, Y)
    again = _classifier(tiny_bert, checkpoint_dir=tmp_path, random_state=0).fit(X, Y)
    np.testing.assert_array_equal(again.predict_proba(X), first.predict_proba(X))


def test_class_weight_of_numpy_labels_checkpoints(tiny_bert, tmp_path):
    y = np.searchsorted(np.unique(Y), Y)
    weights = dict(zip(np.unique(y), [2.0, 1.0], strict=True))  # np.int64 keys
    clf = _classifier(tiny_bert, checkpoint_dir=tmp_path, class_weight=weights).fit(X, y)
    plain = _classifier(tiny_bert, class_weight={0: 2.0, 1: 1.0}).fit(X, y)
    np.testing.assert_array_equal(clf.predict_proba(X), plain.predict_proba(X))


def test_layer_may_be_a_list_or_numpy_ints(tiny_bert):
    reference = BertSentenceTransformer(tiny_bert, device="cpu", layer=(1, 2)).fit(TEXTS)
    for layer in ([1, 2], (np.int64(1), np.int64(2)), np.arange(1, 3).tolist()):
        est = BertSentenceTransformer(tiny_bert, device="cpu", layer=layer).fit(TEXTS)
        assert est.layers_ == (1, 2)
        np.testing.assert_array_equal(est.transform(TEXTS), reference.transform(TEXTS))


@pytest.mark.parametrize(
    "sizes, error, match",
    [
        ((), ValueError, "is empty"),
        ((0,), ValueError, "must be an int >= 1"),
        (("a",), TypeError, "holds 'a', a str"),
        ((True, 3), TypeError, "holds True, a bool"),
    ],
)
def test_bad_cnn_kernel_sizes_are_named(tiny_bert, sizes, error, match):
    clf = _classifier(tiny_bert, pooling="cnn", cnn_kernel_sizes=sizes)
    with pytest.raises(error, match=rf"cnn_kernel_sizes=.*{match}"):
        clf.fit(X, Y)
    assert _learned(clf) == {}

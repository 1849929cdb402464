"""Fitted state is complete after fit, and predicting changes no attribute of an estimator.

For every estimator in every mode (frozen, ``memory=`` with the encoder's loading deferred,
fine-tuned ``"top"`` and ``"full"``, ``precision="bf16"``, the CPU fall-back of a
``device="cuda"`` model), ``vars(est)`` holds the same keys and the same objects before and
after every prediction method, the fitted networks' weights are untouched, and the outputs
equal those of a copy of the fitted estimator that never predicted. What predictions reuse
lives in the prediction cache (:mod:`skbert._estimator.prediction_cache`).
"""

from __future__ import annotations

import copy
import gc
import itertools
import pickle
import warnings
import weakref

import numpy as np
import pytest
import torch
from conftest import TEXTS
from sklearn.base import clone

from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor
from skbert._estimator.deferred import DeferredNetwork
from skbert._estimator.prediction_cache import prediction_cache

PAIRS = np.array([[a, b] for a, b in zip(TEXTS, TEXTS[::-1], strict=True)], dtype=object)
SCORES = np.linspace(0.0, 5.0, len(PAIRS))
LABELS = np.array([0, 1] * (len(TEXTS) // 2))
TRAIN = {"max_epochs": 1, "batch_size": 4, "random_state": 0}
FALLBACK = "is not available here; predicting on the CPU"

needs_no_cuda = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="simulates a GPU-fitted model on a machine without CUDA; this machine has CUDA",
)

#: mode -> (parameters, X, y, memory: None / "cached" (every text) / "miss", CPU fall-back)
SENTENCE_MODES = {
    "frozen": ({}, TEXTS, None, None, False),
    "memory-deferred-all-cached": ({}, TEXTS, None, "cached", False),
    "memory-deferred-miss": ({}, TEXTS, None, "miss", False),
    "top": (
        {"fine_tune": "top", "pooling": "cnn", "cnn_kernel_sizes": (1, 3), "cnn_channels": 4},
        PAIRS,
        SCORES,
        None,
        False,
    ),
    "full": ({"fine_tune": "full"}, PAIRS, LABELS, None, False),
    "bf16": ({"precision": "bf16"}, TEXTS, None, None, False),
    "bf16-full": ({"precision": "bf16", "fine_tune": "full"}, TEXTS, LABELS, None, False),
    "bf16-memory-miss": ({"precision": "bf16"}, TEXTS, None, "miss", False),
    "cuda-fallback": ({}, TEXTS, None, None, True),
    "cuda-fallback-memory-miss": ({}, TEXTS, None, "miss", True),
}

#: mode -> (parameters, X, CPU fall-back)
CLASSIFIER_MODES = {
    "full": ({}, TEXTS, False),
    "top": ({"fine_tune": "top"}, TEXTS, False),
    "pairs": ({}, PAIRS, False),
    "bf16": ({"precision": "bf16"}, TEXTS, False),
    "cuda-fallback": ({}, TEXTS, True),
}


#: mode -> (parameters, X, y, CPU fall-back)
REGRESSOR_MODES = {
    "full": ({}, TEXTS, SCORES, False),
    "top-pairs-multi-output": ({"fine_tune": "top"}, PAIRS, np.c_[SCORES, -SCORES], False),
    "bf16": ({"precision": "bf16"}, TEXTS, SCORES, False),
    "cuda-fallback": ({}, TEXTS, SCORES, True),
}


def sentence_calls(est) -> dict:
    return {
        "transform": lambda: est.transform(TEXTS),
        "transform-pairs": lambda: est.transform(PAIRS),
        "similarity": lambda: est.similarity(PAIRS),
        "score": lambda: est.score(PAIRS, SCORES),
    }


def classifier_calls(X):
    def calls(est) -> dict:
        return {
            "predict": lambda: est.predict(X),
            "predict_proba": lambda: est.predict_proba(X),
            "decision_function": lambda: est.decision_function(X),
            "score": lambda: est.score(X, LABELS),
        }

    return calls


def modules_state(est) -> dict:
    """Weights, training flag and device of every torch module among the fitted attributes."""
    return {
        name: (
            {k: t.detach().clone() for k, t in value.state_dict().items()},
            [m.training for m in value.modules()],
            {p.device for p in value.parameters()},
        )
        for name, value in vars(est).items()
        if isinstance(value, torch.nn.Module)
    }


def assert_same_output(got, expected, where) -> None:
    if isinstance(expected, np.ndarray):
        assert got.dtype == expected.dtype and np.array_equal(got, expected), where
    else:
        assert type(got) is type(expected) and got == expected, where


def fallback_count(record) -> int:
    return sum(FALLBACK in str(w.message) for w in record)


def assert_predicting_changes_nothing(est, calls, fallback: bool, memory=None) -> None:
    """Every prediction method of ``calls(est)``, run twice, leaves ``vars(est)`` as it was
    and gives the output of a copy of ``est`` that never predicted. ``memory``: a feature
    cache folder of the copies' own (so that ``est`` misses its cache too)."""
    pristine = pickle.dumps(est)

    def fresh_copy():
        fresh = pickle.loads(pristine)
        return fresh if memory is None else fresh.set_params(memory=memory)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the copies' own fall-back warnings
        expected = {name: calls(fresh_copy())[name]() for name in calls(est)}
    before = dict(vars(est))
    state = set(est.__getstate__())
    modules = modules_state(est)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for round_ in range(2):
            for name, call in calls(est).items():
                got = call()
                where = f"{name}, round {round_}"
                assert list(vars(est)) == list(before), where  # same keys, same order
                for key, value in before.items():
                    assert vars(est)[key] is value, (where, key)
                assert_same_output(got, expected[name], where)
    assert fallback_count(record) == (1 if fallback else 0)  # once per estimator and device
    assert set(est.__getstate__()) == state  # nothing more to pickle
    after = modules_state(est)
    assert list(after) == list(modules)
    for name, (weights, flags, devices) in modules.items():
        weights_now, flags_now, devices_now = after[name]
        assert list(weights_now) == list(weights), name
        assert all(torch.equal(weights[k], weights_now[k]) for k in weights), name
        assert flags_now == flags and devices_now == devices, name


@pytest.mark.parametrize("mode", list(SENTENCE_MODES))
def test_sentence_transformer_predictions_change_no_attribute(tiny_model, tmp_path, mode):
    params, X, y, memory, fallback = SENTENCE_MODES[mode]
    if fallback and torch.cuda.is_available():
        pytest.skip("simulates a GPU-fitted model on a machine without CUDA; this one has CUDA")
    if memory is not None:
        params = {**params, "memory": tmp_path / "cache"}
    if memory == "cached":  # another estimator fills the cache with every text predicted
        filler = BertSentenceTransformer(tiny_model, device="cpu", **params).fit(X, y)
        for call in sentence_calls(filler).values():
            call()
    est = BertSentenceTransformer(tiny_model, device="cpu", **TRAIN, **params).fit(X, y)
    if memory is not None:  # fit deferred loading the encoder: one fitted object says what
        assert "network_" not in vars(est)
        assert isinstance(est.deferred_network_, DeferredNetwork)
        assert est.deferred_network_.fingerprint == est.feature_fingerprint_
    if fallback:
        est.set_params(device="cuda")  # as if fitted on a GPU
    own = tmp_path / "copies" if memory == "miss" else None
    assert_predicting_changes_nothing(est, sentence_calls, fallback, own)
    cache = prediction_cache(est)
    if memory == "cached":
        assert cache.network is None  # every text read from the cache: nothing loaded
    if memory == "miss":  # loaded once, into the prediction cache
        assert cache.network is not None and est.fitted_network() is cache.network[2]
        assert "network_" not in vars(est)
    if params.get("precision") == "bf16":  # the copy is kept, outside the estimator
        low = cache.low_precision[2]
        est.transform(TEXTS)
        assert prediction_cache(est).low_precision[2] is low


@pytest.mark.parametrize("mode", list(CLASSIFIER_MODES))
def test_classifier_predictions_change_no_attribute(tiny_model, mode):
    params, X, fallback = CLASSIFIER_MODES[mode]
    if fallback and torch.cuda.is_available():
        pytest.skip("simulates a GPU-fitted model on a machine without CUDA; this one has CUDA")
    clf = BertTextClassifier(tiny_model, device="cpu", **TRAIN, **params).fit(X, LABELS)
    if fallback:
        clf.set_params(device="cuda")
    assert_predicting_changes_nothing(clf, classifier_calls(X), fallback)
    if params.get("precision") == "bf16":
        low = prediction_cache(clf).low_precision[2]
        clf.predict(X)
        assert prediction_cache(clf).low_precision[2] is low


@pytest.mark.parametrize("mode", list(REGRESSOR_MODES))
def test_regressor_predictions_change_no_attribute(tiny_model, mode):
    params, X, y, fallback = REGRESSOR_MODES[mode]
    if fallback and torch.cuda.is_available():
        pytest.skip("simulates a GPU-fitted model on a machine without CUDA; this one has CUDA")
    reg = BertTextRegressor(tiny_model, device="cpu", **TRAIN, **params).fit(X, y)
    if fallback:
        reg.set_params(device="cuda")

    def calls(est) -> dict:
        return {"predict": lambda: est.predict(X), "score": lambda: est.score(X, y)}

    assert_predicting_changes_nothing(reg, calls, fallback)


@needs_no_cuda
def test_warned_once_per_estimator_and_device_survives_a_fit(tiny_bert):
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est.set_params(device="cuda").transform(TEXTS)
        est.transform(TEXTS)
        est.set_params(device="cpu").fit(TEXTS)
        est.set_params(device="cuda").transform(TEXTS)  # warned about "cuda" already
        est.set_params(device="mps").transform(TEXTS)  # another device: warned again
        copy.deepcopy(est).transform(TEXTS)  # another estimator: warned again
    assert fallback_count(record) == 3


@pytest.mark.parametrize("call", ["transform", "predict"])
def test_the_fallback_warning_points_at_the_users_line(tiny_bert, call):
    """A fixed stacklevel named sklearn's set_output wrapper for transform."""
    if call == "predict":
        est = BertTextClassifier(tiny_bert, device="cpu", max_epochs=1).fit(TEXTS[:4], [0, 1] * 2)
    else:
        est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    est.set_params(device="cuda")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        getattr(est, call)(TEXTS)
    [warning] = [w for w in record if FALLBACK in str(w.message)]
    assert warning.filename == __file__, warning.filename


@pytest.mark.parametrize("memory", [False, True])
def test_a_device_name_skbert_does_not_take_fails_the_fit(tiny_bert, memory, tmp_path):
    """A memory= fit loads nothing on the device: device="gpu" passed fit and failed later."""
    est = BertSentenceTransformer(tiny_bert, device="gpu", memory=tmp_path if memory else None)
    with pytest.raises(ValueError, match=r"device='gpu' is not allowed; use 'auto', 'cpu'"):
        est.fit(TEXTS)
    assert not hasattr(est, "readout_")


def test_fit_resets_every_fitted_attribute(tiny_bert, tmp_path):
    """A fit forgets all that the previous fit set, private attributes included, and empties
    the prediction caches: a refit in another mode holds exactly what a first fit in that mode
    holds."""
    modes = {  # mode -> (estimator, fit arguments)
        "deferred": (BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path), (TEXTS,)),
        "trained": (
            BertSentenceTransformer(tiny_bert, device="cpu", fine_tune="full", **TRAIN),
            (PAIRS, LABELS),
        ),
        "frozen": (BertSentenceTransformer(tiny_bert, device="cpu"), (TEXTS,)),
    }
    fresh = {mode: sorted(vars(est.fit(*args))) for mode, (est, args) in modes.items()}
    assert len({tuple(keys) for keys in fresh.values()}) == 3  # each mode learns other things
    for before, after in itertools.permutations(modes, 2):
        est = clone(modes[before][0]).fit(*modes[before][1])
        est.transform(TEXTS)  # a deferred fit loads its encoder into the prediction cache
        est.set_params(**modes[after][0].get_params(deep=False)).fit(*modes[after][1])
        assert sorted(vars(est)) == fresh[after], (before, after)
        assert prediction_cache(est).network is None, (before, after)
        assert prediction_cache(est).low_precision is None, (before, after)
    classifier = BertTextClassifier(tiny_bert, device="cpu", **TRAIN).fit(TEXTS, LABELS)
    learned = sorted(vars(classifier))
    classifier.predict(TEXTS)
    classifier.set_params(precision="bf16").predict(TEXTS)  # a bf16 copy, in the cache
    classifier.set_params(precision="auto").fit(TEXTS, LABELS)
    assert sorted(vars(classifier)) == learned
    assert prediction_cache(classifier).low_precision is None
    regressor = BertTextRegressor(tiny_bert, device="cpu", mlm_steps=1, **TRAIN)
    learned = sorted(vars(regressor.fit(TEXTS, SCORES)))
    regressor.predict(TEXTS)
    regressor.set_params(precision="bf16").predict(TEXTS)
    regressor.set_params(precision="auto").fit(TEXTS, SCORES)
    assert sorted(vars(regressor)) == learned
    assert prediction_cache(regressor).low_precision is None


def test_the_prediction_cache_is_no_part_of_the_estimator(tiny_bert, tmp_path):
    est = BertSentenceTransformer(tiny_bert, device="cpu", precision="bf16", memory=tmp_path)
    est.fit(TEXTS).transform(TEXTS)  # loads the deferred encoder, makes a bf16 copy
    cache = prediction_cache(est)
    assert cache.network is not None and cache.low_precision is not None
    for other in (pickle.loads(pickle.dumps(est)), copy.deepcopy(est)):
        assert vars(other).keys() == vars(est).keys()
        # a copy's cache starts empty, but for the deferred encoder's weights it carries
        carried = prediction_cache(other).network
        assert carried[0] is other.deferred_network_ and carried[2] is not cache.network[2]
        assert torch.equal(
            carried[2].backbone.embeddings.word_embeddings.weight,
            cache.network[2].backbone.embeddings.word_embeddings.weight,
        )
        assert prediction_cache(other).low_precision is None
        assert np.array_equal(other.transform(TEXTS), est.transform(TEXTS))
    reference = weakref.ref(est)
    del est, cache
    gc.collect()
    assert reference() is None  # the cache does not keep its estimator alive


def test_a_deferred_fit_as_model_of_another_estimator(tiny_bert, tmp_path):
    """``model=fitted`` takes a deferred encoder through the prediction cache: the fitted
    estimator's attributes stay as its fit left them, and the result is the same as from an
    estimator that loaded its encoder in fit."""
    deferred = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
    loaded = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    before = dict(vars(deferred))
    clf = BertTextClassifier(deferred, device="cpu", **TRAIN).fit(TEXTS, LABELS)
    assert list(vars(deferred)) == list(before)
    assert all(vars(deferred)[k] is v for k, v in before.items())
    reference = BertTextClassifier(loaded, device="cpu", **TRAIN).fit(TEXTS, LABELS)
    assert np.array_equal(clf.predict_proba(TEXTS), reference.predict_proba(TEXTS))

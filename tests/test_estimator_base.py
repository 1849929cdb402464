"""The estimators' shared base (skbert._estimator.base.BertEstimatorBase), through its public
seams: parameters stored verbatim and round-tripped by get_params / set_params / clone for
every registered estimator class, the registry that subclasses join when they are defined, the
fit life cycle (a fit forgets what the previous one learned, a warm start keeps it),
``fitted_network``, pickling and the sklearn tags."""

from __future__ import annotations

import abc
import pickle

import numpy as np
import pytest
import torch
from conftest import TEXTS
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import skbert
from skbert._estimator.base import BertEstimatorBase
from skbert._estimator.persistence import registry

LABELS = np.array([0, 1] * (len(TEXTS) // 2))
TRAIN = {"device": "cpu", "max_epochs": 1, "batch_size": 4, "random_state": 0}

#: every registered estimator class (skbert's own, and any added later)
REGISTERED = [registry.estimator_class(name) for name in registry.registered_names()]

#: how to train each of skbert's estimators on the tiny data, and the outputs to compare
FITS = {
    "BertSentenceTransformer": ({"fine_tune": "full", **TRAIN}, ("transform",)),
    "BertTextClassifier": (TRAIN, ("predict_proba", "decision_function")),
    "BertTextRegressor": (TRAIN, ("predict",)),
}


def fitted(name, model):
    return registry.estimator_class(name)(model, **FITS[name][0]).fit(TEXTS, LABELS)


@pytest.fixture
def classes(monkeypatch):
    """The registry, restored after the test: the classes a test defines leave with it. (The
    registry offers no way to unregister a class, so its private table is copied.)"""
    monkeypatch.setattr(registry, "_CLASSES", dict(registry._CLASSES))
    return registry


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("cls", REGISTERED, ids=lambda c: c.__name__)
def test_init_stores_every_parameter_verbatim(cls):
    names = list(cls().get_params(deep=False))
    values = {name: object() for name in names}  # not even a valid value: nothing checks it
    est = cls(**values)
    assert all(getattr(est, name) is value for name, value in values.items())
    assert sorted(vars(est)) == sorted(names)  # nothing else is set before fit
    got = est.get_params(deep=False)
    assert got.keys() == values.keys() and all(got[n] is values[n] for n in names)


@pytest.mark.parametrize("cls", REGISTERED, ids=lambda c: c.__name__)
def test_get_params_set_params_and_clone_round_trip(cls):
    default = cls().get_params(deep=False)
    changed = {name: ("changed", name) for name in default}
    est = cls().set_params(**changed)
    assert est.get_params(deep=False) == changed
    copy = clone(est)
    assert type(copy) is cls and copy is not est
    assert copy.get_params(deep=False) == changed
    assert clone(cls()).get_params(deep=False) == default


@pytest.mark.parametrize("cls", REGISTERED, ids=lambda c: c.__name__)
def test_tags_declare_texts_as_input(cls):
    tags = cls().__sklearn_tags__()
    assert tags.input_tags.string  # texts
    assert tags.input_tags.one_d_array and tags.input_tags.two_d_array  # texts, or pairs
    assert tags.requires_fit


# ---------------------------------------------------------------------------- the registry
def test_a_subclass_of_the_base_joins_the_registry_when_defined(classes):
    class Minimal(BertEstimatorBase):
        def __init__(self, model="m"):
            self.model = model

    assert classes.estimator_class("Minimal") is Minimal
    assert "Minimal" in classes.registered_names()
    assert classes.estimator_name(Minimal(), "the estimator") == "Minimal"


def test_private_and_abstract_subclasses_are_left_out(classes):
    class _Private(BertEstimatorBase):
        pass

    class Abstract(BertEstimatorBase, metaclass=abc.ABCMeta):
        @abc.abstractmethod
        def fit(self, X, y=None): ...

    assert "_Private" not in classes.registered_names()
    assert "Abstract" not in classes.registered_names()
    with pytest.raises(ValueError, match=r"class='Abstract' is not an estimator skbert loads"):
        classes.estimator_class("Abstract")


def test_a_name_taken_by_another_class_stays_with_the_first(classes):
    first = type("Taken", (BertEstimatorBase,), {"__module__": "here"})
    second = type("Taken", (BertEstimatorBase,), {"__module__": "elsewhere"})
    assert classes.estimator_class("Taken") is first  # not taken over by the second
    assert classes.estimator_name(first(), "it") == "Taken"
    with pytest.raises(TypeError, match=r"cannot save it: a elsewhere\.Taken; only the"):
        classes.estimator_name(second(), "it")
    with pytest.raises(
        ValueError, match=r"class=3 is not an estimator skbert loads in this process; allowed: "
    ):
        classes.estimator_class(3)


# ---------------------------------------------------------------------------- fit life cycle
@pytest.mark.parametrize("name", list(FITS))
def test_fitted_network_raises_before_fit_and_is_the_network_after(tiny_bert, name):
    with pytest.raises(NotFittedError):
        registry.estimator_class(name)(tiny_bert).fitted_network()
    est = fitted(name, tiny_bert)
    assert isinstance(est.fitted_network(), torch.nn.Module)
    assert est.fitted_network() is est.network_


@pytest.mark.parametrize("name", list(FITS))
def test_a_fit_forgets_what_the_last_one_learned_and_a_warm_start_keeps_it(tiny_bert, name):
    est = fitted(name, tiny_bert)
    learned = sorted(vars(est))
    est.left_over_ = "learned by no fit"  # as if a fit in another mode had set it
    network = est.network_
    est.fit(TEXTS, LABELS)
    assert sorted(vars(est)) == learned  # every learned attribute is reset by a fit
    assert est.network_ is not network
    est.left_over_ = "kept"
    est.set_params(warm_start=True).fit(TEXTS, LABELS)
    assert est.left_over_ == "kept"  # a warm start continues from the fitted state


# ---------------------------------------------------------------------------- pickling
@pytest.mark.parametrize("name", list(FITS))
def test_pickling_round_trips_bit_for_bit_and_leaves_the_estimator_as_it_was(tiny_bert, name):
    est = fitted(name, tiny_bert)
    network = est.network_
    loaded = pickle.loads(pickle.dumps(est))
    assert est.network_ is network  # pickling stores a copy of the state
    assert type(loaded) is type(est) and loaded.get_params() == est.get_params()
    assert loaded.network_ is not network and not loaded.network_.training
    assert {p.device.type for p in loaded.network_.parameters()} == {"cpu"}
    for method in FITS[name][1]:
        got, expected = getattr(loaded, method)(TEXTS), getattr(est, method)(TEXTS)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), method


def test_skbert_estimators_are_base_subclasses():
    for cls in (skbert.BertSentenceTransformer, skbert.BertTextClassifier):
        assert issubclass(cls, BertEstimatorBase)
        assert cls in REGISTERED


@pytest.mark.parametrize("name", ["BertSentenceTransformer", "BertTextClassifier"])
def test_model_may_be_a_path_object(tiny_bert, name, tmp_path):
    # refused by the parameter check (str only) though checkpoint_dir and memory take paths
    from pathlib import Path

    cls = getattr(skbert, name)
    y = [0, 1] * (len(TEXTS) // 2)
    path_fit = cls(Path(tiny_bert), device="cpu", random_state=0, max_epochs=1)
    str_fit = clone(path_fit).set_params(model=tiny_bert)
    path_fit.fit(TEXTS, y)
    np.testing.assert_array_equal(
        path_fit.transform(TEXTS) if name.endswith("Transformer") else path_fit.predict(TEXTS),
        (str_fit.fit(TEXTS, y).transform if name.endswith("Transformer") else
         str_fit.fit(TEXTS, y).predict)(TEXTS),
    )  # fmt: skip
    path_fit.save(tmp_path / "saved")
    assert skbert.load(tmp_path / "saved").get_params()["model"] == Path(tiny_bert)


def test_a_class_as_model_says_to_pass_a_fitted_instance(tiny_bert):
    est = skbert.BertTextClassifier(skbert.BertSentenceTransformer, device="cpu")
    with pytest.raises(ValueError, match="model=BertSentenceTransformer is a class; pass a fitted"):
        est.fit(TEXTS, [0, 1] * (len(TEXTS) // 2))


def test_a_path_object_to_no_folder_says_what_is_missing(tmp_path):
    from pathlib import Path

    est = skbert.BertSentenceTransformer(Path(tmp_path / "nothing"), device="cpu")
    with pytest.raises(OSError, match=r"no such directory"):  # was AttributeError: startswith
        est.fit(TEXTS)

"""The training settings resolved once per fit (skbert._estimator.training_settings) and the old
spellings' shims (skbert._core.deprecations), without training: each spelling resolves to the
same settings, the warnings say the same and point where they pointed before the redesign."""

import warnings

import pytest
import torch
from sklearn.utils._param_validation import Hidden

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._core import deprecations
from skbert._estimator.training_settings import TrainingSettings, resolve_training_settings
from skbert._training.loop import TrainingConfig


def settings_of(estimator) -> TrainingSettings:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # resolving says nothing: fit's start warns
        return resolve_training_settings(estimator.get_params(deep=False))


MODES = [("full", True, True), ("top", True, False), ("head", True, False), ("none", False, False)]


@pytest.mark.parametrize(
    "cls, fine_tune, trains, train_backbone",
    [(BertSentenceTransformer, *mode) for mode in MODES]
    + [(BertTextClassifier, *mode) for mode in MODES if mode[0] != "none"],  # it always trains
)
def test_fine_tune_with_the_old_spelling_read(cls, fine_tune, trains, train_backbone):
    settings = settings_of(cls(fine_tune=fine_tune))
    assert settings.fine_tune == ("top" if fine_tune == "head" else fine_tune)
    assert settings.trains is trains
    assert settings.train_backbone is train_backbone


@pytest.mark.parametrize("cls", [BertTextClassifier, BertSentenceTransformer])
def test_the_top_learning_rate_with_the_old_keyword_read(cls):
    assert settings_of(cls()).top_learning_rate == 1e-3  # the default
    assert settings_of(cls(top_learning_rate=None)).top_learning_rate is None
    assert settings_of(cls(top_learning_rate=0.2)).top_learning_rate == 0.2
    old = cls(top_learning_rate=0.2, head_learning_rate=0.3)  # the old keyword, when given, wins
    assert settings_of(old).top_learning_rate == 0.3
    assert settings_of(cls(head_learning_rate=None)).top_learning_rate is None


def test_settings_are_frozen_and_give_the_loop_its_config():
    clf = BertTextClassifier(
        fine_tune="head", learning_rate=1e-4, head_learning_rate=0.3, max_epochs=2, batch_size=8
    )
    settings = settings_of(clf)
    with pytest.raises(AttributeError):
        settings.fine_tune = "full"
    device = torch.device("cpu")
    config = settings.loop_config(device, torch.bfloat16, 2, early_stopping=True)
    assert config == TrainingConfig(
        max_epochs=2,
        batch_size=8,
        learning_rate=1e-4,
        layer_lr_decay=1.0,
        top_learning_rate=0.3,
        weight_decay=0.01,
        warmup_fraction=0.1,
        train_backbone=False,
        early_stopping=True,
        verbose=2,
        device=device,
        dtype=torch.bfloat16,
    )


def test_the_constraints_accept_the_old_spellings_and_hide_them():
    constraint = deprecations.fine_tune_constraint({"full", "top"})
    assert constraint.is_satisfied_by("head") and constraint.is_satisfied_by("top")
    assert not constraint.is_satisfied_by("none")
    assert "head" in constraint.deprecated
    rate = deprecations.head_learning_rate_constraint([float, None])
    assert rate[:2] == [float, None] and isinstance(rate[2], Hidden)  # not in error messages
    assert rate[2].constraint.is_satisfied_by("deprecated")


def _warn_from_here(params):
    deprecations.warn_renamed(params, stacklevel=1)  # stacklevel 1: this line


def test_the_warnings_keep_their_text_category_and_stacklevel():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn_from_here({"fine_tune": "head", "head_learning_rate": 0.1})
        _warn_from_here({"fine_tune": "top", "head_learning_rate": "deprecated"})  # silent
    assert [w.category for w in caught] == [FutureWarning, FutureWarning]
    assert str(caught[0].message) == (
        "fine_tune='head' was renamed fine_tune='top' (train the layers on top of the frozen "
        "encoder) in skbert 0.1 and will be removed in 0.3."
    )
    assert str(caught[1].message) == (
        "head_learning_rate was renamed top_learning_rate in skbert 0.1 and will be removed "
        "in 0.3; its value is used as top_learning_rate."
    )
    line = _warn_from_here.__code__.co_firstlineno + 1
    assert all((w.filename, w.lineno) == (__file__, line) for w in caught)


def test_a_fits_warning_points_at_the_users_call_of_fit(tiny_bert):
    """At the user's line, as skbert's other warnings (it was the line in skbert's fit that
    runs the fit: a notebook showed ``self._fit(X, y)`` as its source)."""
    est = BertSentenceTransformer(tiny_bert, device="cpu", head_learning_rate=0.3)
    with pytest.warns(FutureWarning, match="top_learning_rate") as caught:
        est.fit(["a text", "another text"])  # fine_tune="none": nothing trains
    line = test_a_fits_warning_points_at_the_users_call_of_fit.__code__.co_firstlineno + 5
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


@pytest.mark.parametrize("memory", [False, True], ids=["loaded", "cache"])
def test_a_fit_that_trains_nothing_refuses_a_readout_with_weights(tiny_bert, tmp_path, memory):
    est = BertSentenceTransformer(
        tiny_bert, pooling="cnn", device="cpu", memory=tmp_path if memory else None
    )
    with pytest.raises(ValueError, match="weights of its own .* fine_tune='none' trains nothing"):
        est.fit(["a text", "another text"])
    assert not hasattr(est, "readout_")  # all or nothing

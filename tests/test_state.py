"""Explicit state, one prediction path, renamed parameters, defaults that follow the checkpoint,
and what `import skbert` loads."""

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TEXTS
from sklearn.base import clone

from skbert import BertSentenceTransformer, BertTextClassifier
from skbert._estimator.prediction_cache import prediction_cache
from skbert._nn.readout import Readout

POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
X = np.array((POS + NEG) * 3, dtype=object)
Y = np.array((["pos"] * 5 + ["neg"] * 5) * 3, dtype=object)


def test_no_getattr_magic_and_hasattr_loads_nothing(tiny_bert, tmp_path):
    for cls in (BertSentenceTransformer, BertTextClassifier):
        assert "__getattr__" not in vars(cls)
    est = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
    assert not hasattr(est, "network_")  # asking does not load a model
    assert "network_" not in vars(est) and prediction_cache(est).network is None
    vectors = est.transform(["a text that is not cached"])  # a miss loads the encoder
    assert prediction_cache(est).network is not None and vectors.shape == (1, 16)
    assert "network_" not in vars(est)  # into the prediction cache, not the estimator


def test_fit_resets_learned_state(tiny_bert):
    est = BertSentenceTransformer(
        tiny_bert, device="cpu", fine_tune="full", max_epochs=1, batch_size=4, random_state=0
    )
    est.fit(
        np.array([[a, b] for a, b in zip(POS, NEG, strict=True)], dtype=object),
        ["contradiction", "entailment"] * 2 + ["contradiction"],
    )
    assert hasattr(est, "classes_") and hasattr(est, "loss_curve_")
    est.set_params(fine_tune="none").fit(TEXTS)
    for name in ("classes_", "loss_curve_", "n_iter_", "objective_", "output_layer_"):
        assert not hasattr(est, name), name  # a frozen refit keeps nothing of the training
    est.set_params(precision="bf16").transform(TEXTS)
    assert prediction_cache(est).low_precision is not None
    est.fit(TEXTS)
    assert prediction_cache(est).low_precision is None  # the cast copy of the old weights is gone


def test_readout_is_resolved_once(tiny_bert):
    est = BertSentenceTransformer(
        tiny_bert,
        device="cpu",
        layer=(-2, -1),
        max_length=None,
        truncation="chunks",
        chunk_pooling="max",
    ).fit(TEXTS)
    readout = est.readout_
    assert isinstance(readout, Readout) and readout.chunked
    assert readout.layers == (1, 2) == est.layers_ and readout.max_length == 64
    assert readout.output_dim == 32 == est.transform(TEXTS).shape[1]
    with pytest.raises(AttributeError):
        readout.pooling = "max"  # frozen


def test_validation_score_is_what_score_gives(tiny_bert):
    """Early stopping scores the held-out texts with predict()'s code: the kept epoch's
    validation score equals score() on those texts, for fp32 and for a bf16 copy."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import LabelEncoder
    from sklearn.utils import check_random_state

    for precision in ("fp32", "bf16"):
        clf = BertTextClassifier(
            tiny_bert,
            device="cpu",
            precision=precision,
            max_epochs=3,
            early_stopping=True,
            n_iter_no_change=3,
            validation_fraction=0.3,
            learning_rate=5e-3,
            top_learning_rate=5e-2,
            batch_size=4,
            random_state=0,
        )
        clf.fit(X, Y)
        # the same split as fit makes: its seed is drawn from random_state
        seed = int(check_random_state(0).randint(2**31 - 1))
        targets = LabelEncoder().fit_transform(Y)
        _, val_idx = train_test_split(
            np.arange(len(X)), test_size=0.3, stratify=targets, random_state=seed
        )
        assert len(clf.validation_scores_) == 3
        assert clf.best_validation_score_ == clf.score(X[val_idx], Y[val_idx]), precision


def test_deprecated_spellings_warn_and_still_work(tiny_bert):
    common = {"device": "cpu", "max_epochs": 1, "batch_size": 4, "random_state": 0}
    with pytest.warns(FutureWarning, match="fine_tune='top'") as caught:
        old = BertTextClassifier(tiny_bert, fine_tune="head", **common).fit(X, Y)
    assert [Path(w.filename).name for w in caught] == ["test_state.py"]  # the user's fit
    new = BertTextClassifier(tiny_bert, fine_tune="top", **common).fit(X, Y)
    np.testing.assert_array_equal(old.predict_proba(X), new.predict_proba(X))
    with pytest.warns(FutureWarning, match="top_learning_rate"):
        old = BertTextClassifier(tiny_bert, head_learning_rate=0.3, **common).fit(X, Y)
    new = BertTextClassifier(tiny_bert, top_learning_rate=0.3, **common).fit(X, Y)
    np.testing.assert_array_equal(old.predict_proba(X), new.predict_proba(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        BertTextClassifier(tiny_bert, **common).fit(X, Y)  # the new names say nothing


def test_normalize_auto_follows_the_checkpoint(tiny_bert, tmp_path):
    plain = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    assert plain.normalize_ is False  # no sentence-transformers description
    norms = np.linalg.norm(plain.transform(TEXTS), axis=1)
    assert not np.allclose(norms, 1.0)
    model = tmp_path / "st-model"
    shutil.copytree(tiny_bert, model)
    modules = [
        {"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (path, kind) in enumerate(
            [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")]
        )
    ]
    (model / "modules.json").write_text(json.dumps(modules))
    auto = BertSentenceTransformer(str(model), device="cpu").fit(TEXTS)
    assert auto.normalize_ is True
    np.testing.assert_allclose(np.linalg.norm(auto.transform(TEXTS), axis=1), 1.0, rtol=1e-6)
    off = clone(auto).set_params(normalize=False).fit(TEXTS)
    assert off.normalize_ is False
    np.testing.assert_allclose(off.transform(TEXTS), plain.transform(TEXTS), rtol=0, atol=1e-6)


@pytest.mark.real_model
def test_default_model_is_normalised_like_sentence_transformers(packaged_model):
    est = BertSentenceTransformer(device="cpu").fit(["a"])
    assert est.normalize_ is True
    np.testing.assert_allclose(np.linalg.norm(est.transform(TEXTS), axis=1), 1.0, rtol=1e-6)


def test_import_loads_no_transformers_model_code():
    """transformers and the data loaders are imported on first use (torch itself imports
    tqdm, and scikit-learn scipy, so those two come with the required dependencies)."""
    code = (
        "import sys, skbert; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('transformers', 'huggingface_hub') or m.startswith('skbert.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    loaded = eval(out.stdout)
    assert not [m for m in loaded if m.startswith(("transformers", "huggingface_hub"))], loaded
    assert "skbert.datasets" not in loaded and "skbert.metrics" not in loaded, loaded


def test_a_fit_that_deferred_loading_can_start_another_model(tiny_bert, tmp_path):
    """model=fitted works when the fitted estimator's encoder is not loaded yet (memory=)."""
    deferred = BertSentenceTransformer(tiny_bert, device="cpu", memory=tmp_path).fit(TEXTS)
    assert "network_" not in vars(deferred)
    started = BertSentenceTransformer(deferred, device="cpu").fit(TEXTS)
    plain = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS)
    np.testing.assert_array_equal(started.transform(TEXTS), plain.transform(TEXTS))

"""BertTextClassifier on the tiny BERT and ALBERT fixtures."""

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch
from conftest import LONG_TEXT
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skbert import BertTextClassifier
from skbert._estimator import supervised
from skbert._nn.backbone import load_backbone

POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
X = np.array(POS + NEG, dtype=object)
Y = np.array(["pos"] * 5 + ["neg"] * 5, dtype=object)

FAST = {"learning_rate": 5e-3, "top_learning_rate": 5e-2, "batch_size": 4, "device": "cpu"}


def make(model, **params):
    return BertTextClassifier(model, **{**FAST, "random_state": 0, **params})


def test_learns_a_separable_task(tiny_model):
    clf = make(tiny_model, max_epochs=15)
    assert clf.fit(X, Y) is clf
    assert list(clf.classes_) == ["neg", "pos"]
    assert clf.score(X, Y) == 1.0
    assert clf.loss_curve_[-1] < clf.loss_curve_[0]
    assert clf.n_iter_ == 15 and clf.validation_scores_ is None


def test_outputs_have_sklearn_shapes(tiny_bert):
    clf = make(tiny_bert, max_epochs=1).fit(X, Y)
    proba = clf.predict_proba(X)
    assert proba.shape == (10, 2) and np.allclose(proba.sum(1), 1)
    decision = clf.decision_function(X)
    assert decision.shape == (10,)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[(decision > 0).astype(int)])


def test_integer_and_multiclass_labels(tiny_bert):
    y = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    clf = make(tiny_bert, max_epochs=1).fit(X, y)
    assert list(clf.classes_) == [0, 1, 2]
    assert clf.decision_function(X).shape == (10, 3)
    assert set(clf.predict(X)) <= {0, 1, 2}


@pytest.mark.parametrize("pooling", ["cls", "mean", "max", "cnn"])
def test_every_pooling_trains(tiny_model, pooling):
    from transformers import AutoModel

    # 16 epochs at this rate fit the training texts (>= 90 %, last epoch's loss <= 30 % of the
    # first's) for random_state 0-15 with every pooling on both tiny models (measured)
    clf = make(tiny_model, pooling=pooling, max_epochs=16, learning_rate=1e-2, cnn_channels=8)
    clf.fit(X, Y)
    assert clf.score(X, Y) >= 0.9  # chance is 0.5
    assert clf.n_iter_ == 16 and clf.loss_curve_[-1] < 0.5 * clf.loss_curve_[0]
    # full fine-tuning (the default) moved the encoder, not only the layers on top of it
    before = AutoModel.from_pretrained(tiny_model).state_dict()
    after = clf.network_.backbone.state_dict()
    changed = [k for k, v in before.items() if not np.array_equal(after[k], v)]
    assert len(changed) > len(before) // 2, changed


def test_cnn_width_follows_its_parameters(tiny_bert):
    clf = make(tiny_bert, pooling="cnn", cnn_kernel_sizes=(2, 3), cnn_channels=5, max_epochs=1)
    with warnings.catch_warnings():  # an even width trains and predicts without torch's warning
        warnings.filterwarnings("error", message=".*padding='same'")
        clf.fit(X, Y)
        clf.predict(X)
    assert clf.network_.encoder.output_dim == 10


@pytest.mark.parametrize(
    "truncation, chunk_pooling",
    [
        ("head", "mean"),
        ("tail", "mean"),
        ("head+tail", "mean"),
        ("chunks", "mean"),
        ("chunks", "max"),
        ("chunks", "attention"),
    ],
)
def test_every_truncation_trains_on_long_texts(tiny_model, truncation, chunk_pooling):
    long_x = np.array([LONG_TEXT + " " + x for x in X], dtype=object)
    clf = make(
        tiny_model,
        truncation=truncation,
        chunk_pooling=chunk_pooling,
        max_length=16,
        head_length=4,
        max_chunks=12,
        max_epochs=2,
    )
    clf.fit(long_x, Y)
    assert np.isfinite(clf.loss_curve_).all()
    assert clf.predict_proba(long_x).shape == (10, 2)


@pytest.mark.parametrize(
    "layer, combine",
    [(0, "concat"), (1, "concat"), ((-2, -1), "concat"), ((-2, -1), "mean"), ((-2, -1), "max")],
)
def test_layers(tiny_bert, layer, combine):
    clf = make(tiny_bert, layer=layer, layer_combine=combine, max_epochs=1).fit(X, Y)
    width = 32 if isinstance(layer, tuple) and combine == "concat" else 16
    assert clf.network_.output_layer.in_features == width


def test_fine_tune_head_keeps_the_encoder_frozen(tiny_model):
    clf = make(tiny_model, max_epochs=1, fine_tune="top")
    before = {k: v.clone() for k, v in load_backbone(tiny_model)[1].state_dict().items()}
    clf.fit(X, Y)
    after = clf.network_.backbone.state_dict()
    assert all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)
    full = make(tiny_model, max_epochs=1, fine_tune="full").fit(X, Y)
    changed = full.network_.backbone.state_dict()
    assert any(not np.array_equal(before[k].numpy(), changed[k].numpy()) for k in before)


def test_layer_lr_decay_changes_training(tiny_bert):
    plain = make(tiny_bert, max_epochs=2).fit(X, Y).predict_proba(X)
    decayed = make(tiny_bert, max_epochs=2, layer_lr_decay=0.5).fit(X, Y).predict_proba(X)
    assert not np.allclose(plain, decayed)


def test_same_seed_same_model_bit_for_bit(tiny_model):
    a = make(tiny_model, max_epochs=2, random_state=3).fit(X, Y).predict_proba(X)
    b = make(tiny_model, max_epochs=2, random_state=3).fit(X, Y).predict_proba(X)
    c = make(tiny_model, max_epochs=2, random_state=4).fit(X, Y).predict_proba(X)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_fit_does_not_touch_global_torch_rng(tiny_bert):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    make(tiny_bert, max_epochs=1).fit(X, Y)
    assert torch.rand(1) == expected


def test_early_stopping_restores_the_best_epoch(tiny_bert):
    clf = make(
        tiny_bert, max_epochs=8, early_stopping=True, validation_fraction=0.4, n_iter_no_change=2
    )
    clf.fit(X, Y)
    assert len(clf.validation_scores_) == clf.n_iter_ <= 8
    assert clf.best_validation_score_ == max(clf.validation_scores_)
    stale = clf.n_iter_ - 1 - int(np.argmax(clf.validation_scores_))
    assert stale <= 2


def test_early_stopping_scores_each_epoch_with_its_own_weights(tiny_bert, monkeypatch):
    """A validation pass during training predicts what a fresh copy of that epoch's network
    predicts: the CPU inference plans of the packed weights are rebuilt after each update."""
    real = supervised.predict_rows
    passes = []

    def compared(network, *args, **kwargs):
        got = real(network, *args, **kwargs)
        passes.append(np.array_equal(got, real(copy.deepcopy(network), *args, **kwargs)))
        return got

    monkeypatch.setattr(supervised, "predict_rows", compared)
    clf = make(tiny_bert, max_epochs=3, early_stopping=True, validation_fraction=0.4)
    clf.fit(X, Y)
    assert passes == [True] * 3


def test_class_weight(tiny_bert):
    y = np.array(["pos"] * 8 + ["neg"] * 2, dtype=object)
    plain = make(tiny_bert, max_epochs=2).fit(X, y)
    balanced = make(tiny_bert, max_epochs=2, class_weight="balanced").fit(X, y)
    assert balanced.predict_proba(X)[:, 0].mean() > plain.predict_proba(X)[:, 0].mean()
    dict_weighted = make(tiny_bert, max_epochs=2, class_weight={"neg": 4.0}).fit(X, y)
    assert dict_weighted.predict_proba(X)[:, 0].mean() > plain.predict_proba(X)[:, 0].mean()
    with pytest.raises(ValueError, match="class_weight has labels \\['neutral'\\]"):
        make(tiny_bert, class_weight={"neutral": 2.0}).fit(X, y)


def test_class_weight_counts_in_batches_of_one_class(tiny_bert):
    """torch's weighted mean divided a batch's loss by its own sum of weights: in a batch of
    one class (batch_size=1 here; grouping by length makes them wherever a class's texts are
    longer) the weight cancelled out, and the fit was that of class_weight=None exactly."""
    plain = make(tiny_bert, max_epochs=2, batch_size=1).fit(X, Y)
    weighted = make(tiny_bert, max_epochs=2, batch_size=1, class_weight={"neg": 50.0})
    weighted.fit(X, Y)
    neg = list(plain.classes_).index("neg")
    assert weighted.predict_proba(X)[:, neg].mean() > plain.predict_proba(X)[:, neg].mean()


def test_the_weighted_loss_of_a_batch(tiny_bert):
    """Each row's cross-entropy times its class's weight, summed, over the batch's size times
    the mean weight of y's rows (returned as what the loss is a mean over)."""
    clf = make(tiny_bert, class_weight={"neg": 3.0})
    y = np.array(["pos"] * 6 + ["neg"] * 2, dtype=object)
    targets = clf._learn_targets(y, continuing=False, weights=None)  # classes_: ['neg', 'pos']
    loss = clf._training_loss(targets, torch.device("cpu"), None, np.arange(len(targets)))
    logits = torch.tensor([[0.3, -0.2], [1.0, 0.5], [-0.4, 0.9]])
    rows = np.array([6, 0, 7])  # neg, pos, neg
    value, size = loss(logits, rows)
    each = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 0]), reduction="none")
    mean_weight = (6 * 1.0 + 2 * 3.0) / 8
    assert size == pytest.approx(3 * mean_weight)
    expected = (3.0 * each[0] + 1.0 * each[1] + 3.0 * each[2]) / (3 * mean_weight)
    assert float(value) == pytest.approx(float(expected), rel=1e-6)


def test_class_weight_of_every_class_fits_folds_without_a_rare_one(tiny_bert):
    # as compute_class_weight: a fold without the rare class was refused
    weights = {"pos": 1.0, "neg": 2.0, "rare": 10.0}
    fold = make(tiny_bert, max_epochs=1, class_weight=weights).fit(X, Y)
    plain = make(tiny_bert, max_epochs=1, class_weight={"pos": 1.0, "neg": 2.0}).fit(X, Y)
    np.testing.assert_array_equal(fold.predict_proba(X), plain.predict_proba(X))
    with pytest.raises(
        ValueError, match=r"\['rare'\] that are not in y, and y's classes \['pos'\]"
    ):
        make(tiny_bert, class_weight={"neg": 2.0, "rare": 10.0}).fit(X, Y)
    with pytest.raises(ValueError, match="gives every class of y weight 0"):
        make(tiny_bert, class_weight={"neg": 0, "pos": 0.0}).fit(X, Y)


def test_batches_of_classes_weighted_0_only_have_no_loss(tiny_bert):
    # the weighted mean of such a batch was 0 / 0: "diverged" (loss NaN) on batch order
    texts = np.r_[X, X + " !", X + " ?"]
    y = np.array(["noise"] * 28 + ["pos", "neg"], dtype=object)
    clf = make(tiny_bert, max_epochs=2, class_weight={"noise": 0.0}).fit(texts, y)
    assert np.isfinite(clf.loss_curve_).all()
    assert clf.predict_proba(texts).shape == (30, 3)


def test_warm_start_names_the_labels_that_differ(tiny_bert):
    clf = make(tiny_bert, max_epochs=1, warm_start=True).fit(X, Y)
    y = np.where(Y == "pos", "positive", Y)
    with pytest.raises(
        ValueError, match=r"\(2\): new in y \['positive'\]; absent from y \['pos'\]"
    ):
        clf.fit(X, y)
    with pytest.raises(ValueError, match="y is a multi-label indicator and the classifier was fit"):
        clf.fit(X, np.array([[1, 0], [0, 1]] * 5))


def test_multilabel_probabilities_of_extreme_logits_warn_nothing(tiny_bert):
    clf = make(tiny_bert, max_epochs=1).fit(X, np.array([[1, 0], [0, 1]] * 5))
    with torch.no_grad():
        clf.network_.output_layer.bias.copy_(torch.tensor([800.0, -800.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exp(800) overflowed: RuntimeWarning
        np.testing.assert_array_equal(clf.predict_proba(X[:2]), [[1.0, 0.0], [1.0, 0.0]])


def test_configuration_errors_come_before_the_model_loads(tiny_bert, monkeypatch):
    """What y and X alone show wrong is refused before the encoder loads (and before
    ``mlm_steps`` train it)."""

    def loaded(*args, **kwargs):
        raise AssertionError("the encoder was loaded before the error")

    monkeypatch.setattr(BertTextClassifier, "_build_encoder", loaded)
    with pytest.raises(ValueError, match="class_weight has labels \\['neutral'\\]"):
        make(tiny_bert, class_weight={"neutral": 2.0}, mlm_steps=5).fit(X, Y)
    with pytest.raises(ValueError, match="truncation='chunks' .* sentence pairs"):
        make(tiny_bert, truncation="chunks", mlm_steps=5).fit(np.stack([X, X], axis=1), Y)
    indicator = np.array([[1, 0], [0, 1]] * 5)
    for weight in ("balanced", {0: 1.0, 1: 50.0}):  # both were ignored without a word
        with pytest.raises(ValueError, match="multi-label indicator of 2 labels; use class_w"):
            make(tiny_bert, class_weight=weight).fit(X, indicator)


def test_multilabel(tiny_model):
    y = np.array([[1, 0], [1, 1], [1, 0], [1, 1], [1, 0], [0, 0], [0, 1], [0, 0], [0, 1], [0, 0]])
    clf = make(tiny_model, max_epochs=15).fit(X, y)
    assert list(clf.classes_) == [0, 1]
    proba = clf.predict_proba(X)
    assert proba.shape == (10, 2) and ((proba >= 0) & (proba <= 1)).all()
    assert clf.predict(X).shape == (10, 2)
    assert (clf.predict(X)[:, 0] == y[:, 0]).mean() >= 0.9


def test_sentence_pairs(tiny_model):
    pairs = np.array([[a, b] for a, b in zip(POS + NEG, NEG + POS, strict=True)], dtype=object)
    clf = make(tiny_model, max_epochs=2).fit(pairs, Y)
    assert clf.predict(pairs).shape == (10,)
    with pytest.raises(ValueError, match="2 columns"):
        clf.predict(np.array([["a", "b", "c"]], dtype=object))


def test_warm_start_continues_training(tiny_bert):
    clf = make(tiny_bert, max_epochs=1, warm_start=True).fit(X, Y)
    network = clf.network_
    first = clf.predict_proba(X)
    clf.fit(X, Y)
    # a copy of the fitted network trained on (the fitted one is kept until the fit succeeds);
    # same seed, so a fit that started anew would repeat `first`
    assert clf.network_ is not network and not np.array_equal(first, clf.predict_proba(X))
    with pytest.raises(ValueError, match="warm_start=True but y's labels"):
        clf.fit(X, np.where(Y == "pos", "good", "bad"))
    cold = make(tiny_bert, max_epochs=1).fit(X, Y)
    cold_network = cold.network_
    cold.fit(X, Y)
    assert cold.network_ is not cold_network


@pytest.mark.parametrize(
    "y, match",
    [
        (["pos"] * 10, "single class"),
        (["pos"] * 9 + [None], r"y\[9\] is missing"),
        ([1.0] * 9 + [float("nan")], r"y\[9\] is missing"),
        (np.linspace(0, 1, 10), "continuous"),
        (["pos"] * 9, "X has 10 samples but y has 9"),
    ],
)
def test_bad_labels(tiny_bert, y, match):
    with pytest.raises(ValueError, match=match):
        make(tiny_bert).fit(X, y)


def test_predict_before_fit():
    with pytest.raises(NotFittedError):
        BertTextClassifier().predict(["a"])


def test_bf16_training_runs(tiny_bert):
    clf = make(tiny_bert, max_epochs=2, precision="bf16").fit(X, Y)
    assert np.isfinite(clf.loss_curve_).all()
    assert clf.predict_proba(X).dtype == np.float64


def test_verbose_shows_loss(tiny_bert, capsys):
    make(tiny_bert, max_epochs=1, verbose=1).fit(X, Y)
    err = capsys.readouterr().err
    assert "Fine-tuning epoch 1/1" in err and "loss=" in err


def test_pickle_round_trip(tiny_model):
    clf = make(tiny_model, max_epochs=1, pooling="cnn", cnn_channels=4).fit(X, Y)
    loaded = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    np.testing.assert_array_equal(clone(clf).fit(X, Y).predict_proba(X), clf.predict_proba(X))


def test_pipeline_grid_search_over_pooling_and_truncation(tiny_bert):
    pipe = make_pipeline(
        FunctionTransformer(lambda x: x), make(tiny_bert, max_epochs=1, max_length=12)
    )
    grid = GridSearchCV(
        pipe,
        {
            "berttextclassifier__pooling": ["cls", "cnn"],
            "berttextclassifier__truncation": ["head", "chunks"],
        },
        cv=2,
        error_score="raise",
    )
    grid.fit(X, Y)
    assert len(grid.cv_results_["params"]) == 4
    assert np.isfinite(grid.cv_results_["mean_test_score"]).all()


def test_bf16_inference_copy_follows_new_weights(tiny_bert):
    clf = make(tiny_bert, max_epochs=1, warm_start=True, precision="bf16").fit(X, Y)
    first = clf.predict_proba(X)
    clf.fit(X, Y)
    assert not np.array_equal(first, clf.predict_proba(X))
    fp32 = clf.set_params(precision="fp32").predict_proba(X)
    np.testing.assert_allclose(clf.set_params(precision="bf16").predict_proba(X), fp32, atol=0.05)

"""BertSentenceTransformer with fine_tune="top" / "full" (SBERT-style siamese training)."""

import pickle

import numpy as np
import pytest
from conftest import LONG_TEXT
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from skbert import BertSentenceTransformer
from skbert.metrics import sts_pearson_scorer, sts_spearman_scorer

POS = ["great film , love it", "a very good movie", "good dog", "love the cat", "great movie"]
NEG = ["terrible film , hate it", "a very bad movie", "bad dog", "hate the mat", "not good"]
TEXTS = np.array(POS + NEG, dtype=object)
LABELS = np.array([1] * 5 + [0] * 5)
# pairs of the same sentiment are similar (score 4-5), of opposite sentiment not (0-1)
PAIRS = np.array(
    [[POS[i], POS[(i + 1) % 5]] for i in range(5)]
    + [[NEG[i], NEG[(i + 2) % 5]] for i in range(5)]
    + [[POS[i], NEG[i]] for i in range(5)]
    + [[NEG[i], POS[(i + 3) % 5]] for i in range(5)],
    dtype=object,
)
SCORES = np.array([5.0, 4.5, 4.0, 5.0, 4.5] * 2 + [0.0, 0.5, 1.0, 0.0, 0.5] * 2)
NLI = np.array(["entailment"] * 10 + ["contradiction"] * 10, dtype=object)

FAST = {
    "learning_rate": 3e-3,
    "top_learning_rate": 3e-2,
    "batch_size": 4,
    "device": "cpu",
    "random_state": 0,
}


def make(model, **params):
    return BertSentenceTransformer(model, **{**FAST, "fine_tune": "full", **params})


def test_cosine_objective_learns_scores(tiny_model):
    before = make(tiny_model, fine_tune="none").fit(PAIRS).score(PAIRS, SCORES)
    est = make(tiny_model, max_epochs=8).fit(PAIRS, SCORES)
    assert est.objective_ == "cosine" and est.output_layer_ is None
    assert est.score_range_ == (0.0, 5.0)
    assert est.loss_curve_[-1] < est.loss_curve_[0]
    assert est.score(PAIRS, SCORES) > max(before, 0.5)
    assert sts_spearman_scorer(est, PAIRS, SCORES) == est.score(PAIRS, SCORES)
    assert -1 <= sts_pearson_scorer(est, PAIRS, SCORES) <= 1
    # a generator of pairs is read once by the scorers (and score), as by similarity(): they
    # read it twice and said it was empty
    first, second = PAIRS[:, 0], PAIRS[:, 1]
    assert est.score(zip(first, second, strict=True), SCORES) == est.score(PAIRS, SCORES)
    assert sts_spearman_scorer(est, (p for p in PAIRS), SCORES) == est.score(PAIRS, SCORES)


def test_pair_labels_train_the_nli_objective(tiny_model):
    est = make(tiny_model, max_epochs=3).fit(PAIRS, NLI)
    assert est.objective_ == "pair-softmax"
    assert list(est.classes_) == ["contradiction", "entailment"]
    assert est.output_layer_.in_features == 3 * 16
    assert est.transform(TEXTS).shape == (10, 16)  # the head is not part of the vectors


@pytest.mark.parametrize("data", ["texts with labels", "pairs with labels"])
def test_top_on_a_pooling_without_weights_is_refused_for_softmax_objectives_too(tiny_bert, data):
    """ "top" with mean pooling trained the softmax output layer only, and transform gave the
    frozen model's vectors: a grid over fine_tune=["none", "top"] paid for two equal models."""
    X, y = (TEXTS, LABELS) if data == "texts with labels" else (PAIRS, NLI)
    with pytest.raises(ValueError, match=r"there are none \(objective='(pair-)?softmax''s output"):
        make(tiny_bert, pooling="mean", fine_tune="top").fit(X, y)
    one, two = (
        make(tiny_bert, pooling="cnn", cnn_channels=4, fine_tune="top", max_epochs=epochs)
        .fit(X, y)
        .transform(TEXTS)
        for epochs in (1, 2)
    )
    assert not np.array_equal(one, two)  # the CNN, which the vectors pass through, trains


def test_single_texts_with_labels_train_softmax(tiny_model):
    est = make(tiny_model, max_epochs=3).fit(TEXTS, LABELS)
    assert est.objective_ == "softmax" and est.output_layer_.out_features == 2
    assert est.transform(TEXTS).shape == (10, 16)


def test_top_with_chunk_attention_on_unchunked_texts_is_refused(tiny_bert):
    """chunk_pooling='attention' reads windows only under truncation='chunks': with 'head',
    fine_tune='top' and a weight-free pooling trained the unused attention for every epoch and
    transform gave the frozen vectors (seen: equal to fine_tune='none''s)."""
    for truncation, max_chunks in [("head", None), ("chunks", 1)]:  # one window: weight 1
        with pytest.raises(ValueError, match="chunk_pooling='attention' with truncation="):
            make(
                tiny_bert, pooling="mean", fine_tune="top", chunk_pooling="attention",
                truncation=truncation, max_chunks=max_chunks, max_length=8,
            ).fit(TEXTS, LABELS)  # fmt: skip
    long = [f"{text} {text} {text}" for text in TEXTS]  # several windows of 8 tokens each
    chunked = make(
        tiny_bert, pooling="mean", fine_tune="top", chunk_pooling="attention",
        truncation="chunks", max_length=8, max_epochs=1,
    ).fit(long, LABELS)  # fmt: skip
    frozen = make(tiny_bert, fine_tune="none", truncation="chunks", max_length=8).fit(long)
    assert not np.allclose(chunked.transform(long), frozen.transform(long))


@pytest.mark.parametrize("pooling", ["cls", "mean", "max", "cnn"])
@pytest.mark.parametrize("fine_tune", ["top", "full"])
def test_every_pooling_and_fine_tune_value(tiny_bert, pooling, fine_tune):
    if fine_tune == "top" and pooling != "cnn":
        with pytest.raises(ValueError, match="fine_tune='top' trains the weights on top"):
            make(tiny_bert, pooling=pooling, fine_tune=fine_tune).fit(PAIRS, SCORES)
        return
    if fine_tune == "full":
        check_full_fine_tuning(tiny_bert, pooling)
        return
    est = make(tiny_bert, pooling=pooling, fine_tune=fine_tune, cnn_channels=6).fit(PAIRS, SCORES)
    out = est.transform(TEXTS)
    assert out.shape == (10, 18 if pooling == "cnn" else 16)
    # the encoder is untouched
    plain = make(tiny_bert, fine_tune="none").fit(TEXTS)
    for key, value in plain.network_.backbone.state_dict().items():
        np.testing.assert_array_equal(est.network_.backbone.state_dict()[key], value)


def check_full_fine_tuning(model, pooling):
    """Full fine-tuning with ``pooling`` learns a learnable task, end to end.

    The sentiment labels of TEXTS are learnable with every pooling: 16 epochs at this rate
    reach 100 % on the training texts for random_state 0-15 (tiny BERT; 0-7 tiny ALBERT), with
    the last epoch's loss at most 6 % of the first's (measured); the thresholds below leave a
    wide margin.
    """
    import torch

    est = make(model, pooling=pooling, cnn_channels=6, max_epochs=16, learning_rate=1e-2)
    est.fit(TEXTS, LABELS)
    assert est.objective_ == "softmax"
    out = est.transform(TEXTS)
    assert out.shape == (10, 18 if pooling == "cnn" else 16)
    assert est.n_iter_ == 16 and est.loss_curve_[-1] < 0.5 * est.loss_curve_[0]
    # the output layer, applied to what transform returns, predicts the training labels: the
    # vectors come from the trained encoder and pooling, pooled as in training
    with torch.no_grad():
        logits = est.output_layer_(torch.from_numpy(out)).numpy()
    assert (est.classes_[logits.argmax(1)] == LABELS).mean() >= 0.9
    # the encoder itself trained
    plain = make(model, pooling="mean" if pooling == "cnn" else pooling, fine_tune="none")
    plain.fit(TEXTS)
    before = plain.network_.backbone.state_dict()
    after = est.network_.backbone.state_dict()
    changed = [k for k, v in before.items() if not np.array_equal(after[k], v)]
    assert len(changed) > len(before) // 2, changed
    if pooling != "cnn":  # the vectors moved away from the frozen encoder's
        assert np.abs(out - plain.transform(TEXTS)).max() > 0.1


def test_chunk_attention_trains_with_head_only(tiny_model):
    texts = np.array([LONG_TEXT + " " + t for t in TEXTS], dtype=object)
    est = make(
        tiny_model,
        truncation="chunks",
        chunk_pooling="attention",
        max_length=16,
        max_chunks=6,
        fine_tune="top",
        max_epochs=1,
    )
    est.fit(texts, LABELS)
    assert est.transform(texts).shape == (10, 16)
    assert np.isfinite(est.loss_curve_).all()


def test_same_seed_same_model(tiny_model):
    a = make(tiny_model, max_epochs=2).fit(PAIRS, SCORES).transform(TEXTS)
    b = make(tiny_model, max_epochs=2).fit(PAIRS, SCORES).transform(TEXTS)
    c = make(tiny_model, max_epochs=2, random_state=1).fit(PAIRS, SCORES).transform(TEXTS)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_pickle_round_trip_after_training(tiny_model):
    est = make(tiny_model, pooling="cnn", cnn_channels=4, max_epochs=1).fit(PAIRS, NLI)
    loaded = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(loaded.transform(TEXTS), est.transform(TEXTS))
    np.testing.assert_array_equal(loaded.similarity(PAIRS), est.similarity(PAIRS))


def test_warm_start_continues(tiny_bert):
    est = make(tiny_bert, max_epochs=1, warm_start=True).fit(PAIRS, SCORES)
    network, first = est.network_, est.transform(TEXTS)
    est.fit(PAIRS, SCORES)
    # a copy trained on; same seed, so a fit that started anew would repeat `first`
    assert est.network_ is not network and not np.array_equal(first, est.transform(TEXTS))


def test_warm_start_refuses_scores_and_labels_the_first_fit_did_not_have(tiny_bert):
    """Scores past the first fit's range would ask for cosines above 1 (a 0-1 fit, then 0-5:
    the loss was 20x a fresh fit's); new labels have no output of their own."""
    est = make(tiny_bert, max_epochs=1, warm_start=True).fit(PAIRS, SCORES / 5)
    assert est.score_range_ == (0.0, 1.0)
    before = est.transform(TEXTS)
    with pytest.raises(ValueError, match=r"keeps the score range \(0, 1\) .* from 0 to 5: scale"):
        est.fit(PAIRS, SCORES)
    np.testing.assert_array_equal(est.transform(TEXTS), before)  # the fitted model stays
    est.fit(PAIRS, SCORES / 10)  # within the range: trains on
    nli = make(tiny_bert, max_epochs=1, warm_start=True).fit(PAIRS, NLI)
    with pytest.raises(ValueError, match=r"labels the model was not fitted with: \['other'\]"):
        nli.fit(PAIRS, np.where(NLI == NLI[0], "other", NLI))


def test_warm_start_nli_then_sts_keeps_encoder_and_starts_new_head(tiny_bert):
    est = make(tiny_bert, pooling="cnn", cnn_channels=4, max_epochs=1).fit(PAIRS, NLI)
    nli_state = {k: v.clone() for k, v in est.network_.state_dict().items()}
    est.set_params(warm_start=True).fit(PAIRS, SCORES)
    assert est.objective_ == "cosine" and est.output_layer_ is None
    assert est.score_range_ == (0.0, 5.0) and not hasattr(est, "classes_")
    # training continued from the NLI encoder: same start as a fresh STS fit would not have
    fresh = make(tiny_bert, pooling="cnn", cnn_channels=4, max_epochs=1).fit(PAIRS, SCORES)
    assert not np.array_equal(fresh.transform(TEXTS), est.transform(TEXTS))
    changed = [k for k, v in est.network_.state_dict().items() if not v.equal(nli_state[k])]
    assert changed  # and it trained
    # back to labels: a new head over the current classes, score range dropped
    est.fit(PAIRS, NLI)
    assert est.objective_ == "pair-softmax" and not hasattr(est, "score_range_")


def test_objective_errors(tiny_bert):
    with pytest.raises(ValueError, match="pass y"):
        make(tiny_bert).fit(PAIRS)
    with pytest.raises(ValueError, match="needs class labels"):
        make(tiny_bert, objective="pair-softmax").fit(PAIRS, SCORES)
    with pytest.raises(ValueError, match="needs sentence pairs"):
        make(tiny_bert, objective="cosine").fit(TEXTS, LABELS.astype(float))
    with pytest.raises(ValueError, match="takes single texts"):
        make(tiny_bert, objective="softmax").fit(PAIRS, NLI)
    with pytest.raises(ValueError, match="X has 20 samples but y has 3"):
        make(tiny_bert).fit(PAIRS, SCORES[:3])
    with pytest.raises(ValueError, match="similarity takes sentence pairs"):
        make(tiny_bert, fine_tune="none").fit(TEXTS).similarity(TEXTS)


def test_grid_search_with_sts_scorer(tiny_bert):
    grid = GridSearchCV(
        make(tiny_bert, max_epochs=1),
        {"pooling": ["cls", "mean"]},
        scoring=sts_spearman_scorer,
        cv=2,
        error_score="raise",
    )
    grid.fit(PAIRS, SCORES)
    assert np.isfinite(grid.cv_results_["mean_test_score"]).all()


def test_pipeline_compares_trained_poolings(tiny_bert):
    pipe = make_pipeline(
        make(tiny_bert, max_epochs=1, cnn_channels=4), LogisticRegression(max_iter=500)
    )
    grid = GridSearchCV(
        pipe,
        {"bertsentencetransformer__pooling": ["cls", "mean", "cnn"]},
        cv=2,
        error_score="raise",
    )
    grid.fit(TEXTS, LABELS)
    assert len(grid.cv_results_["params"]) == 3


def test_pair_objectives_read_each_side_alone_so_it_may_be_chunked(tiny_bert):
    """The pair objectives, similarity and score encode each side as a text of its own: with
    truncation="chunks" fit(pairs, scores) was refused, and so was a grid over truncation
    scored by the estimator's own STS score; transform(pairs), one joint input, is refused."""
    pairs = np.array([[f"{a} {LONG_TEXT}", b] for a, b in PAIRS], dtype=object)
    est = make(tiny_bert, truncation="chunks", max_length=16, max_epochs=1).fit(pairs, SCORES)
    assert est.objective_ == "cosine"
    u, v = est.transform(pairs[:, 0]), est.transform(pairs[:, 1])
    cosine = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    np.testing.assert_allclose(est.similarity(pairs), cosine, rtol=1e-5, atol=1e-6)
    assert np.isfinite(est.score(pairs, SCORES))
    with pytest.raises(ValueError, match="truncation='chunks' .* sentence pairs"):
        est.transform(pairs)
    search = GridSearchCV(
        make(tiny_bert, max_length=16, max_epochs=1), {"truncation": ["head", "chunks"]}, cv=2
    ).fit(pairs, SCORES)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_normalize_auto_keeps_the_checkpoints_answer_when_it_is_gone(tiny_bert, tmp_path):
    """normalize='auto' read the checkpoint's modules.json again at every fit: a warm start
    of a loaded fit, or model=that fit, left unit vectors unnormalised once the folder was
    gone (norms 2.4), without a word."""
    import json
    import shutil

    import skbert

    folder = tmp_path / "normalizing"
    shutil.copytree(tiny_bert, folder)
    kinds = ["Transformer", "Pooling", "Normalize"]
    modules = [{"idx": i, "type": f"sentence_transformers.models.{k}"} for i, k in enumerate(kinds)]
    (folder / "modules.json").write_text(json.dumps(modules))
    est = make(str(folder), max_epochs=1, warm_start=True).fit(TEXTS, LABELS)
    classifier = skbert.BertTextClassifier(str(folder), **FAST, max_epochs=1).fit(TEXTS, LABELS)
    assert est.normalize_
    loaded = skbert.load(est.save(tmp_path / "saved"))
    shutil.rmtree(folder)
    loaded.fit(TEXTS, LABELS)  # continues the fitted network
    assert loaded.normalize_
    np.testing.assert_allclose(np.linalg.norm(loaded.transform(TEXTS), axis=1), 1, rtol=1e-5)
    assert make(loaded, fine_tune="none").fit(TEXTS).normalize_
    with pytest.warns(UserWarning, match=r"cannot tell .* the checkpoint is not found"):
        assert not make(classifier, fine_tune="none").fit(TEXTS).normalize_

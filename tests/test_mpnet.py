"""The real all-mpnet-base-v2 (MPNet, 12 x 768, 110 M parameters), loaded by its hub id from the
Hugging Face cache (``python scripts/fetch_mpnet.py`` installs it; skipped where it is absent).

Kept short for CI: few texts, short inputs, one training step per epoch (two epochs).
"""

from __future__ import annotations

import numpy as np
import pytest

from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor

pytestmark = pytest.mark.real_mpnet

TEXTS = [
    "A man is playing a guitar.",
    "A woman is slicing an onion in the kitchen.",
    "Stocks fell sharply on Monday after the report.",
    "short",
    "",
    "The cat sat on the mat while the dog slept by the fire. " * 6,
]


@pytest.fixture(scope="module")
def mpnet_transformer(real_mpnet):
    return BertSentenceTransformer(model=real_mpnet, device="cpu").fit(["a"])


def test_vectors_equal_sentence_transformers(real_mpnet, mpnet_transformer):
    st = pytest.importorskip("sentence_transformers", reason="peer library not installed")
    ours = mpnet_transformer.transform(TEXTS)
    peer = st.SentenceTransformer(real_mpnet, device="cpu").encode(TEXTS, batch_size=32)
    assert ours.shape == peer.shape == (len(TEXTS), 768)
    cosine = (ours * peer).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(peer, axis=1)
    assert cosine.min() >= 0.99999
    assert np.abs(ours - peer).max() <= 1e-5  # seen: 1.6e-7


def test_normalize_auto_follows_its_normalize_module(real_mpnet, mpnet_transformer):
    from skbert._nn.backbone import checkpoint_normalizes

    assert checkpoint_normalizes(real_mpnet)  # modules.json ends in Normalize
    auto = mpnet_transformer.transform(TEXTS[:3])
    np.testing.assert_allclose(np.linalg.norm(auto, axis=1), 1.0, rtol=1e-6)
    raw = BertSentenceTransformer(model=real_mpnet, normalize=False, device="cpu")
    raw = raw.fit(["a"]).transform(TEXTS[:3])
    assert np.abs(np.linalg.norm(raw, axis=1) - 1.0).min() > 1e-3
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), auto, atol=1e-6)


def test_classifier_fine_tunes_a_few_steps(real_mpnet):
    X = ["a great film", "a wonderful movie", "a terrible film", "an awful movie"] * 2
    y = [1, 1, 0, 0] * 2
    clf = BertTextClassifier(
        model=real_mpnet,
        max_length=8,
        batch_size=8,
        max_epochs=2,
        learning_rate=1e-4,
        random_state=0,
        device="cpu",
    ).fit(X, y)
    assert len(clf.loss_curve_) == 2 and clf.loss_curve_[1] < clf.loss_curve_[0]
    assert clf.predict_proba(X).shape == (len(X), 2)


def test_sentence_regression_fine_tunes_a_few_steps(real_mpnet):
    """SBERT's regression objective (pairs with similarity scores, cosine loss)."""
    pairs = np.array(
        [
            ["a man plays a guitar", "a man is playing music"],
            ["a dog runs in a park", "the stock market fell"],
            ["a woman cuts an onion", "someone is chopping vegetables"],
            ["children play football", "the bank raised its rates"],
        ]
    )
    scores = np.array([4.5, 0.2, 4.0, 0.1])
    est = BertSentenceTransformer(
        model=real_mpnet,
        fine_tune="full",
        max_length=10,
        batch_size=4,
        max_epochs=2,
        learning_rate=5e-5,
        random_state=0,
        device="cpu",
    ).fit(pairs, scores)
    assert est.objective_ == "cosine"
    assert len(est.loss_curve_) == 2 and est.loss_curve_[1] < est.loss_curve_[0]


def test_cross_encoder_regressor_fine_tunes_a_few_steps(real_mpnet):
    """BertTextRegressor reads each pair in one input (a cross-encoder) and learns."""
    pairs = np.array(
        [
            ["a man plays the guitar", "a person plays an instrument"],
            ["a man plays the guitar", "the stock market fell"],
            ["a woman cuts an onion", "someone is chopping vegetables"],
            ["children play football", "the bank raised its rates"],
        ]
    )
    scores = np.array([4.5, 0.2, 4.0, 0.1])
    reg = BertTextRegressor(
        model=real_mpnet,
        max_length=16,
        batch_size=4,
        max_epochs=2,
        learning_rate=5e-5,
        early_stopping=False,
        random_state=0,
        device="cpu",
    ).fit(pairs, scores)
    assert len(reg.loss_curve_) == 2 and reg.loss_curve_[1] < reg.loss_curve_[0]
    predicted = reg.predict(pairs)
    assert predicted.shape == (4,) and np.isfinite(predicted).all()


def test_further_pretraining_says_the_masked_lm_head_starts_from_random(real_mpnet, tmp_path):
    from skbert.pretraining import load_masked_lm

    with pytest.warns(UserWarning, match=r"no trained masked-LM head: \d+ weights.*lm_head"):
        tokenizer, mlm = load_masked_lm(real_mpnet)
    assert type(mlm).__name__ == "MPNetForMaskedLM" and tokenizer.mask_token == "<mask>"
    # the output projection is tied to the (trained) word embeddings
    assert mlm.get_output_embeddings().weight is mlm.get_input_embeddings().weight

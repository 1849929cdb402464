"""The packaged all-MiniLM-L6-v2 on the shared evaluation data (extra 'models', SKBERT_DATA)."""

import numpy as np
import pytest

from skbert import BertSentenceTransformer
from skbert.datasets import load_demo_sentiment, load_stsb
from skbert.metrics import cosine_spearman

pytestmark = [pytest.mark.real_model, pytest.mark.shared_data]


def test_default_model_is_the_packaged_minilm(packaged_model):
    est = BertSentenceTransformer(device="cpu").fit(["a"])
    assert est.network_.backbone.config.hidden_size == 384
    assert est.max_length_ == 512
    assert est.get_feature_names_out().shape == (384,)


def test_stsb_zero_shot_matches_published_figure(packaged_model, data_home):
    """Mean pooling, cosine, STS-B test: the published 82.03 for all-MiniLM-L6-v2."""
    X, y = load_stsb("test", data_home=data_home, return_X_y=True)
    est = BertSentenceTransformer(packaged_model, pooling="mean", device="cpu").fit(X)
    spearman = 100 * cosine_spearman(est.transform(X[:, 0]), est.transform(X[:, 1]), y)
    assert spearman == pytest.approx(82.03, abs=0.05)


def test_vectors_match_sentence_transformers(packaged_model, data_home):
    st = pytest.importorskip("sentence_transformers", reason="peer library not installed")
    X, _ = load_stsb("test", data_home=data_home, return_X_y=True)
    sentences = list(X[:64, 0]) + ["", "a much longer sentence " * 20]
    ours = BertSentenceTransformer(packaged_model, normalize=True, device="cpu")
    ours = ours.fit(sentences).transform(sentences)
    peer = st.SentenceTransformer(packaged_model, device="cpu").encode(sentences, batch_size=32)
    cosine = (ours * peer).sum(1) / np.linalg.norm(peer, axis=1)
    assert cosine.min() >= 0.9999


def test_demo_sample_separates_sentiment(packaged_model):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline

    X, y = load_demo_sentiment(return_X_y=True)
    pipe = make_pipeline(
        BertSentenceTransformer(packaged_model, device="cpu"), LogisticRegression(max_iter=1000)
    )
    accuracy = cross_val_score(pipe, X, y, cv=3).mean()
    assert accuracy > 0.7  # frozen MiniLM features on SST-2 score ~0.77-0.80; chance is 0.5

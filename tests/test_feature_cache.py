"""The frozen-feature cache of BertSentenceTransformer(memory=...)."""

import json
import pickle
import shutil
from pathlib import Path

import joblib
import numpy as np
import pytest
from conftest import LONG_TEXT, SMALL, TEXTS
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from skbert import BertSentenceTransformer
from skbert._feature_cache import decomposable

LABELLED = np.array(TEXTS * 3, dtype=object)
LABELS = np.array([0, 1] * 12)


def make(model, **params):
    return BertSentenceTransformer(model, device="cpu", **params)


def shards(root):
    return sorted(Path(root).rglob("*.keys.npy"))


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
@pytest.mark.parametrize("layer", [0, -1, (1, 2)])
@pytest.mark.parametrize("combine", ["concat", "mean", "max"])
def test_cached_vectors_equal_uncached(tiny_model, tmp_path, pooling, layer, combine):
    params = {"pooling": pooling, "layer": layer, "layer_combine": combine}
    plain = make(tiny_model, **params).fit(TEXTS).transform(TEXTS)
    cached = make(tiny_model, memory=tmp_path, **params)
    first = cached.fit(TEXTS).transform(TEXTS)  # computed
    again = cached.transform(TEXTS)  # read back
    np.testing.assert_allclose(first, plain, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(again, first)
    assert first.dtype == np.float32 and first.shape == plain.shape


def test_chunks_pairs_and_head_tail(tiny_bert, tmp_path):
    long_texts = [LONG_TEXT, "the cat", LONG_TEXT[:90]]
    pairs = np.array([[a, b] for a, b in zip(TEXTS, TEXTS[::-1], strict=True)], dtype=object)
    for params, X in [
        ({"truncation": "chunks", "max_length": 16, "chunk_pooling": "max"}, long_texts),
        ({"truncation": "chunks", "max_length": 16, "layer": (1, 2)}, long_texts),
        ({"truncation": "head+tail", "max_length": 16, "head_length": 4}, long_texts),
        ({"layer": (1, 2), "layer_combine": "mean", "pooling": "max"}, TEXTS),  # not shared
        ({}, pairs),
    ]:
        plain = make(tiny_bert, **params).fit(X).transform(X)
        cached = make(tiny_bert, memory=tmp_path, **params).fit(X)
        np.testing.assert_allclose(cached.transform(X), plain, rtol=0, atol=1e-6)
        np.testing.assert_allclose(cached.transform(X), plain, rtol=0, atol=1e-6)


def test_one_forward_pass_serves_every_readout(tiny_bert, tmp_path):
    est = make(tiny_bert, memory=tmp_path).fit(TEXTS)
    assert "network_" not in vars(est)  # fit with a cache loads no weights
    est.transform(TEXTS)
    assert len(shards(tmp_path)) == 1
    for pooling in ("cls", "mean", "max"):
        for layer in (0, 1, -1, (0, 1, 2)):
            other = make(tiny_bert, memory=tmp_path, pooling=pooling, layer=layer).fit(TEXTS)
            other.transform(TEXTS[2:])
            assert "network_" not in vars(other), (pooling, layer)  # all from the cache
    assert len(shards(tmp_path)) == 1
    est.transform(["a new text"])  # a miss: loads the encoder, writes one more shard
    assert "network_" in vars(est) and len(shards(tmp_path)) == 2


def test_key_follows_weights_and_tokenizer(tiny_bert, tmp_path):
    import torch
    from transformers import BertConfig, BertModel

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    cache = tmp_path / "cache"
    before = make(str(model), memory=cache).fit(TEXTS).transform(TEXTS)
    torch.manual_seed(1)
    BertModel(BertConfig(**SMALL)).save_pretrained(model)  # new weights, same place
    after = make(str(model), memory=cache).fit(TEXTS).transform(TEXTS)
    np.testing.assert_allclose(after, make(str(model)).fit(TEXTS).transform(TEXTS), atol=1e-6)
    assert not np.allclose(before, after)
    # a changed tokenizer: "cat" and "dog" swap ids
    est = make(str(model), memory=cache).fit(TEXTS)
    spec = json.loads((model / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["cat"], vocab["dog"] = vocab["dog"], vocab["cat"]
    (model / "tokenizer.json").write_text(json.dumps(spec))
    swapped = make(str(model), memory=cache).fit(TEXTS)
    assert swapped.feature_fingerprint_ != est.feature_fingerprint_
    np.testing.assert_allclose(
        swapped.transform(TEXTS), make(str(model)).fit(TEXTS).transform(TEXTS), atol=1e-6
    )


def test_grid_search_scores_identical_and_parallel_safe(tiny_bert, tmp_path):
    grid = {"bertsentencetransformer__pooling": ["cls", "mean", "max"],
            "bertsentencetransformer__layer": [1, -1]}  # fmt: skip

    def search(memory, n_jobs):
        pipe = make_pipeline(make(tiny_bert, memory=memory), LogisticRegression())
        return GridSearchCV(pipe, grid, cv=3, n_jobs=n_jobs).fit(LABELLED, LABELS)

    plain = search(None, 1).cv_results_["mean_test_score"]
    parallel = search(tmp_path, 2).cv_results_["mean_test_score"]
    serial = search(joblib.Memory(tmp_path, verbose=0), 1).cv_results_["mean_test_score"]
    np.testing.assert_array_equal(plain, parallel)
    np.testing.assert_array_equal(plain, serial)


def test_memory_forms_and_training_ignores_it(tiny_bert, tmp_path):
    a = make(tiny_bert, memory=str(tmp_path / "a")).fit(TEXTS).transform(TEXTS)
    b = make(tiny_bert, memory=joblib.Memory(tmp_path / "b", verbose=0)).fit(TEXTS)
    np.testing.assert_array_equal(a, b.transform(TEXTS))
    assert shards(tmp_path / "a") and shards(tmp_path / "b")
    make(tiny_bert, memory=joblib.Memory(None)).fit(TEXTS).transform(TEXTS)  # no location
    pairs = np.array([["the cat", "a dog"], ["good film", "bad movie"]] * 2, dtype=object)
    trained = make(tiny_bert, memory=tmp_path / "c", fine_tune="full", batch_size=2,
                   random_state=0).fit(pairs, np.array([1.0, 0.0] * 2))  # fmt: skip
    trained.transform(TEXTS)
    assert not (tmp_path / "c").exists()  # a trained encoder is never cached
    with pytest.raises(ValueError, match="memory"):
        make(tiny_bert, memory=3).fit(TEXTS)


def test_pickle_of_a_deferred_fit(tiny_bert, tmp_path):
    est = make(tiny_bert, memory=tmp_path).fit(TEXTS)
    expected = make(tiny_bert).fit(TEXTS).transform(TEXTS)
    loaded = pickle.loads(pickle.dumps(est))
    np.testing.assert_allclose(loaded.transform(TEXTS), expected, atol=1e-6)
    loaded.set_params(memory=None)
    np.testing.assert_allclose(loaded.transform(TEXTS), expected, atol=1e-6)  # builds network_
    assert loaded.get_feature_names_out().shape == (expected.shape[1],)


def test_decomposable_rule():
    assert decomposable("mean", 1, "max", False, "mean")
    assert decomposable("max", 3, "concat", True, "mean")
    assert decomposable("cls", 3, "mean", False, "mean")
    assert decomposable("mean", 3, "mean", True, "mean")
    assert not decomposable("max", 3, "mean", False, "mean")
    assert not decomposable("mean", 3, "max", False, "mean")
    assert not decomposable("mean", 3, "mean", True, "max")


def test_similarity_and_score_use_the_cache(tiny_bert, tmp_path):
    pairs = np.array([["the cat sat", "a dog sat"], ["good film", "bad movie"],
                      ["the mat", "the cat"]], dtype=object)  # fmt: skip
    scores = np.array([3.0, 1.0, 2.0])
    plain = make(tiny_bert).fit(pairs)
    cached = make(tiny_bert, memory=tmp_path).fit(pairs)
    np.testing.assert_allclose(cached.similarity(pairs), plain.similarity(pairs), atol=1e-6)
    assert cached.score(pairs, scores) == pytest.approx(plain.score(pairs, scores))
    again = make(tiny_bert, memory=tmp_path, pooling="max").fit(pairs)
    again.similarity(pairs)
    assert "network_" not in vars(again)  # served by the first one's forward pass

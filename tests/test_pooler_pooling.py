"""pooling="pooler": the model's own pooler (dense + tanh over the first token) as a readout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel

import skbert
from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor

TEXTS = ["the cat sat on the mat", "a dog", "the movie was very very bad and not good at all ."]


@pytest.mark.parametrize("family", ["tiny_bert", "tiny_albert", "tiny_mpnet", "tiny_roberta"])
def test_frozen_vectors_are_the_checkpoints_pooler_output(family, request):
    """With a frozen encoder the vectors are transformers' ``pooler_output``: the checkpoint's
    pooler weights, read over the first token of the last layer (BERT's pooler.dense, ALBERT's
    pooler + pooler_activation, MPNet's and RoBERTa's pooler.dense)."""
    path = request.getfixturevalue(family)
    est = BertSentenceTransformer(path, pooling="pooler", normalize=False, device="cpu")
    vectors = est.fit(["a"]).transform(TEXTS)
    model = AutoModel.from_pretrained(path).eval()
    tokenizer = est.network_.tokenizer if hasattr(est.network_, "tokenizer") else None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        for text, vector in zip(TEXTS, vectors, strict=True):
            expected = model(**tokenizer(text, return_tensors="pt")).pooler_output[0]
            np.testing.assert_allclose(vector, expected.numpy(), rtol=0, atol=1e-5)
    cls = BertSentenceTransformer(path, pooling="cls", normalize=False, device="cpu")
    assert not np.allclose(cls.fit(["a"]).transform(TEXTS), vectors, atol=1e-3)


@pytest.mark.parametrize("family", ["tiny_distilbert", "tiny_deberta"])
def test_a_model_without_a_pooler_is_told_what_to_use(family, request):
    est = BertSentenceTransformer(request.getfixturevalue(family), pooling="pooler")
    with pytest.raises(ValueError, match=r"pooling='pooler'.*has none; use pooling='cls'"):
        est.fit(["a"])


def test_concatenated_layers_are_refused_and_averaged_ones_read(tiny_bert):
    est = BertSentenceTransformer(tiny_bert, pooling="pooler", layer=(-2, -1))
    with pytest.raises(ValueError, match=r"pooling='pooler'.*layer_combine='concat'"):
        est.fit(["a"])
    mean = BertSentenceTransformer(
        tiny_bert, pooling="pooler", layer=(-2, -1), layer_combine="mean"
    )
    assert mean.fit(["a"]).transform(TEXTS).shape == (3, 16)


def test_memory_caches_the_pooler_vectors_as_they_are(tiny_bert, tmp_path):
    """The pooler has weights, so the cache keeps its final vectors under their own key (not
    assembled from the per-layer [CLS] / mean / max store); they are those of no cache."""
    plain = BertSentenceTransformer(tiny_bert, pooling="pooler", device="cpu").fit(TEXTS)
    cached = BertSentenceTransformer(tiny_bert, pooling="pooler", device="cpu", memory=tmp_path)
    first = cached.fit(TEXTS).transform(TEXTS)
    again = BertSentenceTransformer(tiny_bert, pooling="pooler", device="cpu", memory=tmp_path)
    np.testing.assert_array_equal(first, plain.transform(TEXTS))
    np.testing.assert_array_equal(again.fit(TEXTS).transform(TEXTS), first)


def test_fine_tuning_trains_a_copy_of_the_pooler(tiny_bert, tmp_path):
    """A cross-encoder regressor on the pooler learns, trains the pooling's copy of the dense
    layer (the backbone's own pooler stays as loaded and unused), and saves and loads it."""
    from test_regressor import FAST, X, Y

    params = {**FAST, "top_learning_rate": 5e-3}  # tanh saturates at FAST's 5e-2
    reg = BertTextRegressor(tiny_bert, pooling="pooler", max_epochs=15, random_state=0, **params)
    reg.fit(X, Y)
    loaded_dense = AutoModel.from_pretrained(tiny_bert).pooler.dense.weight
    network = reg.network_
    assert torch.equal(network.encoder.backbone.pooler.dense.weight, loaded_dense)
    assert not torch.equal(network.encoder.pooling.dense.weight, loaded_dense)
    assert reg.score(X, Y) > 0.6  # chance (the mean) is 0
    reg.save(tmp_path / "reg")
    np.testing.assert_array_equal(skbert.load(tmp_path / "reg").predict(X), reg.predict(X))


def test_classifier_reads_the_pooler(tiny_bert):
    clf = BertTextClassifier(tiny_bert, pooling="pooler", max_epochs=1, random_state=0).fit(
        TEXTS, [0, 1, 0]
    )
    assert clf.predict_proba(TEXTS).shape == (3, 2)

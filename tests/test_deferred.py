"""The encoder that a ``memory=`` fit left unloaded (skbert._estimator.deferred.DeferredNetwork):
it loads the network ``fit`` would have built, and refuses a model folder changed since."""

import dataclasses
import shutil

import numpy as np
import pytest
import torch
from conftest import TEXTS

from skbert import BertSentenceTransformer
from skbert._estimator.deferred import DeferredNetwork
from skbert._storage.fingerprint import directory_fingerprint


@pytest.fixture
def model_copy(tiny_bert, tmp_path):
    """A copy of the tiny BERT's folder, free to be changed."""
    return str(shutil.copytree(tiny_bert, tmp_path / "model"))


def test_load_builds_the_network_fit_would_have_built(model_copy, tmp_path):
    est = BertSentenceTransformer(model_copy, device="cpu", memory=tmp_path / "cache").fit(TEXTS)
    deferred = est.deferred_network_
    assert deferred.fingerprint == directory_fingerprint(model_copy)
    network = deferred.load()
    assert not network.training and network.readout == est.readout_
    loaded = BertSentenceTransformer(model_copy, device="cpu").fit(TEXTS)
    expected = loaded.network_.state_dict()
    assert network.state_dict().keys() == expected.keys()
    assert all(torch.equal(network.state_dict()[k], expected[k]) for k in expected)
    assert np.array_equal(est.transform(TEXTS), loaded.transform(TEXTS))
    with pytest.raises(dataclasses.FrozenInstanceError):
        deferred.folder = "elsewhere"  # what fit saw stays as it saw it


def test_a_folder_changed_after_fit_is_refused(model_copy, tmp_path):
    est = BertSentenceTransformer(model_copy, device="cpu", memory=tmp_path / "cache").fit(TEXTS)
    config = f"{model_copy}/config.json"
    with open(config, "a", encoding="utf-8") as handle:
        handle.write("\n")  # the same model, other bytes
    with pytest.raises(RuntimeError, match="changed after fit .* Fit again to use the new model"):
        est.deferred_network_.load()
    stale = DeferredNetwork(model_copy, "0" * 40, est.readout_)
    with pytest.raises(RuntimeError, match="fit saw 000000000000"):
        stale.load()


def test_a_folder_gone_after_fit_says_why_it_is_needed(model_copy, tmp_path):
    # a bare FileNotFoundError of the folder's path, from transform, save and export alike
    make = BertSentenceTransformer(model_copy, device="cpu", memory=tmp_path / "cache").fit
    cached = make(TEXTS).transform(TEXTS)  # another fit fills the cache
    est = make(TEXTS)  # the encoder left in its folder: the texts are cached
    shutil.rmtree(model_copy)
    np.testing.assert_array_equal(est.transform(TEXTS), cached)  # cached texts need no weights
    message = r"model folder .* that fit read is gone .* deferred loading its weights \(memory="
    with pytest.raises(FileNotFoundError, match=message):
        est.transform(["a text the cache has not seen"])
    with pytest.raises(FileNotFoundError, match=message):
        est.save(tmp_path / "saved")


def test_a_pickle_carries_the_weights_fit_left_in_their_folder(model_copy, tmp_path):
    """joblib.dump of a deferred fit (a grid search's refit over cached texts) loaded where
    the model folder is not: the copy predicts, bit for bit, texts the cache lacks."""
    import pickle

    est = BertSentenceTransformer(model_copy, device="cpu", memory=tmp_path / "cache").fit(TEXTS)
    assert "network_" not in vars(est)
    blob = pickle.dumps(est)
    assert "network_" not in vars(est)  # pickling leaves the estimator as fit left it
    new_texts = [f"{text} again" for text in TEXTS]
    expected = est.transform(new_texts)
    shutil.rmtree(model_copy)
    shutil.rmtree(tmp_path / "cache")
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy.transform(new_texts), expected)
    # a failed fit leaves it as it was: its weights too, which it keeps with its predictions'
    # caches only (the fit threw them away: a new text then needed the folder)
    with pytest.raises(OSError):  # the model folder is gone
        copy.fit(TEXTS)
    np.testing.assert_array_equal(copy.transform(new_texts[:2]), expected[:2])
    np.testing.assert_array_equal(copy.transform(["one more"]), est.transform(["one more"]))


def test_a_pickle_without_the_model_folder_refers_to_it_and_warns(model_copy, tmp_path):
    """Pickling needs the folder to carry the weights; without it, the pickle is the
    reference it was before (and the cached texts still transform), with a warning."""
    import pickle

    filler = BertSentenceTransformer(model_copy, device="cpu", memory=tmp_path / "cache")
    expected = filler.fit(TEXTS).transform(TEXTS)  # now cached
    est = BertSentenceTransformer(model_copy, device="cpu", memory=tmp_path / "cache").fit(TEXTS)
    shutil.rmtree(model_copy)
    with pytest.warns(UserWarning, match="model folder cannot be loaded now"):
        blob = pickle.dumps(est)
    np.testing.assert_array_equal(pickle.loads(blob).transform(TEXTS), expected)

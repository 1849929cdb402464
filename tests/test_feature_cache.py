"""The frozen-feature cache of BertSentenceTransformer(memory=...)."""

import hashlib
import json
import os
import pickle
import shutil
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
from conftest import LONG_TEXT, SMALL, TEXTS
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from skbert import BertSentenceTransformer
from skbert._estimator.prediction_cache import prediction_cache
from skbert._nn.readout import Readout
from skbert._storage.feature_cache import (
    FORMAT_VERSION,
    FeatureCacheError,
    FeatureCacheWarning,
    FeatureStore,
    clear_memo,
    decomposable,
    readout_index,
    select,
    text_digests,
)
from skbert._storage.shards import file_digest

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
    assert isinstance(est.deferred_network_.fingerprint, str)
    est.transform(TEXTS)
    assert len(shards(tmp_path)) == 1
    for pooling in ("cls", "mean", "max"):
        for layer in (0, 1, -1, (0, 1, 2)):
            other = make(tiny_bert, memory=tmp_path, pooling=pooling, layer=layer).fit(TEXTS)
            other.transform(TEXTS[2:])
            # all from the cache: no encoder loaded
            assert "network_" not in vars(other), (pooling, layer)
            assert prediction_cache(other).network is None, (pooling, layer)
    assert len(shards(tmp_path)) == 1
    est.transform(["a new text"])  # a miss: loads the encoder, writes one more shard
    assert len(shards(tmp_path)) == 2
    # into the prediction cache, not the estimator
    assert "network_" not in vars(est) and prediction_cache(est).network is not None


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
    grid = {
        "bertsentencetransformer__pooling": ["cls", "mean", "max"],
        "bertsentencetransformer__layer": [1, -1],
    }

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
    trained = make(
        tiny_bert, memory=tmp_path / "c", fine_tune="full", batch_size=2, random_state=0
    ).fit(pairs, np.array([1.0, 0.0] * 2))
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


def readout(pooling, n_layers, combine, chunked, chunk_pooling):
    return Readout(
        truncation="chunks" if chunked else "head",
        max_length=32,
        head_length=8,
        max_chunks=None,
        chunk_pooling=chunk_pooling,
        layers=tuple(range(n_layers)),
        layer_combine=combine,
        pooling=pooling,
        hidden_size=16,
        n_hidden_states=3,
    )


def test_decomposable_rule():
    assert decomposable(readout("mean", 1, "max", False, "mean"))
    assert decomposable(readout("max", 3, "concat", True, "mean"))
    assert decomposable(readout("cls", 3, "mean", False, "mean"))
    assert decomposable(readout("mean", 3, "mean", True, "mean"))
    assert not decomposable(readout("max", 3, "mean", False, "mean"))
    assert not decomposable(readout("mean", 3, "max", False, "mean"))
    assert not decomposable(readout("mean", 3, "mean", True, "max"))
    assert not decomposable(readout("cnn", 1, "concat", False, "mean"))  # has weights


def test_similarity_and_score_use_the_cache(tiny_bert, tmp_path):
    pairs = np.array(
        [["the cat sat", "a dog sat"], ["good film", "bad movie"], ["the mat", "the cat"]],
        dtype=object,
    )
    scores = np.array([3.0, 1.0, 2.0])
    plain = make(tiny_bert).fit(pairs)
    cached = make(tiny_bert, memory=tmp_path).fit(pairs)
    np.testing.assert_allclose(cached.similarity(pairs), plain.similarity(pairs), atol=1e-6)
    assert cached.score(pairs, scores) == pytest.approx(plain.score(pairs, scores))
    again = make(tiny_bert, memory=tmp_path, pooling="max").fit(pairs)
    again.similarity(pairs)
    assert "network_" not in vars(again)  # served by the first one's forward pass


# --- FeatureStore alone -------------------------------------------------------------------

STORE_TEXTS = [f"text number {i}" for i in range(12)]


def stored_features(n, seed=0, n_states=3, hidden=4):
    """Random float32 features shaped like the cache's: (n, 3 poolings, n_states, hidden)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3, n_states, hidden)).astype(np.float32)


def test_store_read_of_an_empty_store(tmp_path):
    digests = text_digests(STORE_TEXTS[:5])
    for directory in (tmp_path / "never-written", tmp_path):
        values, missing = FeatureStore(directory).read(digests)
        assert values is None
        np.testing.assert_array_equal(missing, np.arange(5))
    assert not (tmp_path / "never-written").exists()  # reading creates nothing


def test_store_write_then_read_is_bit_for_bit(tmp_path):
    digests = text_digests(STORE_TEXTS)
    features = stored_features(len(digests))
    features[0, 0, 0, 0] = np.float32(1e-40)  # a subnormal survives too
    store = FeatureStore(tmp_path / "key")
    store.write(digests, features)
    values, missing = store.read(digests)
    assert values.dtype == np.float32 and len(missing) == 0
    np.testing.assert_array_equal(values.view(np.uint32), features.view(np.uint32))
    # in another order, and with a digest asked twice
    order = np.array([5, 0, 11, 5, 3])
    values, missing = store.read(digests[order])
    np.testing.assert_array_equal(values, features[order])
    assert len(missing) == 0


def test_store_mixed_read_places_rows_and_reports_missing(tmp_path):
    digests = text_digests(STORE_TEXTS)
    features = stored_features(len(digests))
    store = FeatureStore(tmp_path)
    store.write(digests[[1, 4, 7]], features[[1, 4, 7]])  # two shards
    store.write(digests[[9, 2]], features[[9, 2]])
    values, missing = store.read(digests)
    np.testing.assert_array_equal(missing, [0, 3, 5, 6, 8, 10, 11])
    assert missing.dtype == np.intp
    found = [1, 2, 4, 7, 9]
    np.testing.assert_array_equal(values[found], features[found])
    np.testing.assert_array_equal(values[missing], 0)  # rows of missing digests are zeros
    assert values.shape == features.shape


def test_store_sees_the_shards_of_another_store_object(tmp_path):
    digests = text_digests(STORE_TEXTS)
    features = stored_features(len(digests), seed=1)
    writer, reader = FeatureStore(tmp_path), FeatureStore(tmp_path)
    assert reader.read(digests)[0] is None  # reader has looked once: nothing there
    writer.write(digests[:6], features[:6])
    values, missing = reader.read(digests)  # refreshed: sees the new shard
    np.testing.assert_array_equal(values[:6], features[:6])
    np.testing.assert_array_equal(missing, np.arange(6, 12))
    reader.write(digests[6:], features[6:])  # and the other way round
    values, missing = writer.read(digests)
    np.testing.assert_array_equal(values, features)
    assert len(missing) == 0


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
@pytest.mark.parametrize("layers", [[0], [4], [1, 3], [4, 0, 2]])
def test_store_index_reads_only_one_pooling_and_its_layers(tmp_path, pooling, layers):
    digests = text_digests(STORE_TEXTS)
    features = stored_features(len(digests), seed=2, n_states=5, hidden=3)
    store = FeatureStore(tmp_path)
    store.write(digests[:4], features[:4])
    store.write(digests[4:9], features[4:9])
    index = readout_index(pooling, layers)
    ask = np.array([8, 10, 0, 5, 3, 11])  # across both shards, two missing
    values, missing = store.read(digests[ask], index=index)
    pos = ("cls", "mean", "max").index(pooling)
    expected = features[ask][:, pos][:, layers]
    assert values.shape == (len(ask), len(layers), 3)
    np.testing.assert_array_equal(missing, [1, 5])
    found = [0, 2, 3, 4]
    np.testing.assert_array_equal(values[found], expected[found])
    np.testing.assert_array_equal(values[found], select(features[ask[found]], index))
    np.testing.assert_array_equal(values[missing], 0)


def test_store_write_leaves_no_temporary_files(tmp_path):
    digests = text_digests(STORE_TEXTS)
    store = FeatureStore(tmp_path / "key")
    store.write(digests[:5], stored_features(5))
    store.write(digests[5:], stored_features(7, seed=3))
    store.write(digests[:0], stored_features(0))  # nothing to write: no shard
    names = sorted(p.name for p in (tmp_path / "key").iterdir())
    assert len(names) == 6, names
    parts = (".keys.npy", ".vals.npy", ".sum.json")
    assert all(n.endswith(parts) and not n.startswith(".") for n in names)
    stems = [{n[: -len(part)] for n in names if n.endswith(part)} for part in parts]
    assert stems[0] == stems[1] == stems[2] and len(stems[0]) == 2


def test_text_digests_distinguish_texts_and_pairs():
    single = text_digests(["a", "b", "a"])
    assert single.dtype == np.dtype("S16") and single.shape == (3,)
    assert single[0] == single[2] != single[1]
    pairs = text_digests(["a", "a"], ["b", "c"])
    assert pairs[0] != pairs[1]
    assert text_digests(["a b"])[0] not in set(pairs.tolist())
    assert text_digests(["ab"], [""])[0] != text_digests(["a"], ["b"])[0]
    # a NUL inside a text cannot move where the first text of a pair ends
    assert text_digests(["great\0not"], ["good"])[0] != text_digests(["great"], ["not\0good"])[0]
    # pairs cut before the longest_first split (prefix 2) are not this version's; texts are
    assert text_digests(["a"], ["b"])[0] == hashlib.blake2b(b"4\x00a\x00b", digest_size=16).digest()
    assert text_digests(["a"])[0] == hashlib.blake2b(b"1\x00a", digest_size=16).digest()


def test_the_key_names_the_cpu_products(tiny_bert, tmp_path, monkeypatch):
    """BLAS and oneDNN products differ in the last bits: vectors cached with one are not
    served to the other (SKBERT_CPU_PRODUCTS, or another CPU sharing the folder)."""
    from skbert._inference.cpu.products import OneDnn

    if not OneDnn.available():
        pytest.skip("this torch lacks oneDNN's linear operations")
    cache = tmp_path / "cache"
    vectors = {}
    for kind in ("blas", "onednn"):
        monkeypatch.setenv("SKBERT_CPU_PRODUCTS", kind)
        make(tiny_bert, memory=cache).fit(TEXTS).transform(TEXTS)
        plain = make(tiny_bert).fit(TEXTS).transform(TEXTS)
        vectors[kind] = make(tiny_bert, memory=cache).fit(TEXTS).transform(TEXTS)
        np.testing.assert_array_equal(vectors[kind], plain)  # each kind its own rows
    keys = [json.loads(p.read_text())["products"] for p in Path(cache).rglob("key.json")]
    assert sorted(keys) == ["blas", "onednn"]


def test_weights_changed_in_place_are_not_served_from_before(tiny_bert, tmp_path):
    """A fitted network whose weights are loaded anew (load_state_dict): the feature cache
    set after the fit, and the bf16 copy, follow the new weights."""
    import torch

    est = make(tiny_bert).fit(TEXTS)
    est.set_params(memory=tmp_path / "cache").transform(TEXTS)  # hashed and cached
    state = {k: v * 1.5 for k, v in est.network_.backbone.state_dict().items()}
    est.network_.backbone.load_state_dict(state)
    fresh = make(tiny_bert).fit(TEXTS)
    fresh.network_.backbone.load_state_dict(state)
    np.testing.assert_array_equal(est.transform(TEXTS), fresh.transform(TEXTS))
    est.set_params(memory=None, precision="bf16")
    fresh.set_params(precision="bf16")
    est.transform(TEXTS)  # its bf16 copy, made of the weights now
    with torch.no_grad():
        for p in est.network_.backbone.parameters():
            p.mul_(0.5)
        for p in fresh.network_.backbone.parameters():
            p.mul_(0.5)
    np.testing.assert_array_equal(est.transform(TEXTS), fresh.transform(TEXTS))


def test_a_warm_start_fit_drops_the_key_of_the_weights_it_trained(tiny_bert, tmp_path):
    """A frozen fit with memory from a fitted estimator loads the network (the model is in
    no folder); a warm start then trains it: the cache must not serve the frozen vectors."""
    cache = tmp_path / "cache"
    est = make(make(tiny_bert).fit(TEXTS), memory=cache).fit(TEXTS)
    assert "network_" in vars(est)
    frozen = est.transform(TEXTS)
    est.set_params(fine_tune="full", warm_start=True, max_epochs=1, batch_size=4)
    est.fit(LABELLED, LABELS)
    assert not hasattr(est, "feature_fingerprint_")
    trained = est.set_params(memory=None).transform(TEXTS)
    assert not np.allclose(trained, frozen)
    np.testing.assert_array_equal(est.set_params(memory=cache).transform(TEXTS), trained)


def test_relative_memory_after_chdir(tiny_bert, tmp_path, monkeypatch):
    """``memory="skbert-cache"`` used in one folder, then in another (a notebook's ``%cd``):
    each folder gets its own cache, and the second does not reuse the first's store."""
    texts = ["the cat sat on the mat", "a dog is good"]
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        make(tiny_bert, memory="skbert-cache").fit(texts).transform(texts)
        assert len(shards(tmp_path / folder / "skbert-cache")) == 1


# --- integrity: a bad shard is never served -----------------------------------------------


def shard_files(directory, name):
    return {part: directory / f"{name}.{part}" for part in ("vals.npy", "keys.npy", "sum.json")}


def reseal(directory, name, row_shape=None):
    """Rewrite a shard's checksum file so that it matches its (tampered) files: only the
    header, dtype and shape checks can then refuse it."""
    files = shard_files(directory, name)
    record = json.loads(files["sum.json"].read_text())
    for field in ("vals", "keys"):
        data = files[f"{field}.npy"].read_bytes()
        record[field] = {"bytes": len(data), "blake2b": hashlib.blake2b(data).hexdigest()}
    if row_shape is not None:
        record["row_shape"] = list(row_shape)
    files["sum.json"].write_text(json.dumps(record))


def _overwrite_values(fill):
    def corrupt(directory, name):
        path = shard_files(directory, name)["vals.npy"]
        values = np.load(path)
        np.save(path, np.full_like(values, fill))  # same header, same size

    return corrupt


def _truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[: keep(len(data))])


def _object_keys(directory, name):
    path = shard_files(directory, name)["keys.npy"]
    keys = np.load(path)
    np.save(path, np.array(keys.tolist(), dtype=object), allow_pickle=True)


def _resealed_object_keys(directory, name):
    _object_keys(directory, name)
    reseal(directory, name)


def _resealed_float64_values(directory, name):
    path = shard_files(directory, name)["vals.npy"]
    np.save(path, np.load(path).astype(np.float64))
    reseal(directory, name)


def _resealed_other_row_shape(directory, name):
    path = shard_files(directory, name)["vals.npy"]
    values = np.load(path)
    values = values.reshape(len(values), -1)[:, :-1]  # one number short per row
    np.save(path, values)
    reseal(directory, name, row_shape=values.shape[1:])


def _resealed_short_keys(directory, name):
    path = shard_files(directory, name)["keys.npy"]
    np.save(path, np.load(path)[:-1])
    reseal(directory, name)


CORRUPTIONS = {
    "values overwritten with NaN": _overwrite_values(np.nan),
    "values overwritten with zeros": _overwrite_values(0.0),
    "values truncated": lambda d, n: _truncate(shard_files(d, n)["vals.npy"], lambda k: k // 2),
    "values emptied": lambda d, n: _truncate(shard_files(d, n)["vals.npy"], lambda k: 0),
    "values garbage": lambda d, n: shard_files(d, n)["vals.npy"].write_bytes(
        np.random.default_rng(0).bytes(shard_files(d, n)["vals.npy"].stat().st_size)
    ),
    "keys an object array": _object_keys,
    "keys a raw pickle": lambda d, n: shard_files(d, n)["keys.npy"].write_bytes(
        pickle.dumps(list(TEXTS))
    ),
    "values missing": lambda d, n: shard_files(d, n)["vals.npy"].unlink(),
    "checksum missing": lambda d, n: shard_files(d, n)["sum.json"].unlink(),
    "checksum garbage": lambda d, n: shard_files(d, n)["sum.json"].write_text("{not json"),
    "checksum of another format": lambda d, n: shard_files(d, n)["sum.json"].write_text(
        json.dumps({**json.loads(shard_files(d, n)["sum.json"].read_text()), "format": 1})
    ),
    "resealed object keys": _resealed_object_keys,
    "resealed float64 values": _resealed_float64_values,
    "resealed rows of another shape": _resealed_other_row_shape,
    "resealed keys one short": _resealed_short_keys,
}


@pytest.fixture(scope="module")
def clean_cache(tiny_bert, tmp_path_factory):
    """The uncached vectors of TEXTS, and a cache folder holding them in one shard."""
    expected = make(tiny_bert).fit(TEXTS).transform(TEXTS)
    root = tmp_path_factory.mktemp("clean-cache")
    cached = make(tiny_bert, memory=root).fit(TEXTS).transform(TEXTS)
    np.testing.assert_array_equal(cached, expected)
    assert len(shards(root)) == 1
    return expected, root


def cache_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, FeatureCacheWarning)]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_shard_is_recomputed_with_a_warning(tiny_bert, clean_cache, tmp_path, corruption):
    expected, clean = clean_cache
    root = tmp_path / "cache"
    shutil.copytree(clean, root)
    [keys] = shards(root)
    directory, name = keys.parent, keys.name[: -len(".keys.npy")]
    CORRUPTIONS[corruption](directory, name)
    clear_memo()  # a fresh process: the memoised store must not hide the damage
    with pytest.warns(FeatureCacheWarning) as record:
        out = make(tiny_bert, memory=root).fit(TEXTS).transform(TEXTS)
    np.testing.assert_array_equal(out, expected)
    [message] = cache_warnings(record)
    assert str(keys) in message and f"in the folder {directory} " in message, message
    assert "deleted" in message
    assert {w.filename for w in record if w.category is FeatureCacheWarning} == {__file__}
    assert not list(directory.glob(f"{name}.*"))  # the bad shard is gone, all of it
    assert len(shards(root)) == 1  # and the recomputed one took its place
    clear_memo()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        again = make(tiny_bert, memory=root).fit(TEXTS)
        np.testing.assert_array_equal(again.transform(TEXTS), expected)
    assert "network_" not in vars(again)  # read from the recomputed shard


_UNPICKLED = []


def _record_unpickling():
    _UNPICKLED.append(True)
    return "payload"


class _Payload:
    def __reduce__(self):
        return (_record_unpickling, ())


def test_store_never_unpickles_a_shard(tmp_path):
    digests = text_digests(STORE_TEXTS)
    FeatureStore(tmp_path).write(digests, stored_features(len(digests)))
    [keys] = shards(tmp_path)
    name = keys.name[: -len(".keys.npy")]
    payload = np.array([_Payload()] * len(digests), dtype=object)
    np.save(keys, payload, allow_pickle=True)
    reseal(tmp_path, name)  # the checksum matches: only the dtype check stands in the way
    with pytest.warns(FeatureCacheWarning, match="object"):
        values, missing = FeatureStore(tmp_path).read(digests)
    assert values is None and len(missing) == len(digests)
    assert not _UNPICKLED


def test_store_hashes_each_shard_once_per_process(tmp_path, monkeypatch):
    hashed = []

    def counted(path):
        hashed.append(path)
        return file_digest(path)

    monkeypatch.setattr("skbert._storage.shards.file_digest", counted)
    digests = text_digests(STORE_TEXTS)
    features = stored_features(len(digests))
    writer = FeatureStore(tmp_path)
    writer.write(digests[:6], features[:6])
    writer.write(digests[6:], features[6:])
    np.testing.assert_array_equal(writer.read(digests)[0], features)
    assert hashed == []  # its own shards: hashed while written, not read back
    reader = FeatureStore(tmp_path)
    for _ in range(3):
        np.testing.assert_array_equal(reader.read(digests)[0], features)
    assert sorted(p.name for p in hashed) == sorted(
        p.name for p in tmp_path.iterdir() if p.name.endswith(".npy")
    )  # each file of each shard once


def test_store_writes_keys_last(tmp_path, monkeypatch):
    renamed = []
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renamed.append(Path(b).name) or replace(a, b))
    FeatureStore(tmp_path).write(text_digests(STORE_TEXTS), stored_features(len(STORE_TEXTS)))
    assert [n.split(".", 1)[1] for n in renamed] == ["vals.npy", "sum.json", "keys.npy"]
    record = json.loads(next(tmp_path.glob("*.sum.json")).read_text())
    assert record["format"] == FORMAT_VERSION == 2
    assert record["rows"] == len(STORE_TEXTS) and record["row_shape"] == [3, 3, 4]


def test_store_leaves_a_shard_being_written_alone(tmp_path):
    digests = text_digests(STORE_TEXTS)
    features = stored_features(len(digests))
    FeatureStore(tmp_path).write(digests, features)
    [keys] = shards(tmp_path)
    hidden = tmp_path / f".{keys.name}.tmp"  # as if its writer had not renamed it yet
    keys.rename(hidden)
    before = sorted(tmp_path.iterdir())
    reader = FeatureStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        values, missing = reader.read(digests)
    assert values is None and len(missing) == len(digests)
    assert sorted(tmp_path.iterdir()) == before  # nothing deleted
    hidden.rename(keys)  # the writer finishes
    values, missing = reader.read(digests)
    np.testing.assert_array_equal(values, features)


def test_store_refuses_rows_of_another_shape(tmp_path):
    digests = text_digests(STORE_TEXTS)
    FeatureStore(tmp_path / "a").write(digests, stored_features(len(digests), n_states=3))
    expecting = FeatureStore(tmp_path / "a", row_shape=(3, 5, 4))
    with pytest.warns(FeatureCacheWarning, match=r"shape \(3, 3, 4\), expected \(3, 5, 4\)"):
        assert expecting.read(digests)[0] is None
    assert not shards(tmp_path / "a")
    with pytest.raises(ValueError, match=r"shape \(3, 3, 4\).*\(3, 5, 4\)"):
        expecting.write(digests, stored_features(len(digests), n_states=3))
    # a shard read before the row shape was known is dropped once it is
    FeatureStore(tmp_path / "b").write(digests, stored_features(len(digests), n_states=3))
    store = FeatureStore(tmp_path / "b")
    assert store.read(digests)[0] is not None
    with pytest.warns(FeatureCacheWarning, match="expected"):
        store.expect((3, 5, 4))
    assert store.read(digests)[0] is None and not shards(tmp_path / "b")


def test_store_that_cannot_delete_a_bad_shard_never_serves_it(tmp_path, monkeypatch):
    digests = text_digests(STORE_TEXTS)
    FeatureStore(tmp_path).write(digests, stored_features(len(digests)))
    _overwrite_values(np.nan)(tmp_path, shards(tmp_path)[0].name[: -len(".keys.npy")])

    def refuse(self, missing_ok=False):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    store = FeatureStore(tmp_path)
    with pytest.warns(FeatureCacheWarning, match="could not be deleted.*Permission denied"):
        assert store.read(digests)[0] is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", FeatureCacheWarning)
        assert store.read(digests)[0] is None  # refused once, not re-hashed nor re-warned


def test_a_cache_folder_that_cannot_be_used_is_named(tiny_bert, tmp_path, monkeypatch):
    (tmp_path / "skbert-features").write_text("a file where the folder should be")
    est = make(tiny_bert, memory=tmp_path).fit(TEXTS)
    with pytest.raises(FeatureCacheError, match="skbert-features.*cannot be used.*delete it"):
        est.transform(TEXTS)
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    digests = text_digests(STORE_TEXTS)
    for action in (lambda s: s.read(digests), lambda s: s.write(digests, stored_features(12))):
        with pytest.raises(FeatureCacheError, match=f"{blocked} .*cannot be used"):
            action(FeatureStore(blocked))

    # a write that fails half way (here: no permission to rename) leaves nothing behind
    def refuse(src, dst):
        if str(dst).endswith(".keys.npy"):
            raise PermissionError(13, "Permission denied", str(dst))
        return replace(src, dst)

    replace = os.replace
    monkeypatch.setattr(os, "replace", refuse)
    store = FeatureStore(tmp_path / "key")
    with pytest.raises(FeatureCacheError, match="key .*cannot be used.*Permission denied"):
        store.write(digests, stored_features(12))
    assert list((tmp_path / "key").iterdir()) == []
    assert isinstance(FeatureCacheError("x"), OSError)


def test_memory_naming_a_file_is_named(tiny_bert, tmp_path):
    path = tmp_path / "a-file"
    path.write_text("x")
    with pytest.raises(FeatureCacheError, match=r"memory=.*a-file' is a file, not a folder"):
        make(tiny_bert, memory=path).fit(TEXTS)


@pytest.mark.parametrize("saved", ["BertModel", "BertForMaskedLM"])
def test_a_checkpoint_without_a_pooler_gives_the_same_random_pooler_cached_or_not(
    saved, tmp_path_factory, tmp_path
):
    """transformers draws a missing pooler from the global generator: each load another, so
    the cache (keyed on the folder's files) served one pooler's vectors beside another's in
    one output, and a memory= fit never warned that the pooler was random. (A masked-LM
    checkpoint: transformers 4 names its missing keys 'bert.pooler...'.)"""
    import torch
    from conftest import save_tiny
    from transformers import BertConfig, BertForMaskedLM, BertModel

    from skbert._nn.backbone import load_backbone

    builders = {
        "BertModel": lambda config: BertModel(config, add_pooling_layer=False),
        "BertForMaskedLM": BertForMaskedLM,  # has no pooler
    }
    folder = save_tiny(
        tmp_path_factory, f"{saved}-without-pooler", builders[saved], BertConfig(**SMALL)
    )
    torch.manual_seed(1)
    first = load_backbone(folder)[1].pooler.state_dict()
    torch.manual_seed(2)
    second = load_backbone(folder)[1].pooler.state_dict()
    assert all(torch.equal(first[name], second[name]) for name in first)
    pooler = {"pooling": "pooler", "layer": -1}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        make(folder, memory=tmp_path, **pooler).fit(TEXTS[:4]).transform(TEXTS[:4])
        torch.manual_seed(3)
        mixed = make(folder, memory=tmp_path, **pooler).fit(TEXTS).transform(TEXTS)
        plain = make(folder, **pooler).fit(TEXTS).transform(TEXTS)
    np.testing.assert_array_equal(mixed, plain)
    said = [w for w in record if "no trained pooler weights" in str(w.message)]
    assert len(said) == 3 and {w.filename for w in said} == {__file__}


def test_a_trained_network_is_never_served_from_the_cache(tiny_bert, tmp_path):
    """A fit of fine_tune='top' read after set_params(fine_tune='none', memory=...): the key
    (the backbone's weights) left the trained pooling out, so two fits of other seeds were
    served one's vectors (and a trained chunk attention crashed on the cached widths)."""
    cnn = {"pooling": "cnn", "cnn_channels": 4, "cnn_kernel_sizes": (1, 3)}
    y = [0, 1] * (len(TEXTS) // 2)
    vectors = []
    for seed in (0, 1):
        est = make(tiny_bert, fine_tune="top", max_epochs=1, random_state=seed, **cnn)
        own = est.fit(TEXTS[: len(y)], y).transform(TEXTS)
        est.set_params(fine_tune="none", memory=tmp_path)
        np.testing.assert_array_equal(est.transform(TEXTS), own)
        vectors.append(own)
    assert not np.array_equal(*vectors)
    assert not (tmp_path / "skbert-features").exists()  # nothing written for them


def test_the_key_holds_the_software_that_makes_the_vectors(tiny_bert, tmp_path, monkeypatch):
    """A change of skbert's encoding (split_special_tokens, c8e8436) or of torch,
    transformers or tokenizers is a new key: the cache served the earlier code's vectors."""
    from skbert._storage import feature_cache

    est = make(tiny_bert, memory=tmp_path).fit(TEXTS)
    est.transform(TEXTS)
    assert set(feature_cache.software()) == {
        "skbert encoding",
        "torch",
        "transformers",
        "tokenizers",
    }
    monkeypatch.setattr(feature_cache, "software", lambda: {"skbert encoding": 1})
    est.transform(TEXTS)
    keys = sorted(p.name for p in (tmp_path / "skbert-features").iterdir())
    assert len(keys) == 2  # the same texts stored again, under a key of their own


def test_the_weights_key_holds_split_special_tokens(tiny_bert):
    from transformers import AutoTokenizer

    from skbert._nn.backbone import load_backbone
    from skbert._storage.fingerprint import state_fingerprint

    backbone = load_backbone(tiny_bert)[1]
    keys = {
        state_fingerprint(backbone, AutoTokenizer.from_pretrained(tiny_bert, **split))
        for split in ({}, {"split_special_tokens": True})
    }
    assert len(keys) == 2


def test_a_folder_seen_changed_is_hashed_anew_for_the_next_fit(tiny_bert, tmp_path):
    """A tokenizer rewritten with its size and time kept (cp -p, rsync -t): the deferred load
    saw the change and said "Fit again", but the memo kept the old hash, so every later fit
    in the process got it (and the old tokenizer), and refused for ever."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert, folder)
    cache = tmp_path / "cache"
    before = make(str(folder), memory=cache).fit(TEXTS).transform(TEXTS)
    path = folder / "tokenizer.json"
    stat = path.stat()
    text = path.read_text()
    vocab = json.loads(text)["model"]["vocab"]
    cat, dog = vocab["cat"], vocab["dog"]
    swapped = text.replace(f'"cat": {cat}', '"cat": @').replace(f'"dog": {dog}', f'"dog": {cat}')
    swapped = swapped.replace('"cat": @', f'"cat": {dog}')
    assert swapped != text and len(swapped) == len(text)
    path.write_text(swapped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    stale = make(str(folder), memory=cache).fit(TEXTS)
    with pytest.raises(RuntimeError, match="changed after fit"):
        stale.transform(TEXTS + ["a new text"])
    fresh = make(str(folder), memory=cache).fit(TEXTS).transform(TEXTS)
    np.testing.assert_array_equal(fresh, make(str(folder)).fit(TEXTS).transform(TEXTS))
    assert not np.array_equal(fresh, before)


def test_the_fingerprint_memo_clears(tiny_bert, monkeypatch):
    """benchmarks/bench_grid.py times a cold start with clear_memo (it raised AttributeError
    once the memo stopped being an lru_cache)."""
    from skbert._storage import fingerprint

    first = fingerprint.directory_fingerprint(tiny_bert)
    hashed = []
    real = fingerprint._hash_files
    monkeypatch.setattr(fingerprint, "_hash_files", lambda *a: hashed.append(a) or real(*a))
    assert fingerprint.directory_fingerprint(tiny_bert) == first and not hashed  # memoised
    fingerprint.clear_memo()
    assert fingerprint.directory_fingerprint(tiny_bert) == first and len(hashed) == 1


@pytest.mark.parametrize("source", ["fitted estimator", "folder"])
def test_weights_loaded_in_place_after_a_memory_fit_are_hashed_anew(
    tiny_bert, tmp_path, monkeypatch, source
):
    """``memory`` set at fit, then the loaded network's weights replaced in place
    (``load_state_dict``): the cache serves the new weights' vectors, not the old ones; the
    weights are hashed again only when they changed."""
    import torch

    from skbert._estimator import feature_memory

    hashed = []
    real = feature_memory.state_fingerprint
    monkeypatch.setattr(
        feature_memory, "state_fingerprint", lambda *a: hashed.append(1) or real(*a)
    )
    model = make(tiny_bert).fit(TEXTS) if source == "fitted estimator" else tiny_bert
    est = make(model, memory=tmp_path / "cache").fit(TEXTS)
    at_fit = len(hashed)  # the fitted estimator's weights: hashed by fit
    before = est.transform(TEXTS)  # encoded (a deferred encoder loaded), then read
    np.testing.assert_array_equal(est.transform(TEXTS), before)
    assert len(hashed) == at_fit
    state = {k: v * 1.5 for k, v in est.fitted_network().backbone.state_dict().items()}
    with torch.no_grad():
        est.fitted_network().backbone.load_state_dict(state)
    fresh = make(tiny_bert).fit(TEXTS)
    fresh.network_.backbone.load_state_dict(state)
    expected = fresh.transform(TEXTS)
    assert not np.array_equal(expected, before)
    np.testing.assert_array_equal(est.transform(TEXTS), expected)
    np.testing.assert_array_equal(est.transform(TEXTS), expected)  # read back
    assert len(hashed) == at_fit + 1  # once for the new weights


def _changed(network):
    """Weights scaled by 1.5 in place (``load_state_dict``), and the vectors they give."""
    import torch

    state = {k: v * 1.5 for k, v in network.backbone.state_dict().items()}
    with torch.no_grad():
        network.backbone.load_state_dict(state)
    return state


@pytest.mark.parametrize("when", ["before the first transform", "then copied"])
def test_weights_changed_in_place_never_go_under_the_folders_key(tiny_bert, tmp_path, when):
    """A deferred encoder loaded by fitted_network() and changed before the first transform
    was taken for the folder's weights (the first time seen): its vectors were stored under
    the folder's key, and a new estimator over the untouched folder read them (1.77 apart).
    A pickled or deep-copied estimator whose weights were changed served the old vectors."""
    import copy
    import pickle

    memory = tmp_path / "cache"
    folder_vectors = make(tiny_bert).fit(TEXTS).transform(TEXTS)
    est = make(tiny_bert, memory=memory).fit(TEXTS)
    if when == "then copied":
        np.testing.assert_array_equal(est.transform(TEXTS), folder_vectors)  # cached
    state = _changed(est.fitted_network())
    fresh = make(tiny_bert).fit(TEXTS)
    fresh.network_.backbone.load_state_dict(state)
    expected = fresh.transform(TEXTS)
    copies = (
        [est] if when != "then copied" else [pickle.loads(pickle.dumps(est)), copy.deepcopy(est)]
    )
    for each in copies:
        np.testing.assert_array_equal(each.transform(TEXTS), expected)
    untouched = make(tiny_bert, memory=memory).fit(TEXTS)
    np.testing.assert_array_equal(untouched.transform(TEXTS), folder_vectors)


def test_a_copy_of_unchanged_weights_reads_the_folders_key(tiny_bert, tmp_path, monkeypatch):
    """A pickled memory= fit of unchanged weights keeps their key: it reads the vectors
    cached under the folder's key, hashing nothing; so does a network moved (its storages
    replaced, as .to(device) does) by a transform."""
    import pickle

    from skbert._estimator import feature_memory

    est = make(tiny_bert, memory=tmp_path / "cache").fit(TEXTS)
    vectors = est.transform(TEXTS)  # loads the encoder: its key is the folder's
    hashed = []
    real = feature_memory.state_fingerprint
    monkeypatch.setattr(
        feature_memory, "state_fingerprint", lambda *a: hashed.append(1) or real(*a)
    )
    copy = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(copy.transform(TEXTS), vectors)
    forward = copy._forward_all

    def moved_then_forward(*args, **kwargs):  # new storages, the same weights: as .to(cuda)
        copy.fitted_network().double().float()
        return forward(*args, **kwargs)

    copy._forward_all = moved_then_forward
    new = [f"{text} again" for text in TEXTS]
    np.testing.assert_array_equal(copy.transform(new), est.transform(new))
    np.testing.assert_array_equal(copy.transform(TEXTS), vectors)
    assert hashed == []  # the moved weights kept their key: nothing was hashed


def test_memory_under_the_home_folder(tiny_bert, tmp_path, monkeypatch):
    """``memory="~/..."`` is a folder in the home folder, not a folder named "~" in the
    working directory; a file there is refused by its expanded name."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    expected = make(tiny_bert).fit(TEXTS).transform(TEXTS)
    est = make(tiny_bert, memory="~/skbert-cache").fit(TEXTS)
    np.testing.assert_allclose(est.transform(TEXTS), expected, rtol=0, atol=1e-6)
    assert len(shards(home / "skbert-cache")) == 1
    assert list(work.iterdir()) == []
    (home / "a-file").write_text("x")
    with pytest.raises(FeatureCacheError, match=r"memory='.*home/a-file' is a file"):
        make(tiny_bert, memory="~/a-file").fit(TEXTS)
    with pytest.raises(FeatureCacheError, match=r"memory='.*home/a-file' is a file"):
        make(tiny_bert, memory=Path("~/a-file")).fit(TEXTS)


def test_a_text_repeated_in_one_call_is_encoded_and_stored_once(tiny_bert, tmp_path, capsys):
    texts = ["the cat sat"] * 40 + ["a dog"] + ["the cat sat"] * 3 + ["a dog", "good film"]
    expected = make(tiny_bert).fit(TEXTS).transform(texts)
    est = make(tiny_bert, memory=tmp_path, verbose=1).fit(TEXTS)
    capsys.readouterr()
    vectors = est.transform(texts)
    assert "0 of 46 texts read from the feature cache, 3 encoded" in capsys.readouterr().err
    assert sum(len(np.load(path)) for path in shards(tmp_path)) == 3  # one row per text
    np.testing.assert_array_equal(vectors, expected)
    for text in set(texts):  # in the caller's order, every repeat the same row
        same = vectors[[i for i, t in enumerate(texts) if t == text]]
        np.testing.assert_array_equal(same, np.broadcast_to(same[0], same.shape))
    np.testing.assert_array_equal(est.transform(texts), vectors)  # read back
    assert "46 of 46 texts read from the feature cache, 0 encoded" in capsys.readouterr().err

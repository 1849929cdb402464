"""Dask: a GridSearchCV on a LocalCluster's worker processes, and a corpus embedded or
classified partition by partition (skbert.dask), equal bit for bit to a local run."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

dd = pytest.importorskip("dask.dataframe", reason="needs the dask extra")
distributed = pytest.importorskip("distributed", reason="needs the dask extra")
pd = pytest.importorskip("pandas", reason="skbert.dask returns pandas-backed frames (dask extra)")

import joblib  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from skbert import BertSentenceTransformer, BertTextClassifier  # noqa: E402

TEXTS = [
    f"text number {i} is {'good' if i % 3 else 'bad'} and {'long ' * (i % 7)}" for i in range(60)
]
LABELS = np.array([int(i % 3 != 0) for i in range(60)])


def test_bad_inputs_say_what_is_allowed(tiny_bert):
    from skbert.dask import transform

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    with pytest.raises(TypeError, match="dask.dataframe Series"):
        transform(est, TEXTS)
    three = dd.from_pandas(pd.DataFrame({"a": ["x"], "b": ["y"], "c": ["z"]}), npartitions=1)
    with pytest.raises(ValueError, match="2 columns"):
        transform(est, three)
    one = dd.from_pandas(pd.Series(["x"]), npartitions=1)
    for threads in (0, True, 1.5):
        with pytest.raises(ValueError, match="threads must be a positive int"):
            transform(est, one, threads=threads)
    assert transform(est, one, threads=np.int64(1)).compute().shape == (1, 16)
    from skbert.dask import predict

    with pytest.raises(NotFittedError):
        predict(BertTextClassifier(tiny_bert), one)
    multilabel = BertTextClassifier(tiny_bert, device="cpu", max_epochs=1).fit(
        TEXTS[:4], np.array([[1, 0], [0, 1], [1, 1], [0, 0]])
    )
    with pytest.raises(ValueError, match="multi-label BertTextClassifier gives a 0/1 matrix"):
        predict(multilabel, one)


def test_final_steps_that_give_no_column_per_text_are_refused_up_front(tiny_bert):
    """A pipeline ending in KMeans failed at compute with AttributeError 'classes_' (its
    predict, one cluster per text, now works; its predict_proba is refused); one ending in a
    classifier fitted on a 2-D y with 'Data must be 1-dimensional' (predict) or 'Must pass
    2-d input' (predict_proba); an outlier detector is refused up front."""
    from sklearn.cluster import KMeans
    from sklearn.ensemble import IsolationForest
    from sklearn.neighbors import KNeighborsClassifier

    from skbert.dask import predict, predict_proba

    one = dd.from_pandas(pd.Series(TEXTS[:4]), npartitions=2)
    km = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), KMeans(2, n_init=1))
    km.fit(TEXTS[:8])
    clusters = predict(km, one)
    got = clusters.compute(scheduler="sync")
    np.testing.assert_array_equal(got.to_numpy(), km.predict(TEXTS[:4]))
    assert got.dtype == clusters.dtype == km.predict(TEXTS[:4]).dtype
    with pytest.raises(TypeError, match=r"Pipeline has no predict_proba\(\)"):
        predict_proba(km, one)
    forest = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), IsolationForest())
    forest.fit(TEXTS[:8])
    with pytest.raises(TypeError, match="got IsolationForest, which is none of them; support"):
        predict(forest, one)
    y = np.c_[LABELS[:8], 1 - LABELS[:8]]
    knn = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), KNeighborsClassifier(2))
    knn.fit(TEXTS[:8], y)
    for method in (predict, predict_proba):
        with pytest.raises(ValueError, match=r"KNeighborsClassifier fitted on a 2-D y \(multi"):
            method(knn, one)
    multilabel = BertTextClassifier(tiny_bert, device="cpu", max_epochs=1).fit(TEXTS[:8], y)
    got = predict_proba(multilabel, one).compute(scheduler="sync")  # still supported
    np.testing.assert_array_equal(got.to_numpy(), multilabel.predict_proba(TEXTS[:4]))


def test_predictions_of_every_partition_have_the_meta_dtype_and_write_parquet(tiny_bert, tmp_path):
    """String labels came back as pandas' str from a partition, object from the meta (and an
    empty partition): to_parquet raised ArrowInvalid. A Ridge head gave float32, not float64."""
    from sklearn.linear_model import Ridge

    from skbert.dask import predict

    labels = np.where(LABELS[:12] == 1, "good", "bad").astype(object)
    clf = BertTextClassifier(tiny_bert, device="cpu", max_epochs=1).fit(TEXTS[:12], labels)
    reg = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), Ridge())
    reg.fit(TEXTS[:12], LABELS[:12].astype(float))
    parts = pd.Series(TEXTS[:9], index=range(9))
    series = dd.from_pandas(parts, npartitions=3)
    series = dd.concat([series, dd.from_pandas(parts.iloc[:0], npartitions=1)])  # one empty
    for name, est in (("labels", clf), ("values", reg)):
        result = predict(est, series)
        computed = [part.compute(scheduler="sync") for part in result.partitions]
        assert {str(part.dtype) for part in computed} == {str(result.dtype)}, name
        result.to_frame().to_parquet(tmp_path / name)
        back = pd.read_parquet(tmp_path / name)["prediction"].to_numpy()
        if name == "labels":
            np.testing.assert_array_equal(back, est.predict(TEXTS[:9]))
        else:  # Ridge's float32 products differ with the batch in the last bit
            np.testing.assert_allclose(back, est.predict(TEXTS[:9]), rtol=1e-6)
    assert str(predict(reg, series).dtype) == "float64"


def test_local_scheduler_without_a_client(tiny_bert):
    """No distributed client (this runs before the module's cluster starts): Dask's threaded
    scheduler, the estimator in the graph once."""
    from skbert.dask import transform

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    series = dd.from_pandas(pd.Series(TEXTS), npartitions=3)
    with pytest.raises(ValueError):
        distributed.get_client()
    got = transform(est, series).compute(scheduler="threads").to_numpy()
    np.testing.assert_array_equal(got, est.transform(TEXTS))


def test_a_bad_text_is_named_by_its_index_label_and_any_2d_regressor_gives_columns(tiny_bert):
    """A worker's error named the text by its position in the partition alone (X[0]), not
    by the index label a local call names; a pipeline ending in a scikit-learn regressor
    fitted on a 2-D y got a 1-D meta and failed at compute with a pandas error."""
    from sklearn.cross_decomposition import PLSRegression
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import Ridge
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.preprocessing import FunctionTransformer

    from skbert.dask import predict, transform

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    # a first step of the user's that reads its texts by position gets lists, as before
    by_position = FunctionTransformer(
        lambda X: [X[i] for i in range(len(X))], feature_names_out="one-to-one"
    )
    theirs = make_pipeline(by_position, BertSentenceTransformer(tiny_bert, device="cpu"))
    theirs.fit(TEXTS[:2])
    got = transform(theirs, dd.from_pandas(pd.Series(TEXTS[:8]), npartitions=2))
    np.testing.assert_array_equal(got.compute(scheduler="sync"), theirs.transform(TEXTS[:8]))
    pls = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), PLSRegression(2))
    pls.fit(TEXTS[:12], LABELS[:12].astype(float))  # its coef_ is 2-D for a 1-D y too
    assert predict(pls, dd.from_pandas(pd.Series(TEXTS), npartitions=2)).ndim == 1
    texts = pd.Series(TEXTS[:6], index=range(100, 106), dtype=object)
    texts[105] = None
    with pytest.raises(ValueError, match=r"X\[1\] \(index label 105\) is missing"):
        transform(est, dd.from_pandas(texts, npartitions=3)).compute(scheduler="sync")
    pairs = pd.DataFrame({"a": TEXTS[:4], "b": TEXTS[4:8]}, index=range(50, 54), dtype=object)
    pairs.loc[53, "b"] = None
    with pytest.raises(ValueError, match=r"X\[1, 1\] \(index label 53\) is missing"):
        transform(est, dd.from_pandas(pairs, npartitions=2)).compute(scheduler="sync")
    y = np.c_[LABELS[:12], 1.0 - LABELS[:12], np.arange(12.0)]
    heads = (Ridge(), RandomForestRegressor(n_estimators=3, random_state=0))
    for head in (*heads, KNeighborsRegressor(n_neighbors=2)):  # no coef_, no n_outputs_
        reg = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), head)
        reg.fit(TEXTS[:12], y)
        frame = predict(reg, dd.from_pandas(pd.Series(TEXTS), npartitions=3))
        assert list(frame.columns) == ["0", "1", "2"]
        got = frame.compute(scheduler="sync")
        np.testing.assert_allclose(got.to_numpy(), reg.predict(TEXTS), rtol=1e-6)
        one = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), head)
        one.fit(TEXTS[:12], y[:, 0])  # a 1-D y: one Series, as before
        assert predict(one, dd.from_pandas(pd.Series(TEXTS), npartitions=3)).ndim == 1


@pytest.fixture(scope="module")
def client():
    """Two single-threaded worker processes on loopback, no dashboard; closed after."""
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
    )
    client = distributed.Client(cluster, timeout="60s")
    try:
        yield client
    finally:
        client.close(timeout=30)
        cluster.close(timeout=30)


def _pid_scorer(log):
    """Accuracy, and the scoring process's id appended to ``log``."""

    def score(estimator, X, y):
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()}\n")
        return float((estimator.predict(X) == y).mean())

    return score


def test_grid_search_runs_on_the_workers_with_the_local_scores(client, tiny_bert, tmp_path):
    pipe = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), LogisticRegression())
    grid = {"bertsentencetransformer__pooling": ["mean", "cls", "max"]}
    local = GridSearchCV(pipe, grid, cv=2, scoring=_pid_scorer(tmp_path / "local")).fit(
        TEXTS, LABELS
    )
    log = tmp_path / "remote"
    with joblib.parallel_config(backend="dask"):
        remote = GridSearchCV(pipe, grid, cv=2, scoring=_pid_scorer(log)).fit(TEXTS, LABELS)
    workers = set(client.run(os.getpid).values())
    pids = {int(p) for p in log.read_text().split()}
    assert pids <= workers and len(pids) == 2, (pids, workers)  # both workers, not this one
    assert os.getpid() not in pids
    for key in ("mean_test_score", "split0_test_score", "split1_test_score"):
        np.testing.assert_array_equal(remote.cv_results_[key], local.cv_results_[key])


@pytest.mark.parametrize("threads", [None, 1])
def test_corpus_transform_equals_the_local_transform_bit_for_bit(client, tiny_bert, threads):
    from skbert.dask import transform

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    index = pd.RangeIndex(100, 100 + len(TEXTS))
    series = dd.from_pandas(pd.Series(TEXTS, index=index, name="text"), npartitions=4)
    out = transform(est, series, threads=threads)
    assert list(out.columns) == list(est.get_feature_names_out())
    computed = out.compute()
    assert computed.index.equals(index)  # order and index kept
    assert computed.dtypes.unique().tolist() == [np.float32]
    np.testing.assert_array_equal(computed.to_numpy(), est.transform(TEXTS))


def test_corpus_predictions_and_pairs(client, tiny_bert):
    from skbert.dask import predict, predict_proba, transform

    pipe = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), LogisticRegression())
    pipe.fit(TEXTS, LABELS)
    series = dd.from_pandas(pd.Series(TEXTS), npartitions=3)
    np.testing.assert_array_equal(predict(pipe, series).compute().to_numpy(), pipe.predict(TEXTS))
    proba = predict_proba(pipe, series).compute()
    assert list(proba.columns) == ["0", "1"]
    # float64 as predict_proba's, bit for bit (float32 was 2.9e-8 off)
    assert proba.dtypes.tolist() == [np.float64, np.float64]
    np.testing.assert_array_equal(proba.to_numpy(), pipe.predict_proba(TEXTS))
    pairs = pd.DataFrame({"a": TEXTS[:20], "b": TEXTS[20:40]})
    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    got = transform(est, dd.from_pandas(pairs, npartitions=2)).compute().to_numpy()
    np.testing.assert_array_equal(got, est.transform(list(zip(pairs.a, pairs.b, strict=True))))


def test_regressor_predictions(client, tiny_bert):
    from skbert import BertTextRegressor
    from skbert.dask import predict

    scores = np.linspace(0.0, 5.0, len(TEXTS))
    train = {"max_epochs": 1, "batch_size": 8, "random_state": 0, "device": "cpu"}
    reg = BertTextRegressor(tiny_bert, **train).fit(TEXTS, scores)
    index = pd.RangeIndex(7, 7 + len(TEXTS))
    got = predict(reg, dd.from_pandas(pd.Series(TEXTS, index=index), npartitions=3)).compute()
    assert got.name == "prediction" and got.dtype == np.float64 and got.index.equals(index)
    np.testing.assert_array_equal(got.to_numpy(), reg.predict(TEXTS))
    multi = BertTextRegressor(tiny_bert, **train).fit(TEXTS, np.c_[scores, -scores])
    pairs = pd.DataFrame({"a": TEXTS[:20], "b": TEXTS[20:40]})
    reg_pairs = BertTextRegressor(tiny_bert, **train).fit(pairs.to_numpy(), scores[:20])
    frame = predict(multi, dd.from_pandas(pd.Series(TEXTS), npartitions=2)).compute()
    assert list(frame.columns) == ["0", "1"] and frame.dtypes.unique().tolist() == [np.float64]
    np.testing.assert_array_equal(frame.to_numpy(), multi.predict(TEXTS))
    got = predict(reg_pairs, dd.from_pandas(pairs, npartitions=2)).compute().to_numpy()
    np.testing.assert_array_equal(got, reg_pairs.predict(pairs.to_numpy()))


def test_skbert_imports_without_dask():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dask', 'distributed'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import skbert\n"
        "try:\n"
        "    import skbert.dask\n"
        "except ImportError as error:\n"
        "    print('ImportError:', error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "pip install 'skbert[dask]'" in done.stdout, done.stdout + done.stderr


def _stored_digests(root):
    """Every digest of every complete shard under ``root`` (one entry per stored row)."""
    from pathlib import Path

    return [d for path in Path(root).rglob("*.keys.npy") for d in np.load(path).tolist()]


def test_a_shared_cache_encodes_each_text_once_for_the_cluster(client, tiny_bert, tmp_path):
    """A grid search on the workers with ``memory=`` on a folder they share: every text is
    encoded (and stored) once, although the folds' training sets overlap and two workers
    fit at once; scores are those of the uncached local search."""
    cache = tmp_path / "cache"
    pipe = make_pipeline(
        BertSentenceTransformer(tiny_bert, device="cpu", memory=str(cache)), LogisticRegression()
    )
    grid = {"bertsentencetransformer__pooling": ["mean", "cls", "max"]}
    with joblib.parallel_config(backend="dask"):
        remote = GridSearchCV(pipe, grid, cv=3).fit(TEXTS, LABELS)
    stored = _stored_digests(cache)
    assert len(stored) == len(set(stored)) == len(set(TEXTS))
    plain = make_pipeline(BertSentenceTransformer(tiny_bert, device="cpu"), LogisticRegression())
    local = GridSearchCV(plain, grid, cv=3).fit(TEXTS, LABELS)
    np.testing.assert_array_equal(
        remote.cv_results_["mean_test_score"], local.cv_results_["mean_test_score"]
    )


def test_a_collection_computes_again_after_the_workers_holding_the_estimator_are_lost(
    client, tiny_bert
):
    """Scattered, the estimator was lost with the workers holding it (the memory manager
    keeps one copy of idle data): a later compute raised FutureCancelledError. Computed from
    the bytes the scheduler keeps, it is made again on a worker."""
    from skbert.dask import transform

    est = BertSentenceTransformer(tiny_bert, device="cpu").fit(TEXTS[:1])
    vectors = transform(est, dd.from_pandas(pd.Series(TEXTS[:12]), npartitions=2))
    expected = est.transform(TEXTS[:12])
    np.testing.assert_array_equal(vectors.compute().to_numpy(), expected)
    holders = [
        worker
        for key, workers in client.who_has().items()
        if "BertSentenceTransformer" in str(key)
        for worker in workers
    ]
    assert holders
    try:
        client.restart_workers(holders, timeout=120)  # they start again empty, as if OOM-killed
        np.testing.assert_array_equal(vectors.compute().to_numpy(), expected)
    finally:
        client.wait_for_workers(2, timeout=120)
    # made on the client that was active: a local scheduler cannot reach it, and Dask says so
    with pytest.raises(ValueError, match="Missing dependency skbert.dask-BertSentenceTransformer"):
        vectors.compute(scheduler="sync")

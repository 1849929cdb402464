"""How wall time grows with texts, candidates and Dask workers (the "Scaling out" page).

Workloads, all with the packaged all-MiniLM-L6-v2 in fp32 on the CPU:

* ``transform``: the first 690 / 1,379 / 2,758 STS-B test sentences, embedded by a fitted
  ``BertSentenceTransformer``: a local ``transform`` (one process, torch's threads), and
  ``skbert.dask.transform`` on a ``LocalCluster`` of 1 and of 2 single-threaded worker
  processes (8 partitions). Each Dask result is checked bit for bit against the local one.
* ``grid``: ``GridSearchCV(cv=3)`` of ``Pipeline(BertSentenceTransformer(max_length=64),
  LogisticRegression)`` over 2 and 4 candidates (pooling ``mean``/``cls``, then also
  ``max``/``mean`` of layer 3) on the 400 bundled sentences, no cache: locally
  (``n_jobs=1``) and inside ``joblib.parallel_config(backend="dask")`` on the cluster of 2
  workers (joblib's Dask backend counts the cluster's threads, and with one in all it runs the
  search sequentially in the client: a 1-worker grid would time the local run). The refit of
  the best candidate on all the data runs in the client, as ``GridSearchCV`` does. Each
  search's ``cv_results_`` scores are checked against the local ones.

The workers are warmed up (the model loaded, one small transform) before timing; the cluster
binds to 127.0.0.1 with no dashboard. Run from the repository root on a quiet machine (about 6
minutes on 2 CPU cores)::

    pip install -e '.[models,bench,dask]'
    python benchmarks/bench_scaling.py
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import cpu_flags, cpu_model, default_data_home, model_path  # noqa: E402

SIZES = (690, 1379, 2758)
CANDIDATES = (
    {"bertsentencetransformer__pooling": "mean"},
    {"bertsentencetransformer__pooling": "cls"},
    {"bertsentencetransformer__pooling": "max", "bertsentencetransformer__layer": 3},
    {"bertsentencetransformer__pooling": "mean", "bertsentencetransformer__layer": 3},
)


def timed(call):
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def grid_search(model, X, y, n_candidates):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline

    from skbert import BertSentenceTransformer

    pipe = make_pipeline(
        BertSentenceTransformer(model=model, max_length=64), LogisticRegression(max_iter=1000)
    )
    grid = [{k: [v] for k, v in c.items()} for c in CANDIDATES[:n_candidates]]
    search = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    return [search.cv_results_[f"split{i}_test_score"].tolist() for i in range(3)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-home", default=default_data_home())
    args = parser.parse_args(argv)

    import dask.dataframe as dd
    import joblib
    import numpy as np
    import pandas as pd
    import torch
    from dask.distributed import Client, LocalCluster

    import skbert.dask
    from skbert import BertSentenceTransformer
    from skbert.datasets import load_demo_sentiment, load_stsb

    flags = cpu_flags()
    shown = sorted(f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma"))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; flags: {' '.join(shown)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads locally")
    model = model_path()
    pairs, _ = load_stsb("test", data_home=args.data_home, return_X_y=True)
    sentences = np.asarray(pairs).ravel().tolist()  # 1,379 pairs: 2,758 sentences
    X, y = load_demo_sentiment(return_X_y=True)
    est = BertSentenceTransformer(model=model).fit(sentences[:1])
    est.transform(sentences[:64])  # warm

    local = {}
    local_grid = {}
    rows = []
    for n in SIZES:
        seconds, local[n] = timed(lambda n=n: est.transform(sentences[:n]))
        rows.append(("transform", n, "local", seconds, "-"))
    for k in (2, 4):
        seconds, local_grid[k] = timed(lambda k=k: grid_search(model, X, y, k))
        rows.append(("grid", k, "local", seconds, "-"))

    for workers in (1, 2):
        with (
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            client.run(lambda: __import__("skbert"))
            warm = dd.from_pandas(pd.Series(sentences[:64]), npartitions=workers)
            skbert.dask.transform(est, warm).compute()
            for n in SIZES:
                corpus = dd.from_pandas(pd.Series(sentences[:n]), npartitions=8)
                seconds, got = timed(lambda c=corpus: skbert.dask.transform(est, c).compute())
                same = np.array_equal(got.to_numpy(), local[n])
                rows.append(("transform", n, f"dask {workers}x1", seconds, same))
            # joblib's Dask backend runs as many tasks at once as the cluster has threads: with
            # one in all, it runs the search sequentially here, in the client, not on the cluster
            for k in (2, 4) if workers > 1 else ():
                with joblib.parallel_config(backend="dask"):
                    seconds, scores = timed(lambda k=k: grid_search(model, X, y, k))
                rows.append(("grid", k, f"dask {workers}x1", seconds, scores == local_grid[k]))

    print(f"\n{'workload':<10} {'size':>6} {'run':<10} {'seconds':>8}  identical")
    for workload, size, run, seconds, same in rows:
        print(f"{workload:<10} {size:>6} {run:<10} {seconds:8.2f}  {same}")
    print("size: texts for transform, candidates (x 3 folds) for grid; no grid on 1 worker:")
    print("joblib runs it in the client when the cluster has one thread in all")


if __name__ == "__main__":
    main()

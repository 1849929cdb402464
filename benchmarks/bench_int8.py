"""Issue 26: int8 inference on the CPU, skbert versus sentence-transformers' int8 backends.

Workload: the STS-B test sentences (both columns: 2,758 for the 1,379 pairs; ``--n`` takes the
first ``n // 2`` pairs), all-MiniLM-L6-v2 (the packaged one; ``--model`` for another, e.g. a
base-size one in a local folder), mean pooling, normalised vectors, on the CPU, batch size 32.
Contenders:

* ``st-torch-fp32``: ``SentenceTransformer(path, device="cpu").encode(...)``, the anchor of the
  ratios;
* ``skbert-fp32`` / ``-bf16`` / ``-int8``: ``BertSentenceTransformer(path, pooling="mean",
  normalize=True, precision=...)``;
* ``st-onnx-int8``: ``backend="onnx"`` after ``export_dynamic_quantized_onnx_model`` with the
  configuration of this CPU's instruction set (``avx512_vnni``, ``avx512``, ``avx2`` or
  ``arm64``);
* ``st-openvino-int8``: ``backend="openvino"`` after ``export_static_quantized_openvino_model``,
  calibrated on 300 STS-B *train* sentences written to a local folder (its default calibration
  set is GLUE SST-2, read from the Hugging Face Hub).

The ONNX and OpenVINO contenders need ``optimum[onnxruntime]`` and ``optimum-intel[openvino]``,
which (optimum 2.1, optimum-intel 1.27) require transformers < 4.58, while skbert needs
transformers 5: they run in a separate Python environment, named by ``--peer-python`` (one with
sentence-transformers, optimum, optimum-intel, openvino and onnxruntime installed; skbert is not
imported there). That process times its own ``st-torch-fp32`` again, so its ratios are to the
s-t fp32 of the same process; without ``--peer-python`` these two contenders are left out.

Machines here are shared and noisy, so every speed figure is a ratio measured in one process:
each contender is warmed up once (its vectors are the ones scored), then all are timed in turn
for ``--rounds`` rounds; the report gives the median texts per second. Quality: STS-B Spearman
(x100) of the cosine of each pair's vectors, and per-text cosine to skbert-fp32 (min and mean).
Bars (the issue's acceptance): skbert-int8 >= 1.4x skbert-bf16 and >= the fastest s-t int8
backend; per-text cosine to fp32 >= 0.99; Spearman within 0.5 of skbert-fp32; 100 texts (every
27th) encoded one per call give the int8 vectors of the whole call bit for bit. A report, not a
test: it always exits 0 and prints PASS/FAIL beside each bar.

Run from the repository root (about 3 minutes on 2 cores)::

    pip install -e '.[models,bench]'
    python benchmarks/bench_int8.py --peer-python ../st-int8-env/bin/python
    python benchmarks/bench_int8.py --n 200 --rounds 1      # a dry run
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

BATCH = 32
INT8_OVER_BF16_BAR = 1.4
COSINE_BAR = 0.99
SPEARMAN_DROP_BAR = 0.5
PER_TEXT_CHECKS = 100
CALIBRATION_SENTENCES = 300
PEERS = ("st-onnx-int8", "st-openvino-int8")


def read_stsb(data_home: str, split: str):
    """(first sentences, second sentences, scores) of an STS-B split, read as
    :func:`skbert.datasets.load_stsb` reads it (without importing skbert: the peer process has
    no skbert)."""
    path = Path(data_home) / "stsb" / f"sts-{split}.csv"
    first, second, scores = [], [], []
    with open(path, encoding="utf-8") as handle:
        for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            scores.append(float(row[4]))
            first.append(row[5])
            second.append(row[6])
    return first, second, np.asarray(scores)


def timed(encode, texts, rounds, names):
    """Median texts per second of each ``encode[name](texts)``, timed in turn per round."""
    times = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            start = time.perf_counter()
            encode[name](texts)
            times[name].append(time.perf_counter() - start)
    return {name: len(texts) / statistics.median(times[name]) for name in names}


def st_encoder(model):
    def encode(texts):
        return model.encode(
            texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True
        )

    return encode


def instruction_set_config() -> str:
    """The ``export_dynamic_quantized_onnx_model`` configuration of this CPU."""
    from _common import cpu_flags

    flags = cpu_flags()
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "arm64"
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    return "avx512" if "avx512f" in flags else "avx2"


def onnx_int8_file(config: str) -> str:
    """The file ``export_dynamic_quantized_onnx_model`` writes for ``config``: named after its
    weights' type, unsigned int8 for ``"avx2"`` (optimum's AVX2 configuration), signed for
    the others."""
    weights = "quint8" if config == "avx2" else "qint8"
    return f"onnx/model_{weights}_{config}.onnx"


# ---------------------------------------------------------------- the peer process
def run_peers(args) -> None:
    """In the peer environment: export and time the ONNX and OpenVINO int8 models; write the
    vectors and speeds to ``args.peer``."""
    from sentence_transformers import (
        SentenceTransformer,
        export_dynamic_quantized_onnx_model,
        export_static_quantized_openvino_model,
    )

    work = Path(args.peer)
    texts = json.loads((work / "texts.json").read_text())
    model_dir = work / "model"  # a copy: the exports write beside the model
    shutil.copytree(args.model, model_dir, dirs_exist_ok=True)
    onnx = SentenceTransformer(str(model_dir), backend="onnx", device="cpu")
    config = args.onnx_config
    export_dynamic_quantized_onnx_model(onnx, config, str(model_dir))
    openvino = SentenceTransformer(str(model_dir), backend="openvino", device="cpu")
    export_static_quantized_openvino_model(
        openvino,
        None,
        str(model_dir),
        dataset_name=str(work / "calibration"),
        dataset_config_name="default",
        dataset_split="train",
        column_name="sentence",
    )
    encode = {
        "st-torch-fp32": st_encoder(SentenceTransformer(args.model, device="cpu")),
        "st-onnx-int8": st_encoder(
            SentenceTransformer(
                str(model_dir),
                backend="onnx",
                device="cpu",
                model_kwargs={"file_name": onnx_int8_file(config)},
            )
        ),
        "st-openvino-int8": st_encoder(
            SentenceTransformer(
                str(model_dir),
                backend="openvino",
                device="cpu",
                model_kwargs={"file_name": "openvino/openvino_model_qint8_quantized.xml"},
            )
        ),
    }
    vectors = {name: encode[name](texts) for name in encode}  # the warm-up
    speeds = timed(encode, texts, args.rounds, list(encode))
    np.savez(work / "vectors.npz", **vectors)
    (work / "speeds.json").write_text(json.dumps(speeds))


def peer_results(args, texts, calibration):
    """Speeds (relative to the peer's own s-t fp32) and vectors of :data:`PEERS`, from
    ``args.peer_python``; empty without it."""
    if not args.peer_python:
        return {}, {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        (work / "texts.json").write_text(json.dumps(texts))
        (work / "calibration").mkdir()
        with open(work / "calibration" / "train.csv", "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["sentence"])
            writer.writerows([s] for s in calibration)
        command = [args.peer_python, __file__, "--peer", str(work), "--model", args.model]
        command += ["--rounds", str(args.rounds), "--onnx-config", instruction_set_config()]
        subprocess.run(command, check=True, cwd=Path(__file__).parent)
        speeds = json.loads((work / "speeds.json").read_text())
        with np.load(work / "vectors.npz") as stored:
            vectors = {name: stored[name] for name in PEERS}
    anchor = speeds["st-torch-fp32"]
    return {name: speeds[name] / anchor for name in PEERS}, vectors


# ---------------------------------------------------------------- the main process
def main() -> None:
    from _common import cpu_flags, cpu_model, default_data_home, model_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=None, help="sentences (default: all 2,758)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=None, help="a local model folder (default: MiniLM)")
    parser.add_argument("--data-home", default=default_data_home())
    parser.add_argument("--peer-python", default=None, help="Python of the optimum environment")
    parser.add_argument("--peer", default=None, help=argparse.SUPPRESS)  # the peer process
    parser.add_argument("--onnx-config", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        run_peers(args)
        return
    args.model = args.model or model_path()

    import torch
    from scipy.stats import spearmanr
    from sentence_transformers import SentenceTransformer

    from skbert import BertSentenceTransformer
    from skbert._inference.int8 import int8_unavailable

    fallback = int8_unavailable(torch.device("cpu"))  # skbert-int8 then runs float32
    first, second, scores = read_stsb(args.data_home, "test")
    pairs = len(first) if args.n is None else max(1, args.n // 2)
    texts = first[:pairs] + second[:pairs]
    calibration = read_stsb(args.data_home, "train")[0][:CALIBRATION_SENTENCES]

    encode = {"st-torch-fp32": st_encoder(SentenceTransformer(args.model, device="cpu"))}
    skbert = {}
    for precision in ("fp32", "bf16", "int8"):
        est = BertSentenceTransformer(
            args.model, pooling="mean", normalize=True, precision=precision, device="cpu"
        ).fit(["a"])
        skbert[precision] = est
        encode[f"skbert-{precision}"] = est.transform
    vectors = {name: np.asarray(encode[name](texts)) for name in encode}  # the warm-up
    speeds = timed(encode, texts, args.rounds, list(encode))
    anchor = speeds["st-torch-fp32"]
    ratios = {name: speeds[name] / anchor for name in speeds}
    peer_ratios, peer_vectors = peer_results(args, texts, calibration)
    ratios.update(peer_ratios)
    vectors.update(peer_vectors)

    flags = cpu_flags()
    shown = sorted(f for f in flags if "vnni" in f or "bf16" in f or f.startswith("amx"))
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); flags: {', '.join(shown) or 'none'}")
    print(f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"model: {args.model}; {len(texts)} sentences ({pairs} STS-B test pairs)")
    print(f"{args.rounds} rounds, medians\n")
    reference = vectors["skbert-fp32"]
    spearman = {}
    print("| contender | texts/s | vs s-t torch fp32 | STS-B Spearman | cosine to skbert fp32 |")
    print("|---|---|---|---|---|")
    for name in list(encode) + [p for p in PEERS if p in vectors]:
        v = vectors[name]
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        sims = (v[:pairs] * v[pairs:]).sum(1)
        spearman[name] = spearmanr(sims, scores[:pairs]).statistic * 100
        cos = (v * reference).sum(1) / np.linalg.norm(reference, axis=1)
        speed = f"{speeds[name]:,.0f}" if name in speeds else "(own process)"
        print(
            f"| {name} | {speed} | {ratios[name]:.2f}x | {spearman[name]:.2f} | "
            f"min {cos.min():.4f}, mean {cos.mean():.4f} |"
        )
    if not peer_ratios:
        print("\n(st-onnx-int8, st-openvino-int8: not run; give --peer-python)")
    if fallback:
        print(f"\nskbert-int8 ran in float32 here: {fallback}. The bars are not judged.")
        return

    int8 = vectors["skbert-int8"]
    cosine = (int8 * reference).sum(1) / np.linalg.norm(int8, axis=1)
    cosine /= np.linalg.norm(reference, axis=1)
    checks = list(range(0, len(texts), 27))[:PER_TEXT_CHECKS]
    alone = np.vstack([skbert["int8"].transform([texts[i]]) for i in checks])
    over_bf16 = ratios["skbert-int8"] / ratios["skbert-bf16"]
    print()
    bars = [
        (f"int8 >= {INT8_OVER_BF16_BAR}x bf16 ({over_bf16:.2f}x)", over_bf16 >= INT8_OVER_BF16_BAR),
        (
            f"per-text cosine to fp32 >= {COSINE_BAR} (min {cosine.min():.4f})",
            cosine.min() >= COSINE_BAR,
        ),
        (
            f"Spearman within {SPEARMAN_DROP_BAR} of fp32 "
            f"({spearman['skbert-int8']:.2f} vs {spearman['skbert-fp32']:.2f})",
            abs(spearman["skbert-int8"] - spearman["skbert-fp32"]) <= SPEARMAN_DROP_BAR,
        ),
        (
            f"{len(checks)} texts one per call equal the whole call, bit for bit",
            np.array_equal(alone, int8[checks]),
        ),
    ]
    if peer_ratios:
        fastest = max(peer_ratios, key=peer_ratios.get)
        bars.append(
            (
                f"int8 >= the fastest s-t int8 backend ({fastest}, {peer_ratios[fastest]:.2f}x)",
                ratios["skbert-int8"] >= peer_ratios[fastest],
            )
        )
    for text, passed in bars:
        print(f"{'PASS' if passed else 'FAIL'}  {text}")


if __name__ == "__main__":
    main()

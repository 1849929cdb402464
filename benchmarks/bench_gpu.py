"""GPU benchmark in one command: skbert versus its peers, side by side on one device.

Three parts, each contender timed in the same process on the same device (``--device``,
default ``cuda``), with the model given as a local folder (nothing is downloaded):

1. ``transform``: the STS-B test sentences (both columns) and the SST-2 training sentences
   (70,107 texts), mean pooling, L2-normalised.
   ``BertSentenceTransformer(folder, pooling="mean", normalize=True, device=DEV,
   precision=P).fit(texts[:1]).transform(texts)`` against
   ``SentenceTransformer(folder, device=DEV).encode(texts, batch_size=256)``, in fp32 and in
   bf16 (ST: the model cast with ``.to(torch.bfloat16)``). One warm-up pass each, then
   ``--rounds`` timed rounds with the contenders in turn; texts/s from the medians. Per-row
   cosine against ST fp32 (first round's outputs): fp32 >= 0.9999, bf16 >= 0.999. Bar: skbert
   >= 3x ST at the same precision.
2. ``siamese``: SBERT fine-tuning on the 5,749 STS-B training pairs, 1 epoch, batch 16, fp32,
   the setups of ``bench_sts_finetune.py`` (ST: ``Transformer`` + mean ``Pooling`` trained with
   ``fit`` and ``CosineSimilarityLoss``; skbert: ``BertSentenceTransformer(fine_tune="full")``),
   each timed from loading to the end of the epoch; Spearman x100 of cosine on STS-B test.
   skbert with ``precision="auto"`` (the default) is timed too: the default must never be
   slower than fp32. Bars: skbert >= 2x ST, Spearman within 0.5 of ST (or above).
3. ``classify``: ``BertTextClassifier`` on 20,000 SST-2 training sentences (seed-0 sample),
   1 epoch, batch 32, max_length 64, fp32, against ``transformers.Trainer`` set up as in
   ``bench_finetune.py`` (on CUDA when the device is; ``use_cpu=True`` for ``--device cpu``),
   same learning rate; accuracy on SST-2 dev. Bars: skbert >= 2x Trainer, accuracy within 0.5
   points of Trainer (or above).

On CUDA every timer is read after ``torch.cuda.synchronize()``. The script is a report, not a
test: it always exits 0 and ends with a table of the bars and PASS/FAIL (a part that raises is
reported as ERROR and the others still run). About 5-7 minutes on an H200.

``--fp16-model DIR`` takes a folder whose safetensors weights are stored in float16 (how the
model travels to a GPU machine with a small upload limit): it is loaded with ``AutoModel``,
cast to float32 and saved with its tokenizer and sentence-transformers files into a temporary
folder, which is then used as ``--model``. ``--export-fp16 OUT_DIR`` writes such a copy of
``--model`` and exits.

Run from the repository root::

    pip install -e '.[models,bench]'
    python benchmarks/bench_gpu.py                                   # on CUDA
    python benchmarks/bench_gpu.py --device cpu --quick              # dry run, 1-2 minutes
    python benchmarks/bench_gpu.py --export-fp16 /tmp/minilm-fp16    # the model, halved
    python benchmarks/bench_gpu.py --fp16-model /tmp/minilm-fp16     # on the GPU machine

Data are read from ``--data-home``, else ``$SKBERT_DATA``, else ``../shared/data``.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _common import cpu_model, default_data_home, model_path  # noqa: E402

PARTS = ("transform", "siamese", "classify")
TRANSFORM_SPEED_BAR = 3.0
FP32_COSINE_BAR, BF16_COSINE_BAR = 0.9999, 0.999
SIAMESE_SPEED_BAR, CLASSIFY_SPEED_BAR = 2.0, 2.0
AUTO_SPEED_BAR = 1.0  # precision="auto" never slower than fp32
QUALITY_TOLERANCE = 0.5  # points (Spearman x100, accuracy in %)
ST_BATCH, SIAMESE_BATCH, CLASSIFY_BATCH, MAX_LENGTH = 256, 16, 32, 64
SIZES = {  # full run, --quick
    "transform": (None, 500),
    "pairs": (None, 200),
    "test_pairs": (None, 200),
    "sentences": (20_000, 500),
    "dev": (None, 200),
}
ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
ST_FOLDERS = ("1_Pooling", "2_Normalize")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
)


# ---------------------------------------------------------------------------- setup


def size(name: str, quick: bool):
    return SIZES[name][1 if quick else 0]


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def machine_line(device: str) -> str:
    import sentence_transformers
    import torch
    import transformers

    if device.startswith("cuda") and torch.cuda.is_available():
        where = (
            f"GPU: {torch.cuda.get_device_name(torch.device(device))} (CUDA "
            f"{torch.version.cuda}); CPU: {cpu_model()} ({os.cpu_count()} logical cores)"
        )
    else:
        where = f"CPU: {cpu_model()} ({os.cpu_count()} logical cores)"
    return (
        f"{where}; torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}; "
        f"Python {platform.python_version()}"
    )


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def clock(device: str) -> float:
    """``time.perf_counter()`` once the device has finished its queued work."""
    sync(device)
    return time.perf_counter()


def release(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def copy_side_files(source: Path, target: Path) -> None:
    """The tokenizer and sentence-transformers files of ``source`` (those present) into
    ``target``, byte for byte; a folder without
    tokenizer files gets its tokenizer saved by ``AutoTokenizer``."""
    from transformers import AutoTokenizer

    tokenizer_files = [name for name in TOKENIZER_FILES if (source / name).is_file()]
    if not tokenizer_files:
        AutoTokenizer.from_pretrained(source).save_pretrained(target)
    for name in (*tokenizer_files, *ST_FILES):
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    for name in ST_FOLDERS:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, dirs_exist_ok=True)


def export_fp16(source: str, out_dir: str) -> None:
    """Write a float16 copy of ``source`` (weights, tokenizer, sentence-transformers files)."""
    import inspect

    from transformers import AutoModel

    quiet_transformers()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(source)
    save = model.half().save_pretrained
    if "safe_serialization" in inspect.signature(save).parameters:  # transformers < 5
        save(out, safe_serialization=True)
    else:  # transformers >= 5 writes safetensors only
        save(out)
    copy_side_files(Path(source), out)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote a float16 copy of {source} to {out} ({total / 1e6:.1f} MB)")


def fp32_from_fp16(fp16_dir: str, out_dir: str) -> str:
    """Load the float16 folder with ``AutoModel``, cast to float32, save with its tokenizer
    and sentence-transformers files into ``out_dir``; return ``out_dir``."""
    from transformers import AutoModel

    AutoModel.from_pretrained(fp16_dir).float().save_pretrained(out_dir)
    copy_side_files(Path(fp16_dir), Path(out_dir))
    return out_dir


def load_corpus(data_home: str, quick: bool) -> list[str]:
    from skbert.datasets import load_sst2, load_stsb

    X, _ = load_stsb("test", data_home=data_home, return_X_y=True)
    sst2, _ = load_sst2("train", data_home=data_home, return_X_y=True)
    texts = [str(s) for s in X[:, 0]] + [str(s) for s in X[:, 1]] + [str(s) for s in sst2]
    n = size("transform", quick)
    if n:  # a fixed sample across both sources
        pick = np.sort(np.random.RandomState(0).choice(len(texts), n, replace=False))
        texts = [texts[i] for i in pick]
    return texts


def row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-300)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ---------------------------------------------------------------------------- 1. transform
def part_transform(args, rows: list) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from skbert import BertSentenceTransformer

    texts = load_corpus(args.data_home, args.quick)
    device, n = args.device, len(texts)
    print(f"\n[transform] {n} texts (STS-B test both columns + SST-2 train), mean pooling")

    def st(dtype):
        model = SentenceTransformer(args.model, device=device)
        if dtype is not None:
            model = model.to(dtype)
        return lambda texts: model.encode(
            texts, batch_size=ST_BATCH, convert_to_numpy=True, show_progress_bar=False
        )

    def skbert(precision):
        est = BertSentenceTransformer(
            args.model, pooling="mean", normalize=True, device=device, precision=precision
        ).fit(texts[:1])
        return est.transform

    contenders = {
        "ST-fp32": st(None),
        "skbert-fp32": skbert("fp32"),
        "ST-bf16": st(torch.bfloat16),
        "skbert-bf16": skbert("bf16"),
    }
    # Warm-up: one whole pass each (--quick: 64 texts, to keep the dry run short).
    warm = texts[:64] if args.quick else texts
    for name, run in contenders.items():
        start = clock(device)
        run(warm)
        print(f"  warm-up {name}: {clock(device) - start:.2f} s", flush=True)
    outputs, times = {}, {name: [] for name in contenders}
    for r in range(args.rounds):
        for name, run in contenders.items():
            start = clock(device)
            out = run(texts)
            times[name].append(clock(device) - start)
            if r == 0:  # the first round's outputs serve the agreement check
                outputs[name] = np.asarray(out, dtype=np.float32)
                assert outputs[name].shape[0] == n, (name, outputs[name].shape)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()))
    del contenders
    release(device)

    rate = {name: n / statistics.median(ts) for name, ts in times.items()}
    print(f"  {'contender':<12} {'texts/s':>10} {'median s':>9} {'vs ST-fp32':>11}  rounds (s)")
    for name, ts in times.items():
        print(
            f"  {name:<12} {rate[name]:>10.0f} {statistics.median(ts):>9.2f} "
            f"{rate[name] / rate['ST-fp32']:>10.2f}x  " + " ".join(f"{t:.2f}" for t in ts)
        )
    for precision in ("fp32", "bf16"):
        ratio = rate[f"skbert-{precision}"] / rate[f"ST-{precision}"]
        print(f"  skbert-{precision} / ST-{precision} = {ratio:.2f}x")
        rows.append(
            (
                f"transform {precision}: skbert / ST",
                f"{ratio:.2f}x",
                f">= {TRANSFORM_SPEED_BAR}x",
                verdict(ratio >= TRANSFORM_SPEED_BAR),
            )
        )
    for name, bar in (("skbert-fp32", FP32_COSINE_BAR), ("skbert-bf16", BF16_COSINE_BAR)):
        cos = row_cosine(outputs[name], outputs["ST-fp32"])
        print(f"  cosine {name} vs ST-fp32: min {cos.min():.6f}  mean {cos.mean():.6f}")
        rows.append(
            (
                f"cosine {name} vs ST-fp32",
                f"min {cos.min():.6f}",
                f">= {bar}",
                verdict(cos.min() >= bar),
            )
        )
    cos = row_cosine(outputs["ST-bf16"], outputs["ST-fp32"])
    print(f"  cosine ST-bf16 vs ST-fp32 (for reference): min {cos.min():.6f}")


# ---------------------------------------------------------------------------- 2. siamese
def siamese_st(args, train, test, seed=0):
    """``bench_sts_finetune.py``'s ST run (mean pooling) on ``args.device``."""
    from bench_sts_finetune import train_st

    return train_st(
        args.model,
        "mean",
        train,
        test,
        batch=SIAMESE_BATCH,
        device=args.device,
        seed=seed,
        clock=lambda: clock(args.device),
    )


def siamese_skbert(args, train, test, precision, seed=0):
    """``bench_sts_finetune.py``'s skbert run (mean pooling) on ``args.device``."""
    from skbert import BertSentenceTransformer

    (X, y), (X_test, y_test) = train, test
    est = BertSentenceTransformer(
        args.model,
        pooling="mean",
        fine_tune="full",
        batch_size=SIAMESE_BATCH,
        max_epochs=1,
        device=args.device,
        precision=precision,
        random_state=seed,
    )
    start = clock(args.device)
    est.fit(X, y)
    seconds = clock(args.device) - start
    return seconds, 100 * est.score(X_test, y_test)


def part_siamese(args, rows: list) -> None:
    import types

    import torch
    from transformers import AutoConfig

    from skbert._core.devices import resolve_precision
    from skbert._core.flops import training_flops
    from skbert.datasets import load_stsb

    X, y = load_stsb("train", data_home=args.data_home, return_X_y=True)
    X_test, y_test = load_stsb("test", data_home=args.data_home, return_X_y=True)
    n, n_test = size("pairs", args.quick), size("test_pairs", args.quick)
    train = (X[:n], y[:n]) if n else (X, y)
    test = (X_test[:n_test], y_test[:n_test]) if n_test else (X_test, y_test)
    # what the timed fit resolves "auto" to: its training depends on the model's size
    flops = training_flops(types.SimpleNamespace(config=AutoConfig.from_pretrained(args.model)))
    auto = resolve_precision("auto", torch.device(args.device), training_flops=flops)
    auto_name = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[auto]
    print(
        f"\n[siamese] STS-B train {len(train[0])} pairs, 1 epoch, batch {SIAMESE_BATCH}, "
        f"fp32; test {len(test[0])} pairs; precision='auto' trains in {auto_name} here"
    )
    runs = {
        "ST": lambda data, test: siamese_st(args, data, test),
        "skbert-fp32": lambda data, test: siamese_skbert(args, data, test, "fp32"),
        "skbert-auto": lambda data, test: siamese_skbert(args, data, test, "auto"),
    }
    for run in runs.values():  # warm-up: kernels, allocator, file cache
        run((train[0][:64], train[1][:64]), (test[0][:64], test[1][:64]))
        release(args.device)
    result = {}
    for name, run in runs.items():
        result[name] = run(train, test)
        release(args.device)
        seconds, score = result[name]
        print(
            f"  {name:<12} {seconds:>7.2f} s  {2 * len(train[0]) / seconds:>8.1f} sentences/s"
            f"  Spearman x100 {score:.2f}",
            flush=True,
        )
    (t_st, s_st), (t_ours, s_ours), (t_auto, s_auto) = (result[k] for k in runs)
    ratio, auto_ratio, gap = t_st / t_ours, t_ours / t_auto, s_ours - s_st
    rows.append(
        (
            "siamese fp32: skbert / ST",
            f"{ratio:.2f}x",
            f">= {SIAMESE_SPEED_BAR}x",
            verdict(ratio >= SIAMESE_SPEED_BAR),
        )
    )
    rows.append(
        (
            "siamese Spearman: skbert - ST",
            f"{s_ours:.2f} - {s_st:.2f} = {gap:+.2f}",
            f">= -{QUALITY_TOLERANCE}",
            verdict(gap >= -QUALITY_TOLERANCE),
        )
    )
    rows.append(
        (
            f"siamese skbert auto ({auto_name}) / fp32",
            f"{auto_ratio:.2f}x (Spearman {s_auto:.2f})",
            f">= {AUTO_SPEED_BAR}x",
            verdict(auto_ratio >= AUTO_SPEED_BAR)
            if auto is not None
            else "n/a (auto is fp32 here)",
        )
    )


# ---------------------------------------------------------------------------- 3. classify
def classify_skbert(args, X, y, seed=0):
    from skbert import BertTextClassifier

    clf = BertTextClassifier(
        args.model,
        max_length=MAX_LENGTH,
        batch_size=CLASSIFY_BATCH,
        max_epochs=1,
        device=args.device,
        precision="fp32",
        random_state=seed,
    )
    start = clock(args.device)
    clf.fit(X, y)
    return clock(args.device) - start, clf.predict


def classify_trainer(args, X, y, learning_rate, seed=0):
    """``bench_finetune.py``'s Trainer run, on CUDA when the device is."""
    from bench_finetune import train_with_trainer

    return train_with_trainer(
        args.model,
        X,
        y,
        epochs=1,
        learning_rate=learning_rate,
        batch=CLASSIFY_BATCH,
        device=args.device,
        seed=seed,
        clock=lambda: clock(args.device),
    )


def part_classify(args, rows: list) -> None:
    from skbert import BertTextClassifier
    from skbert.datasets import load_sst2

    X, y = load_sst2("train", data_home=args.data_home, return_X_y=True)
    X_dev, y_dev = load_sst2("dev", data_home=args.data_home, return_X_y=True)
    n, n_dev = size("sentences", args.quick), size("dev", args.quick)
    pick = np.random.RandomState(0).choice(len(X), n, replace=False)
    X, y = X[pick], y[pick]
    if n_dev:
        X_dev, y_dev = X_dev[:n_dev], y_dev[:n_dev]
    learning_rate = BertTextClassifier().get_params()["learning_rate"]
    print(
        f"\n[classify] SST-2 train {len(X)} sentences, 1 epoch, batch {CLASSIFY_BATCH}, "
        f"max_length {MAX_LENGTH}, lr {learning_rate}, fp32; dev {len(X_dev)} sentences"
    )
    runs = {
        "Trainer": lambda X, y: classify_trainer(args, X, y, learning_rate),
        "skbert": lambda X, y: classify_skbert(args, X, y),
    }
    for run in runs.values():  # warm-up
        run(X[:64], y[:64])
        release(args.device)
    result = {}
    for name, run in runs.items():
        seconds, predict = run(X, y)
        accuracy = 100 * float(np.mean(predict(X_dev) == y_dev))
        result[name] = seconds, accuracy
        del predict
        release(args.device)
        print(
            f"  {name:<8} {seconds:>7.2f} s  {len(X) / seconds:>8.1f} sentences/s  "
            f"dev accuracy {accuracy:.2f} %",
            flush=True,
        )
    (t_theirs, a_theirs), (t_ours, a_ours) = result["Trainer"], result["skbert"]
    ratio, gap = t_theirs / t_ours, a_ours - a_theirs
    rows.append(
        (
            "classify: skbert / Trainer",
            f"{ratio:.2f}x",
            f">= {CLASSIFY_SPEED_BAR}x",
            verdict(ratio >= CLASSIFY_SPEED_BAR),
        )
    )
    rows.append(
        (
            "classify accuracy: skbert - Trainer",
            f"{a_ours:.2f} - {a_theirs:.2f} = {gap:+.2f}",
            f">= -{QUALITY_TOLERANCE}",
            verdict(gap >= -QUALITY_TOLERANCE),
        )
    )


# ---------------------------------------------------------------------------- main
def run_parts(args) -> None:
    quiet_transformers()
    skip = {part.strip() for part in args.skip.split(",") if part.strip()}
    unknown = skip - set(PARTS)
    if unknown:
        raise SystemExit(f"--skip: unknown part(s) {sorted(unknown)}; choose from {PARTS}")
    print("GPU benchmark: skbert vs sentence-transformers / transformers.Trainer, one device")
    print(machine_line(args.device))
    print(
        f"device: {args.device}; model: {args.model}; rounds: {args.rounds}"
        + ("; --quick (tiny subsets)" if args.quick else "")
    )
    rows: list[tuple[str, str, str, str]] = []
    functions = {"transform": part_transform, "siamese": part_siamese, "classify": part_classify}
    begin = time.perf_counter()
    for part in PARTS:
        if part in skip:
            rows.append((part, "skipped", "", ""))
            continue
        start = time.perf_counter()
        try:
            functions[part](args, rows)
        except Exception:  # a report: show the failure and go on with the other parts
            traceback.print_exc()
            rows.append((part, "raised an exception (traceback above)", "", "ERROR"))
        release(args.device)
        print(f"  ({part}: {time.perf_counter() - start:.0f} s)", flush=True)

    header = ("check", "figure", "bar", "result")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    print(f"\nBars ({args.device}; total {time.perf_counter() - begin:.0f} s)")
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--model", default=None, help="model folder (default: packaged MiniLM)")
    parser.add_argument(
        "--fp16-model",
        metavar="DIR",
        help="a folder with float16 weights: cast to float32 in a temporary folder, used as "
        "--model",
    )
    parser.add_argument(
        "--export-fp16", metavar="OUT_DIR", help="write a float16 copy of --model and exit"
    )
    parser.add_argument("--device", default="cuda", help='torch device (default "cuda")')
    parser.add_argument("--quick", action="store_true", help="tiny subsets, 1 round: a dry run")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (default 3)")
    parser.add_argument(
        "--data-home",
        default=default_data_home(),
        help="folder holding stsb/ and sst2-senteval/ (default: $SKBERT_DATA, else ../shared/data)",
    )
    parser.add_argument(
        "--skip", default="", help=f"comma list of parts to skip: {','.join(PARTS)}"
    )
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.fp16_model and args.model:
        raise SystemExit("give --model or --fp16-model, not both")
    if args.export_fp16:
        export_fp16(args.model or model_path(), args.export_fp16)
        return
    if not args.fp16_model:
        args.model = args.model or model_path()
        run_parts(args)
        return
    quiet_transformers()
    with tempfile.TemporaryDirectory(prefix="skbert-fp32-") as folder:
        args.model = fp32_from_fp16(args.fp16_model, folder)
        print(f"float16 weights of {args.fp16_model} cast to float32 in {folder}")
        run_parts(args)


if __name__ == "__main__":
    main()

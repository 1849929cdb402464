"""Reference workload 3: classification fine-tuning, skbert versus transformers.Trainer.

Workload (``../shared/guide/BENCHMARKS.md``): 2,000 SST-2 training sentences (a fixed random
sample), the packaged all-MiniLM-L6-v2, max_length 64, batch size 32, on the CPU.

* ``Trainer``: ``AutoModelForSequenceClassification`` + ``transformers.Trainer`` with its
  dynamic-padding collator (``DataCollatorWithPadding``), same learning rate, epochs, warm-up
  (10 %), weight decay (0.01), gradient clipping (1.0) and batch size.
* ``skbert``: ``BertTextClassifier(max_length=64)`` with its defaults otherwise.

Speed: one epoch each, alternated (Trainer, skbert, Trainer, ...) for ``--rounds`` rounds;
the median training throughput (sentences/second, tokenization included for both) and the
ratio. Quality: each contender trained for skbert's default number of epochs at skbert's
default learning rate, then dev accuracy on the 872 SST-2 dev sentences, beside frozen mean
features + LogisticRegression on the same 2,000 sentences.

Run from the repository root (about 10 minutes on 2 CPU cores)::

    pip install -e '.[models,bench]'
    python benchmarks/bench_finetune.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _common import cpu_model, default_data_home, model_path  # noqa: E402

SPEED_BAR = 1.2
N_TRAIN, MAX_LENGTH, BATCH = 2000, 64, 32


def load_data(data_home):
    from skbert.datasets import load_sst2

    X, y = load_sst2("train", data_home=data_home, return_X_y=True)
    pick = np.random.RandomState(0).choice(len(X), N_TRAIN, replace=False)
    X_dev, y_dev = load_sst2("dev", data_home=data_home, return_X_y=True)
    return X[pick], y[pick], X_dev, y_dev


def run_skbert(X, y, epochs, seed=0):
    from skbert import BertTextClassifier

    clf = BertTextClassifier(
        model_path(),
        max_length=MAX_LENGTH,
        batch_size=BATCH,
        max_epochs=epochs,
        device="cpu",
        precision="fp32",
        random_state=seed,
    )
    start = time.perf_counter()
    clf.fit(X, y)
    return len(X) * epochs / (time.perf_counter() - start), clf.predict


def run_trainer(X, y, epochs, learning_rate, seed=0):
    """Trainer's training throughput (sentences/s) on the CPU, and its predict function."""
    seconds, predict = train_with_trainer(
        model_path(), X, y, epochs=epochs, learning_rate=learning_rate, seed=seed
    )
    return len(X) * epochs / seconds, predict


def train_with_trainer(
    path, X, y, *, epochs, learning_rate, batch=BATCH, device="cpu", seed=0, clock=None
):
    """Fine-tune ``AutoModelForSequenceClassification`` from ``path`` with ``Trainer`` (its
    dynamic-padding collator, 10 % warm-up, weight decay 0.01, clipping 1.0) on ``device``
    (``Trainer`` takes CUDA when there is one; ``"cpu"`` forces the CPU).

    Returns the seconds from loading to the end of training, read with ``clock``
    (``time.perf_counter`` by default; ``bench_gpu.py`` passes one that waits for the GPU),
    and a function predicting labels.
    """
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )
    from transformers.utils import logging as hf_logging

    clock = clock or time.perf_counter
    hf_logging.set_verbosity_error()
    start = clock()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    enc = tokenizer(list(X), truncation=True, max_length=MAX_LENGTH)
    dataset = [
        {"input_ids": ids, "token_type_ids": tt, "attention_mask": am, "labels": int(label)}
        for ids, tt, am, label in zip(
            enc["input_ids"], enc["token_type_ids"], enc["attention_mask"], y, strict=True
        )
    ]
    steps = epochs * int(np.ceil(len(X) / batch))
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch,
            num_train_epochs=epochs,
            learning_rate=learning_rate,
            weight_decay=0.01,
            warmup_steps=int(0.1 * steps),
            max_grad_norm=1.0,
            save_strategy="no",
            report_to="none",
            use_cpu=device == "cpu",
            seed=seed,
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=DataCollatorWithPadding(tokenizer),
        )
        trainer.train()
    seconds = clock() - start
    model.eval()

    def predict(texts):
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), 64):
                batch = tokenizer(
                    list(texts[i : i + 64]),
                    truncation=True,
                    max_length=MAX_LENGTH,
                    padding=True,
                    return_tensors="pt",
                ).to(model.device)
                out.append(model(**batch).logits.argmax(-1).cpu().numpy())
        return np.concatenate(out)

    return seconds, predict


def frozen_baseline(X, y, X_dev, y_dev):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from skbert import BertSentenceTransformer

    pipe = make_pipeline(
        BertSentenceTransformer(model_path(), max_length=MAX_LENGTH, device="cpu"),
        LogisticRegression(max_iter=2000),
    )
    return pipe.fit(X, y).score(X_dev, y_dev)


def main():
    import torch
    import transformers

    from skbert import BertTextClassifier

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-home",
        default=default_data_home(),
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()

    X, y, X_dev, y_dev = load_data(args.data_home)
    defaults = BertTextClassifier().get_params()
    cpu = cpu_model()
    print(
        f"machine: {cpu}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}"
    )
    print(
        f"workload: {N_TRAIN} SST-2 train sentences, max_length {MAX_LENGTH}, batch {BATCH}, "
        f"lr {defaults['learning_rate']}, all-MiniLM-L6-v2, fp32 CPU"
    )

    run_trainer(X[:64], y[:64], 1, defaults["learning_rate"])  # warm-up
    run_skbert(X[:64], y[:64], 1)
    speeds = {"Trainer": [], "skbert": []}
    for _ in range(args.rounds):
        speeds["Trainer"].append(run_trainer(X, y, 1, defaults["learning_rate"])[0])
        speeds["skbert"].append(run_skbert(X, y, 1)[0])
    med = {k: statistics.median(v) for k, v in speeds.items()}
    ratio = med["skbert"] / med["Trainer"]
    print(
        "\nthroughput, one epoch (sentences/s; median of "
        f"{args.rounds}): " + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
    )
    print(
        f"ratio skbert / Trainer: {ratio:.2f}x  "
        f"[{'PASS' if ratio >= SPEED_BAR else 'FAIL'}: bar {SPEED_BAR}x]"
    )
    if args.skip_quality:
        return
    epochs = defaults["max_epochs"]
    _, ours = run_skbert(X, y, epochs)
    _, theirs = run_trainer(X, y, epochs, defaults["learning_rate"])
    acc_ours = float(np.mean(ours(X_dev) == y_dev))
    acc_theirs = float(np.mean(theirs(X_dev) == y_dev))
    acc_frozen = frozen_baseline(X, y, X_dev, y_dev)
    print(
        f"\nSST-2 dev accuracy ({epochs} epochs, lr {defaults['learning_rate']}): "
        f"skbert {acc_ours:.3f}, Trainer {acc_theirs:.3f}, "
        f"frozen mean + LogisticRegression {acc_frozen:.3f}"
    )
    ok = acc_ours > acc_frozen and acc_ours >= acc_theirs
    print(f"[{'PASS' if ok else 'FAIL'}: skbert must beat the frozen baseline and match Trainer]")


if __name__ == "__main__":
    main()

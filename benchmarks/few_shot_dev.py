"""Choosing the contrastive defaults on held-out data, never on the test sets (issue 24).

The few-shot defaults of ``BertSentenceTransformer(objective="contrastive")`` (its loss, batch,
batches per text and learning rate) are chosen here, apart from ``bench_few_shot.py``, which
scores them on the test sets. Each configuration is
``make_pipeline(BertSentenceTransformer(fine_tune="full", objective="contrastive", **config),
LogisticRegression())`` on the packaged all-MiniLM-L6-v2, fitted on ``size`` labelled texts per
class drawn from the training split (the draw of ``bench_few_shot.draw`` for each seed, the
same for every configuration), and scored on held-out texts:

* SST-2: its dev split (872 sentences);
* TREC, which has no dev split: 800 training questions set aside (a fixed permutation), the
  draws being made from the other training questions.

``union`` (an experiment, not a parameter of skbert) puts the frozen pre-trained encoder's
vectors beside the trained ones (``make_union(BertSentenceTransformer(fine_tune="none"),
trained)``) for the LogisticRegression: the head weighs how much of each it needs.

``soup2`` and ``soup2-full`` (experiments too) average the weights of two fits of other seeds
(``seed`` and ``seed + 100003``) into one encoder, a uniform model soup (Wortsman et al.
2022), before the LogisticRegression: with 15 batches per text each (about one default fit's
time) or 30 (twice).

``SetFit`` runs SetFit 1.2 with issue 24's settings (``bench_few_shot.fit_setfit``: its
defaults but ``num_iterations=20``, the paper's setting) on the same draws.

``--heads`` scores each fit (skbert's encoder, or SetFit's trained body) with several
scikit-learn heads on its vectors for the cost of one training: ``lr`` (the
``LogisticRegression()`` of the pipeline and of SetFit, always scored, and checked against the
row of an earlier run of the same fit), ``lr-c0.1`` ... ``lr-c100`` (another ``C``), ``lrcv``
(``LogisticRegressionCV``: ``C`` chosen by stratified cross-validation on the labelled texts),
``centroid`` (``NearestCentroid``) and ``svc`` (``LinearSVC``). A row records its ``head``;
rows without one are of ``lr``.

``--model`` fits another encoder than the packaged all-MiniLM-L6-v2 (a hub id in the local
Hugging Face cache, or a folder), skbert's and SetFit's alike; its rows carry the model, and the
report labels them ``config/model`` (the last part of its name).

``--wise-alphas`` scores each skbert fit at several ``wise_alpha`` (WiSE-FT: the trained
encoder averaged with the pre-trained one) for the cost of one training: the first alpha's fit
writes a ``checkpoint_dir`` (a temporary folder), and each other alpha refits from the
finished checkpoint, which trains nothing. A row records its ``wise_alpha``; rows written
before the parameter existed have none and count as 1 (their fits averaged nothing).
Each fit runs in a process of its own, ``--workers`` of them side by side with one thread
each (the seconds are for comparing configurations of one run, not for quoting). The figures
of every fit are appended to ``--results`` as it ends and reused by later runs; the report
gives each configuration's mean and its paired difference to ``--baseline`` (``batch-cosine``,
skbert's default loss, over which the tuning configurations ``p60`` ... ``nodrop`` are measured)
and to ``SetFit``
(mean over the draws both have, with its standard error, and how many draws it wins).

Run from the repository root::

    pip install -e '.[models,bench]'
    python benchmarks/few_shot_dev.py --configs batch-cosine,cosent,SetFit --sizes 8 --seeds 0-7
    python benchmarks/few_shot_dev.py --configs supcon --wise-alphas 1,0.75,0.5 --sizes 16
    python benchmarks/few_shot_dev.py --report   # the report of the fits in --results only
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import itertools
import json
import multiprocessing
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _common import cpu_model, default_data_home  # noqa: E402

#: a configuration's key (not a parameter) for the pre-trained vectors beside the trained ones
WITH_PRETRAINED = "with_pretrained"
#: a configuration's key (not a parameter): that many fits of other seeds, weights averaged
SOUP = "soup"
#: a configuration's key (not a parameter): that many pipelines of other seeds, their
#: LogisticRegression probabilities averaged (a prediction ensemble, where a soup averages weights)
ENSEMBLE = "ensemble"
#: the default loss, named: the tuning configurations below were measured over it and keep it
#: whatever the default (its rows were named "default" when written; renamed "batch-cosine"),
#: with the encoder's dropout on while it trains (``train_dropout``'s default), as every
#: configuration was fitted before that parameter (``nodrop`` turns it off)
DROPOUT = {"train_dropout": True}
BATCH_COSINE = {"contrastive_loss": "batch-cosine", **DROPOUT}
#: the configurations: BertSentenceTransformer parameters over skbert's defaults
CONFIGS = {
    "batch-cosine": BATCH_COSINE,
    "cosent": {"contrastive_loss": "cosent", **DROPOUT},
    "supcon": {"contrastive_loss": "supcon", **DROPOUT},
    "cosine": {"contrastive_loss": "cosine", **DROPOUT},
    "cosent-lr4e-5": {"contrastive_loss": "cosent", "learning_rate": 4e-5, **DROPOUT},
    "p60": {**BATCH_COSINE, "pairs_per_text": 60},
    "b8": {**BATCH_COSINE, "batch_size": 8},
    "b16": {**BATCH_COSINE, "batch_size": 16},
    "lr5e-5": {**BATCH_COSINE, "learning_rate": 5e-5},
    "lr2e-5": {**BATCH_COSINE, "learning_rate": 2e-5},
    "lr1e-5": {**BATCH_COSINE, "learning_rate": 1e-5},
    "lr2.5e-5": {**BATCH_COSINE, "learning_rate": 2.5e-5},
    "lr1e-4": {**BATCH_COSINE, "learning_rate": 1e-4},
    "lr8e-5": {**BATCH_COSINE, "learning_rate": 8e-5},
    "lld0.8": {**BATCH_COSINE, "layer_lr_decay": 0.8},
    "lld0.9": {**BATCH_COSINE, "layer_lr_decay": 0.9},
    "lld-floor": lambda n_texts: {**BATCH_COSINE, "layer_lr_decay": floored_decay(n_texts)},
    "union": {**BATCH_COSINE, WITH_PRETRAINED: True},
    "soup2": {**BATCH_COSINE, "pairs_per_text": 15, SOUP: 2},
    "soup2-full": {**BATCH_COSINE, SOUP: 2},
    "supcon-t0.05": {"contrastive_loss": "supcon", "temperature": 0.05, **DROPOUT},
    "supcon-t0.2": {"contrastive_loss": "supcon", "temperature": 0.2, **DROPOUT},
    "e2": {**BATCH_COSINE, "max_epochs": 2, "pairs_per_text": 15},
    "ens2": {**BATCH_COSINE, "pairs_per_text": 15, ENSEMBLE: 2},
    "triplet": {"contrastive_loss": "batch-hard-triplet", **DROPOUT},
    "nodrop": {**BATCH_COSINE, "train_dropout": False},
}
HELD_OUT_TREC = 800
#: the heads ``--heads`` may score: the LogisticRegression of the pipeline (and SetFit's) is lr
HEADS = ("lr", "lr-c0.1", "lr-c10", "lr-c100", "lrcv", "centroid", "svc")


def make_head(name: str, per_class: int):
    """The unfitted scikit-learn head ``name`` for ``per_class`` labelled texts of each class."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold
    from sklearn.neighbors import NearestCentroid
    from sklearn.svm import LinearSVC

    if name == "lr":
        return LogisticRegression()
    if name.startswith("lr-c"):
        return LogisticRegression(C=float(name[len("lr-c") :]))
    if name == "lrcv":  # accuracy over the folds (its default scoring in scikit-learn < 1.11)
        folds = StratifiedKFold(min(5, per_class), shuffle=True, random_state=0)
        return LogisticRegressionCV(cv=folds, scoring="accuracy")
    if name == "centroid":
        return NearestCentroid()
    if name == "svc":
        return LinearSVC()
    raise ValueError(f"head={name!r}: choose among {HEADS}")


def floored_decay(n_texts: int, decay: float = 0.9, floor: float = 2e-5) -> float:
    """A candidate rule (not built into skbert): ``decay`` per layer from the ``"auto"`` rate
    of the default loss and batches, but no layer below ``floor`` (SBERT's 2e-5): the largest
    of ``decay`` and ``(floor / rate) ** (1 / n_layers)``, so 1 where the rate is the floor."""
    from bench_few_shot import model_path
    from transformers import AutoConfig

    from skbert import BertSentenceTransformer
    from skbert._estimator.contrastive import auto_learning_rate, in_batch_steps, pairs_per_text

    defaults = BertSentenceTransformer(model_path(), **BATCH_COSINE)  # its loss and batches
    steps = in_batch_steps(n_texts, pairs_per_text(defaults), defaults.batch_size)
    rate = auto_learning_rate("contrastive", defaults.contrastive_loss, steps)
    n_layers = AutoConfig.from_pretrained(model_path()).num_hidden_layers
    return max(decay, min(1.0, floor / rate) ** (1 / n_layers))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--configs", default="batch-cosine,SetFit", help=f"among {[*CONFIGS, 'SetFit']}"
    )
    parser.add_argument("--dataset", default="sst2", choices=("sst2", "trec"))
    parser.add_argument("--sizes", default="8,16", help="labelled texts per class")
    parser.add_argument("--seeds", default="0-4", help="draws: FIRST-LAST")
    parser.add_argument(
        "--wise-alphas",
        default="1",
        help="wise_alpha values each skbert fit is scored at (in [0, 1], comma-separated; "
        "one training per fit)",
    )
    parser.add_argument(
        "--heads",
        default="lr",
        help=f"heads each fit is scored with, among {HEADS} (comma-separated; one training "
        "per fit; lr is always scored)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="hub id (in the local Hugging Face cache) or folder of the encoder; default: "
        "the packaged all-MiniLM-L6-v2",
    )
    parser.add_argument("--workers", type=int, default=2, help="fits side by side")
    parser.add_argument("--data-home", default=default_data_home())
    parser.add_argument(
        "--results",
        default=os.path.join(os.path.dirname(__file__), "results", "few_shot_dev.jsonl"),
        help="JSON lines of every fit, appended as each ends; fits already there are reused",
    )
    parser.add_argument("--report", action="store_true", help="report --results, fit nothing")
    parser.add_argument(
        "--baseline",
        default="batch-cosine",
        help="the configuration the others are paired with (default: batch-cosine, skbert's "
        "default loss)",
    )
    args = parser.parse_args(argv)
    args.configs = [c.strip() for c in args.configs.split(",")]
    unknown = sorted(set(args.configs) - {*CONFIGS, "SetFit"})
    if unknown:
        parser.error(f"--configs: unknown {unknown}; choose among {[*CONFIGS, 'SetFit']}")
    if args.model and "lld-floor" in args.configs:  # its rule reads the packaged model
        parser.error("--configs lld-floor: the packaged all-MiniLM-L6-v2 only, not --model")
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.wise_alphas = [float(a) for a in args.wise_alphas.split(",")]
    args.heads = ["lr", *(h.strip() for h in args.heads.split(",") if h.strip() != "lr")]
    if sorted(set(args.heads) - set(HEADS)):
        parser.error(f"--heads: unknown {sorted(set(args.heads) - set(HEADS))}; among {HEADS}")
    combined = [  # configurations whose fit is not one encoder and its LogisticRegression
        c
        for c in args.configs
        if c != "SetFit"
        and not callable(CONFIGS[c])
        and {WITH_PRETRAINED, SOUP, ENSEMBLE} & set(CONFIGS[c])
    ]
    if len(args.heads) > 1 and (args.wise_alphas != [1.0] or combined):
        parser.error("--heads: with plain fits only (no --wise-alphas, union, soup or ensemble)")
    if any(not 0 <= a <= 1 for a in args.wise_alphas):
        parser.error(f"--wise-alphas: each in [0, 1], got {args.wise_alphas}")
    first, _, last = args.seeds.partition("-")
    args.seeds = list(range(int(first), int(last or first) + 1))
    return args


def split(dataset: str, data_home: str):
    """``(X_pool, y_pool, X_held, y_held)``: where draws come from, and the held-out texts."""
    from bench_few_shot import load

    X, y = load(dataset, "train", data_home)
    if dataset == "sst2":
        X_held, y_held = load("sst2", "dev", data_home)
        return X, y, X_held, y_held
    order = np.random.RandomState(1234).permutation(len(X))
    held, pool = order[:HELD_OUT_TREC], order[HELD_OUT_TREC:]
    return X[pool], y[pool], X[held], y[held]


def one_fit(job: dict) -> list[dict]:
    """One configuration on one draw, in a process of its own: its held-out accuracy, one row
    per ``wise_alpha`` of the job (SetFit: one row)."""
    import tempfile
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    os.environ["TQDM_DISABLE"] = "1"
    torch.set_num_threads(1)
    from bench_few_shot import draw, fit_setfit, model_path

    model_dir = local_folder(job["model"]) if job.get("model") else model_path()
    X, y, X_held, y_held = split(job["dataset"], job["data_home"])
    pick = draw(y, job["size"], job["seed"])

    def scored(model) -> float:
        predicted = np.asarray(model.predict(list(X_held))).astype(str)
        return float(np.mean(predicted == y_held.astype(str)))

    alphas = job.pop("wise_alphas")
    heads = job.pop("heads", ["lr"])
    if job["config"] == "SetFit":
        model, seconds = fit_setfit(X[pick], y[pick], job["seed"], model=model_dir)
        if len(heads) > 1:  # SetFit's trained body, then each head on its vectors
            return headed(job, model.encode, X[pick], y[pick], X_held, y_held, heads, seconds)
        return [{**job, "accuracy": scored(model), "seconds": seconds, "cpu": cpu_model()}]
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    from skbert import BertSentenceTransformer

    settings = CONFIGS[job["config"]]
    if callable(settings):  # a rule of the number of labelled texts
        settings = settings(len(pick))
    settings = dict(settings)
    with_pretrained = settings.pop(WITH_PRETRAINED, False)
    soup = settings.pop(SOUP, 1)
    members = settings.pop(ENSEMBLE, 1)
    if soup > 1 or members > 1:
        start = time.perf_counter()
        combine = souped if soup > 1 else ensembled
        accuracy = combine(
            X[pick], y[pick], model_dir, job["seed"], max(soup, members), settings, scored
        )
        seconds = time.perf_counter() - start  # with the held-out predictions
        return [{**job, "accuracy": accuracy, "seconds": seconds, "cpu": cpu_model()}]
    if len(heads) > 1:  # the encoder, then each head on its vectors
        encoder = member_encoder(model_dir, job["seed"], settings)
        start = time.perf_counter()
        encoder.fit(X[pick], y[pick])
        seconds = time.perf_counter() - start
        rows = headed(job, encoder.transform, X[pick], y[pick], X_held, y_held, heads, seconds)
        return [{**row, "wise_alpha": 1.0} for row in rows]
    rows = []
    with tempfile.TemporaryDirectory() as state:
        for alpha in alphas:  # the first trains; the others reread the finished checkpoint
            encoder = BertSentenceTransformer(
                model_dir,
                fine_tune="full",
                objective="contrastive",
                random_state=job["seed"],
                wise_alpha=alpha,
                checkpoint_dir=state if len(alphas) > 1 else None,
                **settings,
            )
            if with_pretrained:  # the frozen encoder's vectors beside the trained ones
                frozen = BertSentenceTransformer(model_dir, fine_tune="none")
                encoder = make_union(frozen, encoder)
            model = make_pipeline(encoder, LogisticRegression())
            start = time.perf_counter()
            model.fit(X[pick], y[pick])
            seconds = rows[0]["seconds"] if rows else time.perf_counter() - start
            row = {**job, "wise_alpha": alpha, "accuracy": scored(model), "seconds": seconds}
            rows.append({**row, "cpu": cpu_model()})
    return rows


def headed(job, encode, X, y, X_held, y_held, heads, seconds) -> list[dict]:
    """A row per head: each fitted on ``encode(X)`` and scored on ``encode(X_held)``; the
    ``seconds`` of the encoder's training (the heads' are under a second)."""
    train, held = encode(list(X)), encode(list(X_held))
    y, y_held = np.asarray(y).astype(str), np.asarray(y_held).astype(str)
    per_class = int(min(np.unique(y, return_counts=True)[1]))
    rows = []
    for name in heads:
        head = make_head(name, per_class).fit(train, y)
        accuracy = float(np.mean(head.predict(held) == y_held))
        row = {**job, "accuracy": accuracy, "seconds": seconds, "cpu": cpu_model()}
        rows.append(row if name == "lr" else {**row, "head": name})
    return rows


def local_folder(model: str) -> str:
    """``model``'s folder: itself if it is one, else its snapshot in the local HF cache."""
    if os.path.isdir(model):
        return model
    from huggingface_hub import snapshot_download

    return snapshot_download(model, local_files_only=True)


def member_encoder(model_dir: str, seed: int, settings: dict):
    """An unfitted contrastive encoder of a soup or ensemble: seed ``seed``, ``settings``."""
    from skbert import BertSentenceTransformer

    return BertSentenceTransformer(
        model_dir, fine_tune="full", objective="contrastive", random_state=seed, **settings
    )


def souped(X, y, model_dir: str, seed: int, members: int, settings: dict, scored) -> float:
    """``members`` encoders fitted with seeds ``seed``, ``seed + 100003``, ..., their weights
    averaged into the first (a uniform model soup, Wortsman et al. 2022), then the
    LogisticRegression on its vectors; the held-out accuracy."""
    from sklearn.linear_model import LogisticRegression

    from skbert._training.weight_averaging import StartingWeights

    fits = [
        member_encoder(model_dir, seed + 100003 * k, settings).fit(X, y) for k in range(members)
    ]
    first = fits[0]
    for k, other in enumerate(fits[1:], start=2):  # running mean: (k - 1) / k of the first
        StartingWeights(other.network_).blend_into(first.network_, (k - 1) / k)
    head = LogisticRegression().fit(first.transform(list(X)), y)

    class Souped:
        def predict(self, texts):
            return head.predict(first.transform(list(texts)))

    return scored(Souped())


def ensembled(X, y, model_dir: str, seed: int, members: int, settings: dict, scored) -> float:
    """``members`` pipelines (encoder and LogisticRegression) fitted with seeds ``seed``,
    ``seed + 100003``, ..., their predicted probabilities averaged; the held-out accuracy."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    fits = [
        make_pipeline(
            member_encoder(model_dir, seed + 100003 * k, settings), LogisticRegression()
        ).fit(X, y)
        for k in range(members)
    ]

    class Ensembled:
        def predict(self, texts):
            texts = list(texts)
            proba = np.mean([fit.predict_proba(texts) for fit in fits], axis=0)
            return fits[0].classes_[proba.argmax(axis=1)]

    return scored(Ensembled())


def key_of(row: dict) -> tuple:
    alpha = None if row["config"] == "SetFit" else row.get("wise_alpha", 1.0)
    model, head = row.get("model"), row.get("head", "lr")
    return row["config"], row["dataset"], row["size"], row["seed"], alpha, model, head


def label_of(row: dict) -> str:
    """The configuration's name, with its ``wise_alpha`` unless 1 (or SetFit), its ``+head``
    unless lr, and its ``/model`` unless the packaged all-MiniLM-L6-v2."""
    alpha = key_of(row)[4]
    label = row["config"] if alpha in (None, 1.0) else f"{row['config']}@{alpha:g}"
    if row.get("head", "lr") != "lr":
        label += "+" + row["head"]
    if row.get("model"):
        label += "/" + row["model"].rstrip("/").rsplit("/", 1)[-1]
    return label


def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as rows:
        return [json.loads(line) for line in rows if line.strip()]


def paired(mine: dict, theirs: dict) -> str:
    """The paired difference of two configurations' accuracies over the draws both have."""
    common = sorted(set(mine) & set(theirs))
    if not common:
        return "n/a"
    diffs = np.array([mine[seed] - theirs[seed] for seed in common])
    error = diffs.std(ddof=1) / np.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return f"{diffs.mean():+.3f} +- {error:.3f} ({int((diffs > 0).sum())}/{len(diffs)} draws)"


def report(rows: list[dict], baseline: str = "batch-cosine") -> None:
    table = collections.defaultdict(dict)
    seconds = collections.defaultdict(list)
    for row in rows:  # the last row of a fit counts
        table[row["dataset"], row["size"], label_of(row)][row["seed"]] = row["accuracy"]
        seconds[row["dataset"], row["size"], label_of(row)].append(row["seconds"])
    cpus = sorted({row["cpu"] for row in rows})
    print(f"\nheld-out accuracy, all-MiniLM-L6-v2 unless /model; CPU: {', '.join(cpus)}")
    print(f"config@a: wise_alpha=a (none: 1, the trained weights); {baseline!r} at wise_alpha=1")
    print("config+head: that head on the fit's vectors (none: lr, the LogisticRegression)")
    width = max(14, *(len(label) + 2 for _, _, label in table))
    header = (
        f"{'data':<6}{'n/class':>8}  {'config':<{width}}{'draws':>6}{'accuracy':>10}{'fit s':>8}"
    )
    print(f"{header}  {'vs ' + baseline:<30}vs SetFit")
    for (dataset, size, config), accuracies in sorted(table.items()):
        model = config.partition("/")[2]  # paired with the same model's rows
        of_model = "/" + model if model else ""
        base = table.get((dataset, size, baseline + of_model), {})
        setfit = table.get((dataset, size, "SetFit" + of_model), {})
        mean = np.mean(list(accuracies.values()))
        fit_s = np.mean(seconds[dataset, size, config])
        name = config.partition("/")[0]
        print(
            f"{dataset:<6}{size:>8}  {config:<{width}}{len(accuracies):>6}{mean:>10.3f}"
            f"{fit_s:>8.1f}  "
            f"{paired(accuracies, base) if name != baseline else '-':<30}"
            f"{paired(accuracies, setfit) if name != 'SetFit' else '-'}"
        )


def main(argv=None):
    args = parse_args(argv)
    rows = read_rows(args.results)
    if not args.report:
        done = {key_of(row): row for row in rows}  # the last row of a fit
        jobs = []
        for size, seed, config in itertools.product(args.sizes, args.seeds, args.configs):
            job = {"config": config, "dataset": args.dataset, "size": size, "seed": seed}
            if args.model:
                job["model"] = args.model
            alphas = [None] if config == "SetFit" else args.wise_alphas
            missing = [a for a in alphas if key_of({**job, "wise_alpha": a}) not in done]
            if len(args.heads) > 1:  # one training scores every head, lr included
                if any(key_of({**job, "head": h}) not in done for h in args.heads):
                    jobs.append({**job, "wise_alphas": [1.0], "heads": args.heads})
            elif missing:
                jobs.append({**job, "wise_alphas": missing})
        jobs = [{**job, "data_home": args.data_home} for job in jobs]
        print(f"{len(jobs)} fits to run, {len(rows)} rows in {args.results}", flush=True)
        context = multiprocessing.get_context("spawn")
        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
        with concurrent.futures.ProcessPoolExecutor(
            args.workers, mp_context=context, max_tasks_per_child=1
        ) as pool:
            for future in concurrent.futures.as_completed([pool.submit(one_fit, j) for j in jobs]):
                for row in future.result():
                    row = {k: v for k, v in row.items() if k != "data_home"}
                    row["when"] = time.strftime("%Y-%m-%d %H:%M")
                    earlier = done.get(key_of(row))
                    if earlier:  # a head's refit of a fit already there: not written again
                        same = earlier["accuracy"] == row["accuracy"]
                        print(
                            f"  {row['dataset']} {row['size']}/class seed {row['seed']} "
                            f"{label_of(row)}: {row['accuracy']:.3f}, the earlier row's "
                            f"{earlier['accuracy']:.3f}: " + ("reproduced" if same else "DIFFERS"),
                            flush=True,
                        )
                        continue
                    print(
                        f"  {row['dataset']} {row['size']}/class seed {row['seed']} "
                        f"{label_of(row)}: {row['accuracy']:.3f} ({row['seconds']:.0f} s)",
                        flush=True,
                    )
                    with open(args.results, "a", encoding="utf-8") as out:
                        out.write(json.dumps(row) + "\n")
                    rows.append(row)
                    done[key_of(row)] = row
    report(rows, args.baseline)


if __name__ == "__main__":
    main()

"""Few-shot classification: skbert's contrastive Pipeline against SetFit 1.2 (issue 24).

Workload: the packaged all-MiniLM-L6-v2 on the CPU; SST-2 (2 classes) and TREC (6 coarse
classes) from ``skbert.datasets`` (``$SKBERT_DATA``, default ``../shared/data``); 8, 16, 32 and
64 labelled training texts per class, drawn with 5 seeds (the same draw for both); accuracy on
the full test sets (SST-2 1,821 sentences, TREC 500 questions).

* ``SetFit``: ``SetFitModel.from_pretrained`` of the local model folder (offline) and
  ``setfit.Trainer`` with the settings issue 24 names as SetFit's defaults:
  ``CosineSimilarityLoss``, ``num_iterations=20``, 1 epoch, batch size 16, body learning rate
  2e-5, the ``LogisticRegression`` head. All but one are SetFit 1.2's defaults:
  ``num_iterations=20`` is the paper's setting and the default of SetFit's 0.x
  ``SetFitTrainer``; 1.2's ``TrainingArguments`` default is ``num_iterations=None`` with
  ``sampling_strategy="oversampling"`` (fewer pairs than 20 per text up to SST-2's 32 per
  class and TREC's 8, more beyond: 144 against 640 pairs at SST-2's 8, 30,720 against 7,680
  at TREC's 32). ``--methods skbert,SetFit,SetFit-oversample`` also fits SetFit with that
  default, reported beside the bars for information (SST-2's four sizes are in
  ``benchmarks/README.md``).
* ``skbert``: ``make_pipeline(BertSentenceTransformer(fine_tune="full",
  objective="contrastive"), LogisticRegression())``, skbert's defaults otherwise; or, with
  ``--skbert-params``, a candidate's parameters over them (one chosen on held-out texts by
  ``few_shot_dev.py``), whose rows are kept apart from those of the defaults.

Each fit runs in a process of its own, so that its peak memory is the resident-set high-water
mark of that process (``resource.getrusage``: tracemalloc does not see torch's allocations).
Training seconds run from loading the model to the fitted head (skbert's ``fit`` loads the
model; for SetFit ``from_pretrained``, then ``Trainer.train``), without scoring the test set.
A memory run then fits skbert on 1,000 and on 10,000 labelled SST-2 sentences (encoder fit
only; ``--memory-pairs-per-text`` pairs per text, 1 by default so that the 10,000-text fit
takes minutes, not hours: skbert draws its pairs batch by batch, so their number does not
change the memory); ``--memory-setfit`` adds SetFit at the same sizes (it builds every pair of
texts up front). The bars of the acceptance are printed last, each accuracy bar with the
paired difference of the two over the draws both fitted (mean and standard error, in points:
how far apart the two are against the spread of the draws).

The full run takes hours on a small CPU (SetFit alone, 2 cores: about 30 minutes on SST-2, 80 on
TREC), so each fit's figures are appended to ``--results`` (JSON lines, one row per fit, with
the CPU model and the versions) as soon as it ends, and a fit already there for this CPU model
is not run again: a run can be cut and resumed, or split by ``--datasets`` over several sittings.
For each draw the two contenders fit back to back, so their figures are side by side whenever
the run is cut. The report reads the rows of this CPU model only (but those of the methods
named by ``--accuracy-of-any-cpu``, whose accuracy rows of another CPU model are reused where
this one has none: the speed bar is then not judged); the speed ratio is given per data set
and over all.

Run from the repository root::

    pip install -e '.[models,bench]'
    python benchmarks/bench_few_shot.py                                      # the full run
    python benchmarks/bench_few_shot.py --datasets sst2 --memory-sizes ''   # one sitting
    python benchmarks/bench_few_shot.py --sizes 8 --seeds 1 --n-test 100 --iterations 2 \
        --memory-sizes 100,200 --results /tmp/dry.jsonl                      # a dry run
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import resource
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from _common import cpu_flags, cpu_model, default_data_home, model_path  # noqa: E402

DATASETS = ("sst2", "trec")
METHODS = ("skbert", "SetFit", "SetFit-oversample")
#: the contenders of the acceptance bars; "SetFit-oversample" (SetFit 1.2's own default
#: sampling) is reported beside them for information, never run unless named in --methods
CONTENDERS = ("skbert", "SetFit")
ACCURACY_BAR, SPEED_BAR, MEMORY_BAR = 1.0, 2.0, 1.5


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="8,16,32,64", help="labelled texts per class")
    parser.add_argument("--seeds", type=int, default=5, help="draws per size")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--n-test", type=int, default=None, help="first N test texts only")
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="pairs per text of both (SetFit's num_iterations, skbert's pairs_per_text); "
        "by default each its own default (SetFit 20, skbert 'auto'): a small number makes a "
        "quick dry run",
    )
    parser.add_argument(
        "--methods",
        default=",".join(CONTENDERS),
        help="among skbert, SetFit and SetFit-oversample (SetFit with 1.2's TrainingArguments "
        "default num_iterations=None: its oversampling of pairs; not a contender of the bars)",
    )
    parser.add_argument(
        "--skbert-params",
        default="",
        help="JSON of BertSentenceTransformer parameters over skbert's defaults, to score a "
        "candidate chosen on held-out data (few_shot_dev.py), e.g. '{\"batch_size\": 16}'; "
        "its rows are kept apart from the defaults' rows",
    )
    parser.add_argument("--data-home", default=default_data_home())
    parser.add_argument(
        "--memory-sizes", default="1000,10000", help="labelled texts of the memory run ('' skips)"
    )
    parser.add_argument("--memory-pairs-per-text", type=int, default=1)
    parser.add_argument("--memory-setfit", action="store_true", help="SetFit in the memory run")
    parser.add_argument(
        "--results",
        default=os.path.join(os.path.dirname(__file__), "results", "few_shot.jsonl"),
        help="JSON lines of every fit, appended as each ends; fits already there are reused",
    )
    parser.add_argument("--fresh", action="store_true", help="ignore the rows of --results")
    parser.add_argument(
        "--accuracy-of-any-cpu",
        default="",
        help="methods whose accuracy rows are reused from any CPU model where this one has "
        "none (e.g. 'SetFit': its seeded fits score alike on any CPU); the speed bar is then "
        "not judged, since seconds of two CPU models do not compare",
    )
    parser.add_argument(
        "--rerun",
        default="",
        help="methods whose rows of --results are not reused (e.g. 'skbert' after a change "
        "to skbert: SetFit's fits, the long part, are kept)",
    )
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.datasets = [d.strip() for d in args.datasets.split(",")]
    args.methods = [m.strip() for m in args.methods.split(",")]
    args.memory_sizes = [int(s) for s in args.memory_sizes.split(",") if s.strip()]
    try:
        args.skbert_params = json.loads(args.skbert_params) if args.skbert_params else None
    except json.JSONDecodeError as error:
        parser.error(f"--skbert-params: not JSON ({error}): {args.skbert_params!r}")
    if args.skbert_params is not None and not isinstance(args.skbert_params, dict):
        parser.error(f"--skbert-params: a JSON object is needed, got {args.skbert_params!r}")
    args.rerun = [m.strip() for m in args.rerun.split(",") if m.strip()]
    args.accuracy_of_any_cpu = [m.strip() for m in args.accuracy_of_any_cpu.split(",") if m.strip()]
    for name, given, allowed in (
        ("--datasets", args.datasets, DATASETS),
        ("--methods", args.methods, METHODS),
        ("--rerun", args.rerun, METHODS),
        ("--accuracy-of-any-cpu", args.accuracy_of_any_cpu, METHODS),
    ):
        if set(given) - set(allowed):
            parser.error(f"{name}: unknown {sorted(set(given) - set(allowed))}; use {allowed}")
    return args


def load(dataset: str, split: str, data_home: str):
    from skbert.datasets import load_sst2, load_trec

    loader = load_sst2 if dataset == "sst2" else load_trec
    X, y = loader(split, data_home=data_home, return_X_y=True)
    return np.asarray(X, dtype=object), np.asarray(y)


def draw(y, per_class: int, seed: int) -> np.ndarray:
    """``per_class`` random texts of every class (all of a class that has fewer)."""
    rng = np.random.RandomState(seed)
    picks = [
        rng.choice(np.flatnonzero(y == c), min(per_class, (y == c).sum()), replace=False)
        for c in np.unique(y)
    ]
    return rng.permutation(np.concatenate(picks))


def fit_skbert(
    X,
    y,
    seed: int,
    encoder_only: bool = False,
    iterations: int | None = None,
    encoder_params: dict | None = None,
):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from skbert import BertSentenceTransformer

    encoder = BertSentenceTransformer(
        model_path(),
        fine_tune="full",
        objective="contrastive",
        pairs_per_text="auto" if iterations is None else iterations,
        random_state=seed,
        **(encoder_params or {}),
    )
    model = encoder if encoder_only else make_pipeline(encoder, LogisticRegression())
    start = time.perf_counter()
    model.fit(X, y)
    return model, time.perf_counter() - start


def fit_setfit(
    X,
    y,
    seed: int,
    encoder_only: bool = False,
    iterations: int | None = None,
    model: str | None = None,
    oversample: bool = False,
):
    """SetFit 1.2 with issue 24's settings (``num_iterations=20``) on ``(X, y)``; ``model``: a
    local folder (default: the packaged all-MiniLM-L6-v2); ``oversample``: SetFit 1.2's own
    default instead (``num_iterations=None``: ``sampling_strategy="oversampling"``). Returns
    the fitted model and its seconds."""
    from datasets import Dataset
    from setfit import SetFitModel, Trainer, TrainingArguments

    start = time.perf_counter()  # skbert's fit loads its model too
    model = SetFitModel.from_pretrained(model or model_path())
    arguments = TrainingArguments(
        batch_size=16,
        num_epochs=1,
        num_iterations=None if oversample else 20 if iterations is None else iterations,
        seed=seed,
        report_to="none",
        save_strategy="no",
        show_progress_bar=False,
    )
    labels = [str(label) for label in y]  # TREC's labels are strings
    data = Dataset.from_dict({"text": list(X), "label": labels})
    trainer = Trainer(model=model, args=arguments, train_dataset=data)
    if encoder_only:
        trainer.train_embeddings(*trainer.dataset_to_parameters(data), args=arguments)
    else:
        trainer.train()
    return model, time.perf_counter() - start


def peak_rss_mb() -> float:
    """This process's resident-set high-water mark, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_run(job: dict) -> dict:
    """One fit (and its test accuracy), in a fresh process; returns the figures."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ["TQDM_DISABLE"] = "1"  # SetFit's Trainer shows its bars whatever it is told
    X, y = load(job["dataset"], "train", job["data_home"])
    pick = draw(y, job["per_class"], job["seed"]) if job.get("per_class") else job["pick"]
    fit = fit_skbert if job["method"] == "skbert" else fit_setfit
    params = dict(job.get("params", {}))
    if job["method"] == "SetFit-oversample":
        params = {**params, "iterations": None, "oversample": True}
    model, seconds = fit(X[pick], y[pick], job["seed"], **params)
    out = {"seconds": seconds, "peak_mb": peak_rss_mb(), "n_train": len(pick)}
    if not job.get("params", {}).get("encoder_only"):
        X_test, y_test = load(job["dataset"], "test", job["data_home"])
        X_test, y_test = X_test[: job["n_test"]], y_test[: job["n_test"]]
        predicted = np.asarray(model.predict(list(X_test)))
        out["accuracy"] = float(np.mean(predicted.astype(str) == y_test.astype(str)))
    return out


def in_child(job: dict) -> dict:
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(one_run, job).result()


def versions() -> dict:
    import importlib.metadata as metadata
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    out = {"skbert commit": commit}
    for name in ("torch", "transformers", "sentence-transformers", "setfit", "scikit-learn"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as rows:
        return [json.loads(line) for line in rows if line.strip()]


def key_of(row: dict) -> tuple:
    return (
        row["kind"],
        row["dataset"],
        row["size"],
        row["seed"],
        row["method"],
        row["iterations"],
        row.get("n_test"),
        json.dumps(row.get("skbert_params"), sort_keys=True),
    )


def run_or_reuse(args, done: dict, row: dict, job: dict) -> dict:
    """The row of this fit: from ``--results`` where this CPU model has it, else run now."""
    row = {**row, "cpu": cpu_model()}
    if key_of(row) in done and not args.fresh and row["method"] not in args.rerun:
        return done[key_of(row)]
    if key_of(row) in args.borrowed and not args.fresh and row["method"] not in args.rerun:
        return args.borrowed[key_of(row)]  # another CPU model's fit (--accuracy-of-any-cpu)
    figures = in_child(job)
    row = {**row, **figures, "versions": versions(), "when": time.strftime("%Y-%m-%d %H:%M")}
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")
    done[key_of(row)] = row  # the last row of a key is the one reused
    return row


def candidate(args, method: str, job: dict, key: dict) -> None:
    """``--skbert-params`` into an skbert fit's job, and into its row's key (kept apart)."""
    if method == "skbert" and args.skbert_params:
        job["params"] = {**job["params"], "encoder_params": args.skbert_params}
        key["skbert_params"] = args.skbert_params


def accuracy_runs(args, done: dict) -> dict:
    results = {}
    for dataset in args.datasets:
        for size in args.sizes:
            for seed in range(args.seeds):
                for method in args.methods:  # back to back on the same draw
                    job = {
                        "dataset": dataset,
                        "per_class": size,
                        "seed": seed,
                        "method": method,
                        "data_home": args.data_home,
                        "n_test": args.n_test,
                        "params": {"iterations": args.iterations},
                    }
                    key = {
                        "kind": "accuracy",
                        "dataset": dataset,
                        "size": size,
                        "seed": seed,
                        "method": method,
                        # SetFit-oversample draws as many pairs as SetFit 1.2 decides
                        "iterations": None if method == "SetFit-oversample" else args.iterations,
                        "n_test": args.n_test,
                    }
                    candidate(args, method, job, key)
                    run = run_or_reuse(args, done, key, job)
                    results.setdefault((dataset, size, method), []).append(run)
                    print(
                        f"  {dataset} {size}/class seed {seed} {method}: accuracy "
                        f"{run['accuracy']:.3f}, {run['seconds']:.1f} s, "
                        f"{run['peak_mb']:.0f} MB",
                        flush=True,
                    )
    return results


def memory_runs(args, done: dict) -> dict:
    X, y = load("sst2", "train", args.data_home)
    order = np.random.RandomState(0).permutation(len(X))
    methods = ["skbert"] + (["SetFit"] if args.memory_setfit else [])
    out = {}
    for method in methods:
        for n in args.memory_sizes:
            params = {"encoder_only": True, "iterations": args.memory_pairs_per_text}
            job = {
                "dataset": "sst2",
                "pick": order[:n],
                "seed": 0,
                "method": method,
                "data_home": args.data_home,
                "params": params,
            }
            key = {
                "kind": "memory",
                "dataset": "sst2",
                "size": n,
                "seed": 0,
                "method": method,
                "iterations": args.memory_pairs_per_text,
            }
            candidate(args, method, job, key)
            out[method, n] = run_or_reuse(args, done, key, job)
            print(
                f"  memory {method} {n} texts: {out[method, n]['peak_mb']:.0f} MB, "
                f"{out[method, n]['seconds']:.1f} s",
                flush=True,
            )
    return out


def _as_list(runs) -> list:
    return runs if isinstance(runs, list) else [runs]


def mean_sd(values) -> str:
    return f"{np.mean(values):.3f} +- {np.std(values):.3f}"


def paired_points(mine: list, peer: list) -> str:
    """``"; paired, N draws: +d +- se points"``: skbert minus SetFit over the seeds both have,
    in accuracy points, with the standard error of that mean ("" for fewer than 2 draws)."""
    ours = {r["seed"]: r["accuracy"] for r in mine}
    theirs = {r["seed"]: r["accuracy"] for r in peer}
    common = sorted(set(ours) & set(theirs))
    if len(common) < 2:
        return ""
    diffs = 100 * np.array([ours[seed] - theirs[seed] for seed in common])
    error = diffs.std(ddof=1) / np.sqrt(len(diffs))
    return f"; paired, {len(common)} draws: {diffs.mean():+.1f} +- {error:.1f} points"


def report(args, results: dict, memory: dict) -> None:
    print(f"\nCPU: {cpu_model()}, {os.cpu_count()} cores; all-MiniLM-L6-v2")
    flags = sorted(cpu_flags() & {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16"})
    print(f"CPU flags: {' '.join(flags) or 'none of avx2 / avx512 / amx'}")
    rows = [r for runs in [*results.values(), *memory.values()] for r in _as_list(runs)]
    commits = sorted({str(r.get("versions", {}).get("skbert commit")) for r in rows})
    print(f"skbert commits of these fits: {', '.join(commits)}")
    if args.skbert_params:
        print(f"skbert's parameters over its defaults: {json.dumps(args.skbert_params)}")
    for method in args.accuracy_of_any_cpu:
        cpus = sorted({r["cpu"] for k, runs in results.items() if k[2] == method for r in runs})
        print(f"{method}'s fits ran on: {'; '.join(cpus)}")
    width = max(8, *(len(method) + 1 for _, _, method in results))
    print(
        f"{'data':<6}{'n/class':>8}{'method':>{width}}{'accuracy':>18}{'train s':>10}{'peak MB':>9}"
    )
    for (dataset, size, method), runs in results.items():
        accuracy = mean_sd([r["accuracy"] for r in runs])
        seconds = np.mean([r["seconds"] for r in runs])
        peak = max(r["peak_mb"] for r in runs)
        print(f"{dataset:<6}{size:>8}{method:>{width}}{accuracy:>18}{seconds:>10.1f}{peak:>9.0f}")
    if memory:
        print("\nmemory run (SST-2 train, encoder fit only)")
        for (method, n), run in memory.items():
            print(
                f"  {method:<7}{n:>7} texts: peak {run['peak_mb']:.0f} MB ({run['seconds']:.0f} s)"
            )
    print("\nacceptance")
    if set(CONTENDERS) <= set(args.methods):
        for dataset in args.datasets:
            for size in args.sizes:
                mine, peer = results[dataset, size, "skbert"], results[dataset, size, "SetFit"]
                ours = np.mean([r["accuracy"] for r in mine])
                theirs = np.mean([r["accuracy"] for r in peer])
                verdict = "met" if ours >= ACCURACY_BAR * theirs else "NOT met"
                print(
                    f"  accuracy {dataset} {size}/class: skbert {ours:.3f} >= SetFit "
                    f"{theirs:.3f}: {verdict}{paired_points(mine, peer)}"
                )
                other = results.get((dataset, size, "SetFit-oversample"))
                if other:  # for information: SetFit with 1.2's own default sampling
                    print(
                        f"    (SetFit-oversample {np.mean([r['accuracy'] for r in other]):.3f}; "
                        f"skbert minus it, {paired_points(mine, other)[2:] or 'under 2 draws'})"
                    )
        for dataset in [*args.datasets, None]:  # per data set, then over all
            mine = [k for k in results if dataset is None or k[0] == dataset]
            elsewhere = sorted({r["cpu"] for k in mine for r in results[k]} - {cpu_model()})
            if elsewhere:
                print(
                    f"  training speed ({dataset or 'all'}): not judged, some fits ran on "
                    f"{', '.join(elsewhere)}"
                )
                continue
            ours = sum(r["seconds"] for k in mine if k[2] == "skbert" for r in results[k])
            theirs = sum(r["seconds"] for k in mine if k[2] == "SetFit" for r in results[k])
            ratio = theirs / ours
            verdict = "met" if ratio >= SPEED_BAR else "NOT met"
            print(
                f"  training speed ({dataset or 'all'}): SetFit {theirs:.0f} s / skbert "
                f"{ours:.0f} s = {ratio:.2f}x (bar {SPEED_BAR:g}x): {verdict}"
            )
    sizes = sorted(n for method, n in memory if method == "skbert")
    if len(sizes) >= 2:
        small, large = memory["skbert", sizes[0]], memory["skbert", sizes[-1]]
        ratio = large["peak_mb"] / small["peak_mb"]
        verdict = "met" if ratio <= MEMORY_BAR else "NOT met"
        print(
            f"  memory: skbert peak with {sizes[-1]} texts / with {sizes[0]} = {ratio:.2f} "
            f"(bar {MEMORY_BAR:g}): {verdict}"
        )


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    here = cpu_model()
    rows = read_rows(args.results)
    done = {key_of(r): r for r in rows if r.get("cpu") == here}
    print(f"{len(done)} fits of {here} in {args.results} are reused", flush=True)
    args.borrowed = {
        key_of(r): r
        for r in rows
        if r["method"] in args.accuracy_of_any_cpu
        and r["kind"] == "accuracy"
        and r.get("cpu") != here
        and key_of(r) not in done
    }
    if args.borrowed:
        print(f"{len(args.borrowed)} accuracy rows of other CPU models may be reused", flush=True)
    results = accuracy_runs(args, done)
    memory = memory_runs(args, done) if args.memory_sizes else {}
    report(args, results, memory)
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()

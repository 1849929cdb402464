"""The fits of tests/test_torchrun.py: run by each rank of ``torchrun``, and in one process.

``python tests/torchrun_fit.py MODEL_DIR OUT_DIR WATCHED_DIR`` fits a classifier (class
weights, early stopping, checkpoints), fine-tunes a sentence transformer, fits a regressor
(early stopping on R^2) and further pre-trains the masked LM, all on ``MODEL_DIR``; it writes
what it learned to ``OUT_DIR/result-RANK.pt``, the files it opened for writing under
``WATCHED_DIR`` (where the fits write) to ``OUT_DIR/writes-RANK.json``, and its stderr to
``OUT_DIR/stderr-RANK.txt``. With ``--other-data`` after them, each rank fits on other texts
and writes the error it got to ``OUT_DIR/error-RANK.txt``; with ``--failures``, each rank
writes to ``OUT_DIR/failures-RANK.json`` the outcome of fits that fail (:func:`fit_failures`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = "the a cat dog sat on mat is good bad movie film great terrible and not very it was".split()


def corpus(n: int = 40):
    """``n`` texts of in-vocabulary words and a label that depends on them."""
    import numpy as np

    rng = np.random.RandomState(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.randint(3, 12))) for _ in range(n)]
    labels = np.array(["pos" if "good" in t or "great" in t else "neg" for t in texts])
    return texts, labels


def fit_all(model: str, watched: Path) -> dict:
    """Every fit that trains with the shared loop; what each learned."""
    import numpy as np
    import torch
    from sklearn.base import clone

    from skbert import BertSentenceTransformer, BertTextClassifier, BertTextRegressor
    from skbert.pretraining import further_pretrain

    texts, labels = corpus()
    common = {"model": model, "device": "cpu", "random_state": 0, "verbose": 1}
    classifier = BertTextClassifier(
        **common,
        batch_size=6,  # 30 training rows: 5 batches of 6, split 3 + 3 over 2 ranks
        max_epochs=3,
        learning_rate=2e-3,
        dropout=0.0,
        class_weight="balanced",
        early_stopping=True,
        validation_fraction=0.25,
        checkpoint_dir=str(watched / "checkpoints"),
        checkpoint_steps=2,
    ).fit(texts, labels)
    first_fit = {"loss": classifier.loss_curve_, "scores": classifier.validation_scores_}
    # the same fit again resumes from rank 0's finished checkpoint, read by every rank
    resumed = clone(classifier).fit(texts, labels)
    first_fit["resumed_same"] = all(
        torch.equal(a, b)
        for a, b in zip(
            resumed.network_.state_dict().values(),
            classifier.network_.state_dict().values(),
            strict=True,
        )
    )
    # a second fit of the same network: the first fit's DDP hooks must be gone
    classifier.set_params(warm_start=True, max_epochs=1, early_stopping=False, checkpoint_dir=None)
    classifier.fit(texts, labels)
    pairs = np.array([[texts[i], texts[i + 1]] for i in range(0, len(texts) - 1)])
    scores = np.array([len(a) / (len(a) + len(b)) for a, b in pairs])
    sentence = BertSentenceTransformer(
        **common, fine_tune="full", batch_size=7, max_epochs=2, learning_rate=2e-3
    ).fit(pairs, scores)
    ratings = np.array([len(t) + 10.0 * ("good" in t or "great" in t) for t in texts])
    regressor = BertTextRegressor(  # R^2 on the held-out rows: scored by rank 0 alone
        **common,
        batch_size=6,  # 30 training rows: 5 batches of 6
        max_epochs=2,
        learning_rate=2e-3,
        dropout=0.0,
        early_stopping=True,
        validation_fraction=0.25,
        n_iter_no_change=2,
    ).fit(texts, ratings)
    path = further_pretrain(
        texts, watched / "pretrained", **common, max_steps=4, batch_size=5, learning_rate=2e-3
    )
    from transformers import AutoModelForMaskedLM

    pretrained = AutoModelForMaskedLM.from_pretrained(path)

    def weights(module):
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    return {
        "classifier_loss": first_fit["loss"],
        "classifier_scores": first_fit["scores"],
        "resumed_same": first_fit["resumed_same"],
        "warm_start_loss": classifier.loss_curve_,
        "classifier": weights(classifier.network_),
        "proba": classifier.predict_proba(texts[:8]),
        "sentence_loss": sentence.loss_curve_,
        "sentence": weights(sentence.network_),
        "vectors": sentence.transform(texts[:8]),
        "regressor_loss": regressor.loss_curve_,
        "regressor_scores": regressor.validation_scores_,
        "regressor": weights(regressor.network_),
        "ratings": regressor.predict(texts[:8]),
        "pretrained": weights(pretrained),
        "torch_threads": torch.get_num_threads(),
    }


def threads_left_after_leaving() -> list | None:
    """The process group's threads (gloo's) still running once skbert left the group, as it
    does at exit: none, unless something holds the group past destroy_process_group()."""
    import skbert._training.distributed as distributed

    distributed._leave()
    if not os.path.isdir("/proc/self/task"):  # Linux only; the tests read it only there
        return None
    names = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
            names.append(comm.read().strip())
    return sorted(name for name in names if "gloo" in name)


def fit_other_data(model: str, out: Path, rank: str) -> None:
    """Each rank fits on other texts (a user's mistake): the error each rank raised."""
    from skbert import BertTextClassifier

    texts, labels = corpus(40 - 12 * int(rank))
    try:
        BertTextClassifier(model=model, device="cpu", batch_size=6, max_epochs=1).fit(texts, labels)
        message = "no error"
    except RuntimeError as error:
        message = str(error)
    (out / f"error-{rank}.txt").write_text(message, encoding="utf-8")
    (out / f"threads-{rank}.json").write_text(json.dumps(threads_left_after_leaving()))


def fit_failures(model: str, out: Path, rank: str) -> None:
    """Each fit's error and seconds: the ranks' data differ (every rank raises, and the group
    stays: a fit after them trains), then a checkpoint write fails on rank 0 alone, caught as
    GridSearchCV catches it (the ranks leave the group at once: a later fit is refused)."""
    import time

    import numpy as np

    import skbert._training.checkpoint as checkpoint
    from skbert import BertTextClassifier

    texts, labels = corpus()
    common = {"model": model, "device": "cpu", "batch_size": 6, "max_epochs": 1}
    outcomes = {}

    def attempt(name, X, y, **params):
        start = time.monotonic()
        try:
            BertTextClassifier(**common, random_state=0, **params).fit(X, y)
            message = "no error"
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
        outcomes[name] = {"message": message, "seconds": time.monotonic() - start}

    order = np.random.RandomState(int(rank)).permutation(len(texts))  # as list(set(texts))
    attempt("shuffled", [texts[i] for i in order], labels[order])
    other = labels if rank == "0" else labels[::-1]  # the same texts, other labels
    attempt("labels", texts, other, checkpoint_dir=str(out / "labels"))
    attempt("after", texts, labels)
    save, saves = checkpoint.TrainingCheckpoint.save, []

    def full_disk(self, *args, **kwargs):
        saves.append(1)
        if rank == "0" and len(saves) == 2:
            raise OSError(28, "No space left on device")
        return save(self, *args, **kwargs)

    checkpoint.TrainingCheckpoint.save = full_disk
    attempt("failing", texts, labels, checkpoint_dir=str(out / "failing"), checkpoint_steps=2)
    attempt("refused", texts, labels)
    (out / f"failures-{rank}.json").write_text(json.dumps(outcomes), encoding="utf-8")
    (out / f"threads-{rank}.json").write_text(json.dumps(threads_left_after_leaving()))


def main(argv) -> None:
    import torch

    model, out, watched = argv[0], Path(argv[1]), Path(argv[2])
    rank = os.environ.get("RANK", "single")
    if argv[3:] == ["--other-data"]:
        fit_other_data(model, out, rank)
        return
    if argv[3:] == ["--failures"]:
        sys.stderr = open(out / f"stderr-{rank}.txt", "w", encoding="utf-8")  # noqa: SIM115
        fit_failures(model, out, rank)
        return
    writes = []

    def audit(event, args):  # every file this process opens for writing where the fits write
        if event == "open" and isinstance(args[0], (str, os.PathLike)):
            mode, flags = args[1], args[2]
            writing = (mode and any(c in str(mode) for c in "wax+")) or (flags & 0o3)
            if writing and str(watched) in os.path.abspath(args[0]):
                writes.append(os.fspath(args[0]))

    sys.addaudithook(audit)
    import skbert._core.launch as launch

    rows, share_of = [], launch.Share.of

    def counted(share, batch):  # the rows of each global batch that this process trained on
        part = share_of(share, batch)
        rows.append((len(batch), len(part)))
        return part

    launch.Share.of = counted
    sys.stderr = open(out / f"stderr-{rank}.txt", "w", encoding="utf-8")  # noqa: SIM115
    result = fit_all(model, watched)
    result["share"] = launch.current_share()
    result["rows"] = rows
    torch.save(result, out / f"result-{rank}.pt")
    (out / f"writes-{rank}.json").write_text(json.dumps(writes), encoding="utf-8")
    (out / f"threads-{rank}.json").write_text(json.dumps(threads_left_after_leaving()))


if __name__ == "__main__":
    main(sys.argv[1:])

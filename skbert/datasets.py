"""Loaders for the public data sets used in examples, benchmarks and tests.

Files are read from ``data_home``, else from the ``SKBERT_DATA`` environment variable, else
from ``~/skbert_data``. Each data set sits in its own folder there (``stsb/``, ...), laid out as
in its canonical release.
"""

from __future__ import annotations

import csv
import os
from importlib import resources
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from ._storage.fetch import fetch

__all__ = [
    "get_data_home",
    "load_stsb",
    "load_sst2",
    "load_imdb_sample",
    "load_trec",
    "load_snli",
    "load_demo_sentiment",
]

_STSB_FILES = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}


def get_data_home(data_home=None) -> Path:
    """Return the folder that the loaders read data sets from.

    Parameters
    ----------
    data_home : str or path-like, default=None
        The folder to use. None: the ``SKBERT_DATA`` environment variable, else
        ``~/skbert_data``.

    Returns
    -------
    pathlib.Path
        The folder, with ``~`` expanded. It need not exist.
    """
    if data_home is None:  # an empty SKBERT_DATA counts as unset, not as the current folder
        data_home = os.environ.get("SKBERT_DATA") or "~/skbert_data"
    elif not isinstance(data_home, (str, os.PathLike)) or os.fspath(data_home) == "":
        raise TypeError(
            f"data_home={data_home!r} is not a folder path; give a str, an os.PathLike or None "
            "(the SKBERT_DATA environment variable, else ~/skbert_data)."
        )
    try:
        return Path(data_home).expanduser()
    except RuntimeError as exc:  # no HOME, and a user id without a home (a container's)
        raise RuntimeError(
            f"data_home={os.fspath(data_home)!r} starts with ~, and this process has no home "
            f"folder ({exc}): pass data_home= a folder, or set the SKBERT_DATA environment "
            "variable to one."
        ) from exc


def _require(path: Path, name: str, source: str, download: bool = False) -> Path:
    """``path``, fetched first when missing and ``download``; else a clear error."""
    if not path.is_file() and download:
        fetch(path.parent.name, path.parent)
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}: {path} not found. Put the files of {source} in "
            f"{path.parent} (or point data_home / the SKBERT_DATA environment variable at the "
            f"folder that holds {path.parent.name}/), or pass download_if_missing=True to fetch "
            "them from their public source."
        )
    return path


def _loaded(data, target, return_X_y: bool, **extra):
    """What a loader returns: ``(data, target)``, or a Bunch of them and the ``extra`` fields."""
    if return_X_y:
        return data, target
    return Bunch(data=data, target=target, **extra)


def _check_split(split, allowed, **flags):
    """Refuse a split that is not in ``allowed``, and a flag that is not a bool."""
    if not isinstance(split, str) or split not in allowed:
        raise ValueError(f"split={split!r} is not allowed; use one of {sorted(allowed)}.")
    _check_flags(**flags)


def _check_flags(**flags):
    """Refuse a flag that is not a bool (a string such as "False" would read as true)."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name}={value!r} is not allowed; use True or False.")


def load_stsb(split="test", *, data_home=None, return_X_y=False, download_if_missing=False):
    """Load the STS Benchmark (Cer et al. 2017): sentence pairs with similarity scores 0-5.

    Parameters
    ----------
    split : {"train", "dev", "test"}, default="test"
        5,749 / 1,500 / 1,379 pairs.
    data_home : str or path-like, default=None
        Folder holding ``stsb/sts-{split}.csv``; see :func:`get_data_home`.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    download_if_missing : bool, default=False
        Fetch the files from the canonical public source into ``data_home`` when they are
        missing (needs network access).

    Returns
    -------
    bunch : :class:`~sklearn.utils.Bunch`
        When ``return_X_y`` is False, a dictionary-like object with the attributes:

        data : ndarray of shape (n_pairs, 2), dtype=object
            The sentence pairs.
        target : ndarray of shape (n_pairs,), dtype=float64
            The gold similarity scores, from 0 to 5.
        genre : ndarray of shape (n_pairs,), dtype=object
            The source of each pair: ``"main-captions"``, ``"main-forums"`` or
            ``"main-news"`` (the training file's ``"main-forum"`` is read as
            ``"main-forums"``, as the other splits spell it).
    (data, target) : tuple of ndarray
        When ``return_X_y`` is True: ``data`` and ``target`` as above.
    """
    _check_split(split, _STSB_FILES, return_X_y=return_X_y, download_if_missing=download_if_missing)
    path = _require(
        get_data_home(data_home) / "stsb" / _STSB_FILES[split],
        "load_stsb",
        "the STS Benchmark (Stsbenchmark.tar.gz, folder stsbenchmark/)",
        download_if_missing,
    )
    pairs, scores, genres = [], [], []
    with open(path, encoding="utf-8") as handle:
        # Some rows carry two extra columns (sources): take columns 4-6 only.
        for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            genres.append("main-forums" if row[0] == "main-forum" else row[0])
            scores.append(float(row[4]))
            pairs.append((row[5], row[6]))
    data = np.empty((len(pairs), 2), dtype=object)
    data[:] = pairs
    target = np.asarray(scores, dtype=np.float64)
    return _loaded(data, target, return_X_y, genre=np.asarray(genres, dtype=object))


def load_sst2(split="train", *, data_home=None, return_X_y=False, download_if_missing=False):
    """Load SST-2 binary sentiment (GLUE train / dev, labelled test; SentEval's copy).

    Parameters
    ----------
    split : {"train", "dev", "test"}, default="train"
        67,349 / 872 / 1,821 sentences.
    data_home : str or path-like, default=None
        Folder holding ``sst2-senteval/sentiment-{split}``; see :func:`get_data_home`.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    download_if_missing : bool, default=False
        Fetch the files from the canonical public source into ``data_home`` when they are
        missing (needs network access).

    Returns
    -------
    bunch : :class:`~sklearn.utils.Bunch`
        When ``return_X_y`` is False, a dictionary-like object with the attributes:

        data : ndarray of shape (n_sentences,), dtype=object
            The sentences, lower-cased and tokenised.
        target : ndarray of shape (n_sentences,), dtype=int64
            0 for negative, 1 for positive.
        target_names : ndarray of shape (2,)
            ``["negative", "positive"]``.
    (data, target) : tuple of ndarray
        When ``return_X_y`` is True: ``data`` and ``target`` as above.
    """
    _check_split(
        split,
        {"train", "dev", "test"},
        return_X_y=return_X_y,
        download_if_missing=download_if_missing,
    )
    path = _require(
        get_data_home(data_home) / "sst2-senteval" / f"sentiment-{split}",
        "load_sst2",
        "SentEval's SST-2 (data/downstream/SST/binary)",
        download_if_missing,
    )
    sentences, labels = [], []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            sentence, _, label = line.rstrip("\n").rpartition("\t")
            sentences.append(sentence.strip())
            labels.append(int(label))
    data = np.asarray(sentences, dtype=object)
    target = np.asarray(labels, dtype=np.int64)
    return _loaded(data, target, return_X_y, target_names=np.asarray(["negative", "positive"]))


def load_imdb_sample(
    split="train", *, data_home=None, return_X_y=False, clean_html=True, download_if_missing=False
):
    """Load the 1,000-review IMDb sample (Maas et al. 2011): long movie reviews, 2 classes.

    Parameters
    ----------
    split : {"train", "valid"}, default="train"
        800 / 200 reviews (the ``is_valid`` column).
    data_home : str or path-like, default=None
        Folder holding ``imdb-sample/texts.csv``; see :func:`get_data_home`.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    clean_html : bool, default=True
        Replace the ``<br />`` tags of the reviews with spaces and collapse each run of
        white space into one space.
    download_if_missing : bool, default=False
        Fetch the files from the canonical public source into ``data_home`` when they are
        missing (needs network access).

    Returns
    -------
    bunch : :class:`~sklearn.utils.Bunch`
        When ``return_X_y`` is False, a dictionary-like object with the attributes:

        data : ndarray of shape (n_reviews,), dtype=object
            The reviews.
        target : ndarray of shape (n_reviews,), dtype=object
            ``"negative"`` or ``"positive"``.
    (data, target) : tuple of ndarray
        When ``return_X_y`` is True: ``data`` and ``target`` as above.
    """
    _check_split(
        split,
        {"train", "valid"},
        return_X_y=return_X_y,
        clean_html=clean_html,
        download_if_missing=download_if_missing,
    )
    path = _require(
        get_data_home(data_home) / "imdb-sample" / "texts.csv",
        "load_imdb_sample",
        "the IMDb sample (texts.csv: label,text,is_valid)",
        download_if_missing,
    )
    want = "True" if split == "valid" else "False"
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["is_valid"] != want:
                continue
            text = row["text"]
            if clean_html:
                text = " ".join(text.replace("<br />", " ").split())
            texts.append(text)
            labels.append(row["label"])
    data = np.asarray(texts, dtype=object)
    target = np.asarray(labels, dtype=object)
    return _loaded(data, target, return_X_y)


def load_trec(
    split="train", *, data_home=None, return_X_y=False, fine=False, download_if_missing=False
):
    """Load TREC question classification (Li & Roth 2002).

    Parameters
    ----------
    split : {"train", "test"}, default="train"
        5,452 / 500 questions (``train_5500.label`` / ``TREC_10.label``).
    data_home : str or path-like, default=None
        Folder holding ``trec/``; see :func:`get_data_home`.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    fine : bool, default=False
        Use the 50 fine classes (``"NUM:dist"``) instead of the 6 coarse ones (``"NUM"``).
    download_if_missing : bool, default=False
        Fetch the files from the canonical public source into ``data_home`` when they are
        missing (needs network access).

    Returns
    -------
    bunch : :class:`~sklearn.utils.Bunch`
        When ``return_X_y`` is False, a dictionary-like object with the attributes:

        data : ndarray of shape (n_questions,), dtype=object
            The questions.
        target : ndarray of shape (n_questions,), dtype=object
            The class names (``"NUM"``, or ``"NUM:dist"`` with ``fine=True``).
    (data, target) : tuple of ndarray
        When ``return_X_y`` is True: ``data`` and ``target`` as above.
    """
    _check_split(
        split,
        {"train", "test"},
        return_X_y=return_X_y,
        fine=fine,
        download_if_missing=download_if_missing,
    )
    name = "train_5500.label" if split == "train" else "TREC_10.label"
    path = _require(
        get_data_home(data_home) / "trec" / name,
        "load_trec",
        "TREC (Li & Roth)",
        download_if_missing,
    )
    questions, labels = [], []
    with open(path, encoding="latin-1") as handle:
        for line in handle:
            label, _, question = line.strip().partition(" ")
            questions.append(question)
            labels.append(label if fine else label.split(":", 1)[0])
    data = np.asarray(questions, dtype=object)
    target = np.asarray(labels, dtype=object)
    return _loaded(data, target, return_X_y)


def load_snli(split="dev", *, data_home=None, return_X_y=False, download_if_missing=False):
    """Load SNLI 1.0 (Bowman et al. 2015) as sentence pairs with entailment labels.

    SentEval's copy, without the pairs that had no gold label; only ``dev`` and ``test`` are
    in the shared data (train NLI models on ``dev``).

    Parameters
    ----------
    split : {"train", "dev", "test"}, default="dev"
        The part of SNLI to read: dev 9,842 pairs, test 9,824; train (about 550,000) is not
        in the shared data, only where ``download_if_missing`` fetched it.
    data_home : str or path-like, default=None
        Folder holding ``snli-senteval/s1.{split}``, ``s2.{split}``, ``labels.{split}``; see
        :func:`get_data_home`.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    download_if_missing : bool, default=False
        Fetch the files from the canonical public source into ``data_home`` when they are
        missing (needs network access).

    Returns
    -------
    bunch : :class:`~sklearn.utils.Bunch`
        When ``return_X_y`` is False, a dictionary-like object with the attributes:

        data : ndarray of shape (n_pairs, 2), dtype=object
            The (premise, hypothesis) pairs.
        target : ndarray of shape (n_pairs,), dtype=object
            ``"entailment"``, ``"neutral"`` or ``"contradiction"``.
    (data, target) : tuple of ndarray
        When ``return_X_y`` is True: ``data`` and ``target`` as above.
    """
    _check_split(
        split,
        {"train", "dev", "test"},
        return_X_y=return_X_y,
        download_if_missing=download_if_missing,
    )
    folder = get_data_home(data_home) / "snli-senteval"
    source = (
        "SentEval's SNLI (data/downstream/SNLI; the download converts Stanford's snli_1.0.zip "
        "to that layout, train included)"
    )
    columns = []
    for stem in ("s1", "s2", "labels"):
        path = _require(folder / f"{stem}.{split}", "load_snli", source, download_if_missing)
        with open(path, encoding="utf-8") as handle:
            columns.append([line.rstrip("\n").strip() for line in handle])
    if len({len(c) for c in columns}) != 1:
        raise ValueError(f"load_snli: s1/s2/labels.{split} in {folder} differ in length.")
    data = np.empty((len(columns[0]), 2), dtype=object)
    data[:, 0], data[:, 1] = columns[0], columns[1]
    target = np.asarray(columns[2], dtype=object)
    return _loaded(data, target, return_X_y)


def load_demo_sentiment(*, return_X_y=False):
    """Load the small sentiment sample bundled with skbert (for the demo and quick tests).

    400 sentences of the SST-2 training set (GLUE; Socher et al. 2013), 200 positive and 200
    negative, drawn at random; see ``skbert/data/README.md`` for source and terms.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    bunch : :class:`~sklearn.utils.Bunch`
        When ``return_X_y`` is False, a dictionary-like object with the attributes:

        data : ndarray of shape (400,), dtype=object
            The sentences.
        target : ndarray of shape (400,), dtype=int64
            0 for negative, 1 for positive.
        target_names : ndarray of shape (2,)
            ``["negative", "positive"]``.
    (data, target) : tuple of ndarray
        When ``return_X_y`` is True: ``data`` and ``target`` as above.
    """
    _check_flags(return_X_y=return_X_y)
    text = resources.files("skbert").joinpath("data/sst2_sample.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines()[1:] if line]
    data = np.asarray([sentence for sentence, _ in rows], dtype=object)
    target = np.asarray([int(label) for _, label in rows], dtype=np.int64)
    return _loaded(data, target, return_X_y, target_names=np.asarray(["negative", "positive"]))

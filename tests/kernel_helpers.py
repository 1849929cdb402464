"""Fixture helpers of the tests of the compiled C kernels (skbert._inference.cpu.native)."""

from __future__ import annotations

import pytest


def compiled_or_skip(load, instead: str):
    """The library ``load()`` builds and loads (its cached answer forgotten first), or the test
    skipped where this machine cannot compile it (``instead``: what runs then)."""
    load.cache_clear()
    library = load()
    if library is None:
        pytest.skip(f"no C compiler here: {instead}")
    return library


def read_anew(load, monkeypatch):
    """A fixture body: ``load()`` reads its environment variable anew during the test (its
    cached answer forgotten before and after); yields ``monkeypatch``."""
    load.cache_clear()
    yield monkeypatch
    load.cache_clear()

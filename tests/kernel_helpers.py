"""Fixtures of the tests of the compiled C kernels (skbert._inference.cpu.native)."""

from __future__ import annotations

import pytest


def kernel_fixtures(load, instead: str):
    """Two fixtures for the library ``load()`` builds and loads (``native.int8_kernels`` or
    ``native.attention_kernel``): the library, its cached answer forgotten first, or the test
    skipped where this machine cannot compile it (``instead``: what runs then); and one that
    makes ``load()`` read its environment variable anew during the test (forgotten before and
    after), yielding ``monkeypatch``."""

    @pytest.fixture
    def library():
        load.cache_clear()
        loaded = load()
        if loaded is None:
            pytest.skip(f"no C compiler here: {instead}")
        return loaded

    @pytest.fixture
    def fresh_choice(monkeypatch):
        load.cache_clear()
        yield monkeypatch
        load.cache_clear()

    return library, fresh_choice

"""A reentrant lock of the process that a forked child starts with free.

A thread of the parent that held a lock does not exist in a child made by ``fork``, so the
child's copy of the lock would stay held for ever, and the child's first caller would wait
for ever (a Dask or multiprocessing worker forked while another thread fitted).
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["ForkSafeLock"]


class ForkSafeLock:
    """A reentrant lock (``threading.RLock``) that is made anew in a forked child."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._lock = threading.RLock()

    @contextlib.contextmanager
    def held(self):
        """Hold the lock for the block (a thread may take it again inside it)."""
        with self._lock:  # the lock taken is the one released, even if a fork renewed it
            yield

"""torch's thread count, set for a while by callers that may run at the same time.

``torch.set_num_threads`` sets the calling thread's count and also the process's setting,
which a thread takes at its first torch call (wiping any count it set before). Prediction on
the CPU sets one thread in each of its worker threads (and in the caller), so while one
prediction runs, a thread that starts using torch begins with one; and two predictions in
threads of one process, each restoring the count it found, could leave the process at one
thread for good (every later thread, a web server's worker say, then predicted on one core).
:func:`torch_threads` is the one place the count is set and put back: each caller gets its
own thread's count back, and the process's setting before the first of the callers that
overlap is restored when the last of them leaves.

(A thread that started using torch while another held the count at one keeps one for its
own work outside skbert, and skbert gives it one core: torch has no way to set the count of
new threads alone.)
"""

from __future__ import annotations

import contextlib
import os
import threading

import torch

__all__ = ["process_threads", "torch_threads"]

_LOCK = threading.Lock()
_inside = 0  # callers inside torch_threads now
_before = 1  # the process's count before the first of them came in
_exits = 0  # callers that have left, ever
_local = threading.local()  # .depth: torch_threads entered and not left in this thread


def process_threads() -> int:
    """The count torch gives a thread started now: the process's setting (a thread's own
    count may differ, when it started while another thread had set a different one)."""
    found = []
    probe = threading.Thread(target=lambda: found.append(torch.get_num_threads()))
    probe.start()
    probe.join()
    return found[0]


@contextlib.contextmanager
def torch_threads(threads: int | None):
    """While the block runs, this thread's torch count is ``threads`` (None: as it is).

    Yields the count this caller may use: within an enclosing ``torch_threads`` of the same
    thread, the count that one set; else the process's setting before the first of the
    callers now inside came in (``torch.set_num_threads`` sets it; a per-thread limit such
    as ``threadpoolctl.threadpool_limits`` gives is not read, as it cannot be told from the
    one a thread takes when it starts while another holds the count at one). On leaving, this
    thread's own count is put back, and the last caller to leave puts back the process's
    setting (from a thread of its own, so that the caller's count stays its own).

    Parameters
    ----------
    threads : int or None
        The count while the block runs.
    """
    global _inside, _before, _exits
    own = torch.get_num_threads()  # first: a thread's first call takes the process's count
    depth = getattr(_local, "depth", 0)
    while True:
        exits = _exits
        # outside the lock (a fork while it is held would hang the child); read again if a
        # caller left meanwhile: the probe may have seen its one thread
        probe = process_threads() if _inside == 0 else None
        with _LOCK:
            if _inside == 0 and (probe is None or _exits != exits):
                continue
            if _inside == 0:
                _before = probe
            _inside += 1
            # the enclosing call's count (skbert.dask's threads=); else the process's, which a
            # thread started while another held it at one would not have
            usable = own if depth else _before
            break
    _local.depth = depth + 1
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        yield usable
    finally:
        _local.depth = depth
        torch.set_num_threads(own)  # this thread's; it sets the process's setting too
        with _LOCK:
            _inside -= 1
            _exits += 1
            if _inside == 0 and own != _before:  # else set_num_threads(own) just set it
                _set_process_threads(_before)


def _set_process_threads(count: int) -> None:
    """Set the process's setting to ``count`` from a thread of its own (which
    ``torch.set_num_threads`` sets too), leaving the calling thread's count as it is."""
    setter = threading.Thread(target=torch.set_num_threads, args=(count,))
    setter.start()
    setter.join()


def _after_fork_in_child() -> None:
    global _LOCK, _inside
    _LOCK = threading.Lock()  # a fork while another thread held it: the child's is free
    _inside = 0  # the callers inside were threads of the parent


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

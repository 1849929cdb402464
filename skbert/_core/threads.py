"""torch's thread count, set for a while by callers that may run at the same time.

``torch.set_num_threads`` sets the calling thread's count and also the count every thread
started afterwards begins with. Prediction on the CPU sets one thread in each of its worker
threads (and in the caller), so while one prediction runs, a thread started elsewhere begins
with one thread; and two predictions in threads of one process, each restoring the count it
found, could leave the process at one thread for good (every later thread, a web server's
worker say, then predicted on one core). :func:`torch_threads` is the one place the count
is set and put back: the count the process had before the first of the callers that
overlap is restored when the last of them leaves.

(A thread that started while another held the count at one keeps one for its own work
outside skbert; torch has no way to set the count of new threads alone.)
"""

from __future__ import annotations

import contextlib
import threading

import torch

__all__ = ["process_threads", "torch_threads"]

_LOCK = threading.Lock()
_inside = 0  # callers inside torch_threads now
_before = 1  # the process's count before the first of them came in
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
    callers now inside came in (read afresh, so that a thread started while another held the
    count at one gets the process's, not one). On leaving, this thread's count is put back
    to the yielded count, and the last caller to leave puts back the process's setting.

    Parameters
    ----------
    threads : int or None
        The count while the block runs.
    """
    global _inside, _before
    depth = getattr(_local, "depth", 0)
    with _LOCK:
        if _inside == 0:
            _before = process_threads()
        _inside += 1
        own = torch.get_num_threads() if depth else _before
    _local.depth = depth + 1
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield own
    finally:
        _local.depth = depth
        with _LOCK:
            _inside -= 1
            torch.set_num_threads(_before if _inside == 0 else own)

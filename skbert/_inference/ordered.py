"""Work items computed by a pool of threads and yielded in order, with a bounded lead.

Used by both prediction runners: the CPU's (:mod:`skbert._inference.cpu.runner`, one worker
per core) and the accelerator's (:mod:`skbert._inference.accelerator`, one host thread
preparing the next blocks).
"""

from __future__ import annotations

import collections
import concurrent.futures

__all__ = ["in_order"]


def in_order(function, items, workers: int, name: str):
    """Yield ``(item, function(item))`` in order, computed by ``workers`` threads.

    At most twice as many items as there are workers are in flight, so finished results do
    not pile up when the consumer is slower; closed early (wrap it in
    :func:`contextlib.closing`), it cancels the items not yet started and awaits the running
    ones.
    """
    ahead = 2 * workers
    pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        pending = collections.deque()
        for item in items:
            pending.append((item, pool.submit(function, item)))
            if len(pending) > ahead:
                done, future = pending.popleft()
                yield done, future.result()
        while pending:
            done, future = pending.popleft()
            yield done, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

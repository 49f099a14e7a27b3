"""The local executor: a spawn-context process pool, one cell in flight per worker.

A worker that dies breaks the whole pool and every cell in flight with it; those cells are
retried once, each in its own one-process pool, so a second death is attributed exactly.
Workers die with the driver (prctl's parent-death signal and a parent-pid watchdog).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from simconform.campaign.cell import Outcome, crashed, timed_cell
from simconform.campaign.plan import Cell
from simconform.lifeline import die_with_parent


class LocalExecutor:
    """A spawn-context process pool with one cell in flight per worker (see the package doc)."""

    name = "local"

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs

    def open(self) -> None:
        """Nothing to connect to: workers start with the first cell."""

    def close(self) -> None:
        """Pools are shut down by execute() itself."""

    def execute(self, cells: list[Cell], token: str | None = None) -> Iterator[Outcome]:
        ctx = mp.get_context("spawn")
        todo, suspects = deque(cells), deque()
        attempts: Counter[str] = Counter()
        pool: ProcessPoolExecutor | None = None
        # future -> (cell, its own one-process pool for a retry, or None for the shared pool)
        inflight: dict[Future, tuple[Cell, ProcessPoolExecutor | None]] = {}
        try:
            while todo or suspects or inflight:
                while len(inflight) < self.jobs and (todo or suspects):
                    if suspects:
                        cell, own = suspects.popleft(), _pool(1, ctx)
                        inflight[own.submit(timed_cell, cell)] = (cell, own)
                    else:
                        cell = todo.popleft()
                        if pool is None:
                            pool = _started_pool(min(self.jobs, len(todo) + 1), ctx)
                        inflight[pool.submit(timed_cell, cell)] = (cell, None)
                    attempts[cell.id] += 1
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                broken = False
                for fut in done:
                    cell, own = inflight.pop(fut)
                    res = self._result(fut, cell, own)
                    if res is None:  # the shared pool died: retry in isolation
                        broken = True
                        suspects.append(cell)
                        continue
                    yield cell, res, attempts[cell.id]
                if broken and pool is not None:
                    rest = [f for f, (_, own) in inflight.items() if own is None]
                    wait(rest)  # a broken pool fails all of them promptly
                    for fut in rest:
                        cell, _ = inflight.pop(fut)
                        res = self._result(fut, cell, None)
                        if res is None:
                            suspects.append(cell)
                        else:
                            yield cell, res, attempts[cell.id]
                    pool.shutdown(wait=True)
                    pool = None
        finally:
            for _, own in inflight.values():
                if own is not None:
                    own.shutdown(wait=False, cancel_futures=True)
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _result(fut: Future, cell: Cell, own: ProcessPoolExecutor | None) -> dict | None:
        try:
            return fut.result()
        except BrokenProcessPool:
            if own is None:
                return None
            return crashed("the worker process died twice (retried once in its own process)")
        except Exception as exc:  # pickling trouble and the like: not the cell's crash
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        finally:
            if own is not None:
                own.shutdown(wait=False)


def _pool(size: int, ctx) -> ProcessPoolExecutor:
    """Workers that die with the driver (simconform.lifeline): a driver killed with SIGKILL
    leaves no cell running."""
    return ProcessPoolExecutor(
        size, mp_context=ctx, initializer=die_with_parent, initargs=(os.getpid(),)
    )


def _started_pool(size: int, ctx) -> ProcessPoolExecutor:
    """A pool whose `size` workers all run before any cell is submitted.

    A spawn-context pool starts workers on demand, and CPython (3.11-3.13) watches only the
    workers that existed when its manager thread last began to wait: the death of one started
    later goes unnoticed until some other result arrives, or forever if none does. Starting
    them all up front closes that gap.
    """
    pool = _pool(size, ctx)
    try:
        for fut in [pool.submit(os.getpid) for _ in range(size)]:
            fut.result()
    except BrokenProcessPool:
        pool.shutdown(wait=True)
        raise RuntimeError(
            "campaign worker processes die at start-up; a script that calls run_campaign "
            "must guard its top level with `if __name__ == '__main__':`"
        ) from None
    return pool

"""Draw a report's figures on two cores: the last serial step of a verification.

The figures are drawn after every sample is judged, so the second core is idle while one
process lays out text in matplotlib (the 200 s demo: eight figures, about 3.4 s on the
2026-12-05 host). Where the process can fork and may use two CPUs, a forked child draws
about half of them (largest first, each to the lighter side) while this process draws the
rest. A process with other threads (a Ray worker, a campaign's pool worker) draws them
alone. A fork, not a pool: the child starts with the report, the samples and matplotlib
already in memory, in milliseconds. Each figure is a file written by one process alone,
byte-identical to the serial drawing (`tests/test_report.py`). Where the child fails for any
reason, this process draws its share itself, so an error is raised here with its traceback.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from simconform.lifeline import die_with_parent, usable_cpus

Figure = tuple[Callable[..., Path | None], tuple, float]  # function, its arguments, its weight


def draw(figures: list[Figure], fork: bool | None = None) -> list[Path | None]:
    """Each figure's function called with its arguments, results in order. `fork`: None to
    fork where two CPUs are usable and this process runs no other thread, False to draw here,
    True to fork wherever possible. Another thread (a Ray worker's, a pool worker's watchdog)
    may hold a lock at the fork that the child would then wait for forever."""
    if fork is None:
        fork = len(figures) > 1 and usable_cpus() >= 2 and threading.active_count() == 1

    def made(i: int) -> Path | None:
        f, args, _w = figures[i]
        return f(*args)

    if not fork or not hasattr(os, "fork"):
        return [made(i) for i in range(len(figures))]
    mine, theirs = _split([w for _f, _a, w in figures])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: draw its share, send the results, leave without cleanup
        code = 1
        try:
            os.close(read)
            die_with_parent()
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
            out = pickle.dumps([made(i) for i in theirs])
            with os.fdopen(write, "wb") as fh:
                fh.write(out)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as fh:
            results = {i: made(i) for i in mine}
            data = fh.read()
        _pid, status = os.waitpid(pid, 0)
        pid = 0
        got = pickle.loads(data) if os.waitstatus_to_exitcode(status) == 0 and data else None
    finally:
        if pid:  # an error or Ctrl-C here: the child goes too
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    if got is None or len(got) != len(theirs):  # the child failed: draw its share here
        got = [made(i) for i in theirs]
    results.update(zip(theirs, got))
    return [results[i] for i in range(len(figures))]


def _split(weights: list[float]) -> tuple[list[int], list[int]]:
    """Indices for this process and for the child: largest first, each to the lighter side."""
    sides: tuple[list[int], list[int]] = ([], [])
    load = [0.0, 0.0]
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        side = 0 if load[0] <= load[1] else 1
        sides[side].append(i)
        load[side] += weights[i]
    return sorted(sides[0]), sorted(sides[1])

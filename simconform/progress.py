"""Progress: a bar on a terminal, a plain line every 10 % elsewhere (CI logs, pipes), so a
long run never sits silent for minutes; `--no-progress` turns both off."""

from __future__ import annotations

import os
import sys
import time
from typing import Protocol


class Progress(Protocol):
    def update(self, done: int) -> None: ...
    def close(self) -> None: ...


class Bar:
    def __init__(self, total: int, what: str) -> None:
        from rich.progress import BarColumn, Progress, TimeRemainingColumn

        self.p = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            "{task.percentage:>3.0f}%",
            TimeRemainingColumn(),
            transient=True,
        )
        self.p.start()
        self.task = self.p.add_task(what, total=total)

    def update(self, done: int) -> None:
        self.p.update(self.task, completed=done)

    def close(self) -> None:
        self.p.stop()


class Lines:
    """One line on stderr each time another 10 % is done, at most one per `every_s` seconds
    (default 5, or SIMCONFORM_PROGRESS_INTERVAL_S): a log is read later, and a line per tick
    would bury it. The 100 % line, which the caller gives when its work is done, is written
    whatever the interval: a log then says the step finished and in how long."""

    def __init__(self, total: int, what: str, every_s: float | None = None, stream=None) -> None:
        if every_s is None:
            every_s = float(os.environ.get("SIMCONFORM_PROGRESS_INTERVAL_S", "5"))
        self.total, self.what, self.every_s = max(total, 1), what, every_s
        self.stream = stream or sys.stderr
        self.t0 = self.last = time.monotonic()
        self.step = 0  # tenths reported so far
        # the rate is taken from the first count on: a slow start (the numba kernels compiling
        # on a fresh machine, minutes) would otherwise inflate every estimate after it
        self.first: tuple[float, int] | None = None

    def update(self, done: int) -> None:
        tenth = min(10, done * 10 // self.total)
        now = time.monotonic()
        if self.first is None and done > 0:
            self.first = (now, done)
        if tenth <= self.step or (now - self.last < self.every_s and done < self.total):
            return
        self.step, self.last = tenth, now
        elapsed = now - self.t0
        t1, d1 = self.first or (self.t0, 0)
        span, counted = (now - t1, done - d1) if done > d1 else (elapsed, done)
        left = span * (self.total - done) / max(counted, 1)
        when = (
            f"done in {elapsed:.0f} s"
            if done >= self.total
            else f"{elapsed:.0f} s elapsed, about {left:.0f} s left"
        )
        self.stream.write(f"simconform: {self.what} {100 * done // self.total:3d} % ({when})\n")
        self.stream.flush()

    def close(self) -> None:
        pass


def progress_bar(
    total: int, enabled: bool | Progress | None, what: str = "capturing"
) -> Progress | None:
    """A bar on a terminal, lines elsewhere (enabled None); a bar (True); nothing (False); or
    the caller's own Progress (a worker counting for its parent: verify/parallel.py)."""
    if enabled is False:
        return None
    if not isinstance(enabled, bool | None):
        return enabled
    if enabled or sys.stderr.isatty():
        return Bar(total, what)
    return Lines(total, what)


def step(what: str, enabled: bool | None) -> None:
    """One line on stderr as a long command enters its next phase (compare's published errors,
    its plots), where a bar has no count to show; silent when progress is off."""
    if enabled is False:
        return
    sys.stderr.write(f"simconform: {what}\n")
    sys.stderr.flush()

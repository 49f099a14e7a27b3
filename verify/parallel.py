"""Judge a run's camera frames and its other sensors in two worker processes.

A camera dominates verification: each frame's JPEG is decoded and compared with its truth
image (the 200 s demo: 3.1 CPU-s of its 6.1 s, 2026-12-07). On a machine with two or more
CPUs, a run holding more than budget.OFFLOAD_BYTES of camera truth has its cameras judged by
one worker process and its other sensors by another, each reading the bag itself (each reader
decompresses the bag: the price of not shipping images between processes), while this
process, which writes the report, imports the figures' libraries and shows the readers'
progress. The readers use the compiled kernels (verify/sums.py); this process then never
loads numba and LLVM, 34 MB of memory and 65-100 MB of the library's pages
(docs/verification.md#three-processes-for-a-camera-run). The report is the one a single
reader gives (`tests/test_verify_parallel.py`). Where the two readings of the bag's integrity
differ (damage found in one pass only, say), or a reader dies, everything is read again in
this process. `--jobs` bounds the readers as it bounds a run's capture workers
(budget.verify_readers): with 1 one worker reads every sensor, with 0 this process does.
Short runs stay in one process: the workers' start (their fork server's
imports) would cost more than it saves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from simconform.budget import offloaded, verify_readers
from simconform.lifeline import VERIFY_PRELOAD, become_worker, end_pool, worker_context
from simconform.progress import progress_bar
from simconform.spec import Spec
from simconform.verify.reading import read_run
from simconform.world import Origin

_counts = None  # in a reader: the shared array its progress is counted into


def offload(spec: Spec, manifest: dict) -> tuple[str, ...]:
    """The cameras to judge in a worker process; () to judge everything here."""
    return offloaded(spec, manifest.get("captures") or {})


def read_parallel(
    run_dir: Path,
    manifest: dict,
    spec: Spec,
    origin: Origin,
    level: float,
    progress,
    while_waiting: Callable[[], object] | None = None,
    jobs: int | None = None,
) -> tuple:
    """As verify.reading.read_run over every sensor, with `offload`'s cameras in one worker
    and the other sensors in another, or (`jobs` 1) every sensor in one worker; `jobs` as in
    budget.verify_readers. `while_waiting`: called here while they read (verify imports
    matplotlib for the figures then)."""
    captures = manifest.get("captures") or {}
    readers = verify_readers(spec, captures, jobs)
    if not readers:
        return read_run(run_dir, manifest, spec, origin, level, progress)
    cams = offload(spec, manifest) if readers == 2 else ()
    rest = tuple(n for n in spec.sensors if n not in cams)
    ctx = worker_context(VERIFY_PRELOAD)
    counts = ctx.RawArray("q", 2)  # each reader's samples so far, for this process's bar
    pool = ProcessPoolExecutor(
        max_workers=readers,
        mp_context=ctx,
        initializer=_become_reader,
        initargs=(os.getpid(), counts),
    )
    ok = False
    try:
        # the first reader checks the run's files; the camera reader leaves them to it
        parts = [pool.submit(_part, run_dir, manifest, spec, origin, level, rest, 0, True)]
        if cams:
            parts.append(pool.submit(_part, run_dir, manifest, spec, origin, level, cams, 1, False))
        if while_waiting is not None:
            while_waiting()
        _follow(progress, sum(captures.values()) or 1, counts, parts)
        try:
            results = [f.result() for f in parts]
        except BrokenProcessPool:  # a reader died (killed, out of memory): one reader
            results = None
        ok = True
    finally:
        end_pool(pool, kill=not ok)  # Ctrl-C or an error here: the readers go too
    if results is None:
        return read_run(run_dir, manifest, spec, origin, level, progress)
    if not cams:
        return results[0]
    (found, accs, summary), (found2, accs2, summary2) = results
    found2.files, found2.outputs_recorded = found.files, found.outputs_recorded  # left to the first
    if found2.as_dict() != found.as_dict():
        return read_run(run_dir, manifest, spec, origin, level, progress)  # one reader decides
    accs = {n: (accs | accs2)[n] for n in spec.sensors}  # the spec's order, as one reader's
    for acc in accs.values():
        acc.gaps = found.gaps
    summary.messages += summary2.messages
    summary.excluded = {n: (summary.excluded | summary2.excluded)[n] for n in spec.sensors}
    summary.truncated = summary.truncated or summary2.truncated
    ends = [e for e in (summary.readable_until_ns, summary2.readable_until_ns) if e is not None]
    summary.readable_until_ns = max(ends) if ends else None
    return found, accs, summary


def _follow(progress, total: int, counts, futures) -> None:
    """This process's bar (or lines) over the readers' counts until all are done, or one
    fails."""
    bar = progress_bar(total, progress, "verifying")
    if bar is None:
        wait(futures, return_when=FIRST_EXCEPTION)
        return
    try:
        while wait(futures, timeout=0.25, return_when=FIRST_EXCEPTION).not_done:
            bar.update(min(sum(counts), total))
        bar.update(min(sum(counts), total))
    finally:
        bar.close()


class _Tally:
    """A reader's progress (verify/reading.py updates it), counted into its slot of the shared
    array for the bar of the process that started it."""

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def update(self, done: int) -> None:
        _counts[self.slot] = done

    def close(self) -> None:
        pass


def _become_reader(owner: int, counts) -> None:
    global _counts
    become_worker(owner)
    _counts = counts


def _part(run_dir: Path, manifest: dict, spec: Spec, origin: Origin, level: float,
          sensors: tuple[str, ...], slot: int, files: bool):  # fmt: skip
    """A reader's share: read_run over `sensors`, its progress counted in `slot`. `files`:
    whether it also checks the run's files against run.json (the camera reader does not: 0.6
    s of its time on the demo); what the files' findings change in the bag's (its notes and
    gaps) then differs between the readers, so a changed file sends the run to one reader."""
    found, accs, summary = read_run(
        run_dir, manifest, spec, origin, level, _Tally(slot), sensors, files
    )
    for acc in accs.values():  # their streams ended here, where the compiled kernels are
        acc.finish()  # loaded: judging them then needs none (verify/sums.py)
    return found, accs, summary

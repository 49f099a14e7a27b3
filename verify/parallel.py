"""Judge a run's camera frames in a second process while this one judges the other sensors.

A camera dominates verification: each frame's JPEG is decoded and compared with its truth
image (the 200 s demo: about 5 of its 15 s of reading). On a machine with two or more CPUs, a
run holding more than budget.OFFLOAD_BYTES of camera truth has its cameras judged by a worker
process that reads the bag itself (each reader decompresses the bag: the price of not
shipping images between processes) while this process judges the rest; the report is the one
a single reader gives (`tests/test_verify_parallel.py`). Where the two readings of the bag's
integrity differ (damage found in one pass only, say) everything is read again in one process.
Short runs stay in one process: a worker's start (imports, about 2 s) would cost more than it
saves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from simconform.budget import offloaded
from simconform.lifeline import VERIFY_PRELOAD, become_worker, end_pool, worker_context
from simconform.spec import Spec
from simconform.verify.reading import read_run
from simconform.world import Origin


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
) -> tuple:
    """As verify.reading.read_run over every sensor, with `offload`'s cameras in a worker.
    `while_waiting`: called here once this process has read its share, if the worker is still
    reading (verify imports matplotlib for the figures then: 0.4-0.8 s off the end)."""
    cams = offload(spec, manifest)
    if not cams:
        return read_run(run_dir, manifest, spec, origin, level, progress)
    rest = tuple(n for n in spec.sensors if n not in cams)
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=worker_context(VERIFY_PRELOAD),
        initializer=become_worker,
        initargs=(os.getpid(),),
    )
    ok = False
    try:
        part = pool.submit(_part, run_dir, manifest, spec, origin, level, cams)
        found, accs, summary = read_run(run_dir, manifest, spec, origin, level, progress, rest)
        if while_waiting is not None and not part.done():
            while_waiting()
        try:
            found2, accs2, summary2 = part.result()
        except BrokenProcessPool:  # the worker died (killed, out of memory): one reader
            found2 = None
        ok = True
    finally:
        end_pool(pool, kill=not ok)  # Ctrl-C or an error here: the worker goes too
    if found2 is not None:  # the worker left the files to this process
        found2.files, found2.outputs_recorded = found.files, found.outputs_recorded
    if found2 is None or found2.as_dict() != found.as_dict():  # one reader decides
        return read_run(run_dir, manifest, spec, origin, level, progress)
    accs = {n: (accs | accs2)[n] for n in spec.sensors}  # the spec's order, as one reader's
    for acc in accs.values():
        acc.gaps = found.gaps
    summary.messages += summary2.messages
    summary.excluded = {n: (summary.excluded | summary2.excluded)[n] for n in spec.sensors}
    summary.truncated = summary.truncated or summary2.truncated
    ends = [e for e in (summary.readable_until_ns, summary2.readable_until_ns) if e is not None]
    summary.readable_until_ns = max(ends) if ends else None
    return found, accs, summary


def _part(run_dir: Path, manifest: dict, spec: Spec, origin: Origin, level: float, cams):
    """The worker's share: read_run over the cameras, without a progress bar, and without
    hashing the run's files, which this process's reader does (0.6 s of the worker's time on
    the demo). What the files' findings change in the bag's (its notes and gaps) differs
    then from this process's findings, so a changed file sends the run to one reader."""
    return read_run(run_dir, manifest, spec, origin, level, False, cams, files=False)

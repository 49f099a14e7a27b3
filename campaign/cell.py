"""What runs inside a worker: one cell's run and verification, and the result it sends back.

The executors submit `timed_cell` by reference: spawned pool workers and Ray tasks import it
as simconform.campaign.cell.timed_cell, so it stays a module-level function of this module.
A result is a plain dict ({"status": "ran" | "error" | "crashed", ...}) because it must pickle
back; `Outcome` is what an executor yields per finished cell.
"""

from __future__ import annotations

import io
import os
import socket
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any, Literal

from simconform.campaign.plan import Cell
from simconform.campaign.store import TOKEN_FILE
from simconform.lifeline import scratch, watch_process
from simconform.outdir import remove_owned
from simconform.provenance import sha256


def execute_cell(
    cell: Cell,
    mode: Literal["shared", "auto", "archive"] = "shared",
    token: str | None = None,
    spec_text: str | None = None,
    scene_files: dict[str, bytes] | None = None,
) -> dict:
    """Run and verify one cell in this (worker) process.

    Never raises: not every exception pickles back (UserError does not), so failures come
    back as {"status": "error", ...}. Only the death of the process itself is a crash.
    """
    try:
        from simconform.registry import BACKENDS

        BACKENDS.setdefault(cell.backend, cell.backend_entry)
        if mode == "shared" or (mode == "auto" and _sees_driver(cell, token)):
            # what an attempt killed mid-run left behind (the campaign's own run folder)
            remove_owned(Path(cell.out))
            verdict, complete = _run(cell, cell.spec, cell.world, cell.trajectory, Path(cell.out))
            return {"status": "ran", "verdict": verdict, "complete": complete, "transfer": "shared"}
        if spec_text is None or scene_files is None:
            raise RuntimeError("this worker cannot see the campaign folder and got no inputs")
        return _in_scratch(cell, spec_text, scene_files)
    except Exception as exc:
        return _error(exc)


def _in_scratch(cell: Cell, spec_text: str, scene_files: dict[str, bytes]) -> dict:
    """Run in a scratch folder (lifeline.scratch: none outlives its worker for long) and send
    the run folder back as a tar, also when the run failed: its error then names files that
    exist, in DIR/cells/<id>/, not in a scratch folder that is gone."""
    with scratch("simconform-cell-") as t:
        (t / "spec").mkdir()
        spec = t / "spec" / Path(cell.spec).name
        spec.write_text(spec_text)
        for rel, data in scene_files.items():
            dest = t / "scene" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        scene = t / "scene"
        world, trajectory = scene / cell.world_rel, scene / cell.trajectory_rel
        try:
            verdict, complete = _run(cell, spec, world, trajectory, t / "run")
            res: dict[str, Any] = {"status": "ran", "verdict": verdict, "complete": complete}
        except Exception as exc:
            res = _error(exc)
            for tmp_path, there in (
                (t / "run", cell.out),
                (spec, cell.spec),
                (world, cell.world),
                (trajectory, cell.trajectory),
                (t, "(the worker's scratch folder)"),
            ):
                for key in ("error", "traceback"):
                    res[key] = res[key].replace(str(tmp_path), str(there))
        res["transfer"] = "archive"
        if (t / "run").is_dir():
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:
                tar.add(t / "run", arcname=".")
            res["archive"] = buf.getvalue()
        return res


def _error(exc: BaseException) -> dict:
    return {
        "status": "error",
        "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}",
        "traceback": traceback.format_exc(limit=8),
    }


def _run(cell: Cell, spec, world, trajectory, out: Path) -> tuple[str, bool]:
    from simconform.run import RunConfig, run
    from simconform.verify.verifier import verify_run

    cfg = RunConfig(
        world=Path(world),
        spec=Path(spec),
        trajectory=Path(trajectory),
        backend=cell.backend,
        seed=cell.seed,
        out=out,
        duration=cell.duration,
        storage=cell.storage,
        interpolation=cell.interpolation,
        force=False,
    )
    result = run(cfg, progress=False)
    if cell.localize:  # before verify, so the cell's report shows it
        from simconform.downstream.localize import LocalizeConfig, localize

        localize(LocalizeConfig(result.out, reverify=False))
    report = verify_run(result.out, cell.confidence, jobs=0)  # cells are the parallel unit
    return report["verdict"], bool(report["run"]["complete"])


def timed_cell(cell: Cell, *args: Any, driver: tuple[str, int] | None = None) -> dict:
    """execute_cell plus where and how long it ran (what the executors submit).

    `driver`: (host, pid) of the campaign driver; a worker on the same host (a Ray task: its
    parent is Ray's, not the driver) stops, its scratch folder removed, once the driver is gone.
    """
    watch = None
    if driver is not None and driver[0] == socket.gethostname():
        watch = watch_process(driver[1])
    try:
        t0 = time.monotonic()
        res = execute_cell(cell, *args)
        res.update(pid=os.getpid(), host=socket.gethostname(), wall_s=time.monotonic() - t0)
        return res
    finally:
        if watch is not None:
            watch.set()


def _sees_driver(cell: Cell, token: str | None) -> bool:
    """True on a filesystem shared with the driver: its token and identical inputs are here."""
    try:
        if token is None or (Path(cell.root) / TOKEN_FILE).read_text().strip() != token:
            return False
        return all(sha256(Path(p)) == sha for p, sha in cell.files)
    except OSError:
        return False


Outcome = tuple[Cell, dict, int]  # cell, worker result, attempts


def crashed(why: str) -> dict:
    """The result of a cell whose worker process died (no result of its own came back)."""
    return {"status": "crashed", "error": why}

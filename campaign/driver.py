"""run_campaign: validate, prepare DIR, run the cells not already done, write the report."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

from simconform import __version__, budget
from simconform.campaign.local import LocalExecutor
from simconform.campaign.plan import Plan, load_campaign
from simconform.campaign.progress import CampaignProgress
from simconform.campaign.ray_executor import RayExecutor, Transfer, import_ray
from simconform.campaign.store import TOKEN_FILE, done_record, finish_cell, prepare, record
from simconform.errors import UserError
from simconform.outdir import check_target, claim, removable, remove_owned


def run_campaign(
    campaign: str | Path,
    out: str | Path,
    jobs: int | None = None,
    executor: str = "local",
    address: str | None = None,
    force: bool = False,
    progress: bool | None = None,
    transfer: Transfer = "auto",
) -> dict:
    """Run every cell that is not already done, then write the campaign report; returns it.

    `transfer="archive"` makes Ray workers always return run folders as tar bytes, as on a
    cluster without a shared filesystem (to check such a setup on one machine). The local pool
    spawns workers, so a script calling this must guard its top level with
    `if __name__ == "__main__":`.
    """
    if executor not in ("local", "ray"):
        raise UserError(None, "--executor", executor, "expected local or ray")
    if jobs is not None and jobs < 1:
        raise UserError(None, "--jobs", jobs, "expected at least 1 worker")
    if address is not None and executor != "ray":
        raise UserError(None, "--address", address, "only used with --executor ray")
    if transfer not in ("auto", "archive"):
        raise UserError(None, "transfer", transfer, "expected auto or archive")
    if executor == "ray":
        import_ray()
    plan = load_campaign(campaign)
    if executor == "local":  # Ray's workers may run where the engine is: they say so per cell
        _installed_here(Path(campaign), plan.backends)
    given = Path(out)
    check_target(given, "campaign", force)
    out = given.resolve()
    n_jobs = jobs or os.cpu_count() or 1
    cells = plan.cells(out)
    records: dict[str, dict] = {}
    if not force:
        for c in cells:
            rec = done_record(c)
            if rec is not None:
                records[c.id] = rec
    todo = [c for c in cells if c.id not in records]
    for c in todo:  # a cell run again replaces its folder: refuse before anything starts
        removable(Path(c.out))
    if executor == "local" or address in (None, "local"):
        check_campaign_budget(plan, todo, min(n_jobs, len(todo)), out)
    ex: LocalExecutor | RayExecutor = (
        LocalExecutor(n_jobs) if executor == "local" else RayExecutor(jobs, address, transfer, plan)
    )
    ex.open()
    try:
        with claim(given, "campaign") as owned:
            owned.declare(TOKEN_FILE, "specs/", "cells/", *REPORT_FILES)
            token = prepare(out)
            (out / "specs").mkdir(exist_ok=True)
            for v in plan.variants:
                spec_file = out / "specs" / f"{v.name}.yaml"
                if not spec_file.is_file() or spec_file.read_text() != v.text:
                    spec_file.write_text(v.text)
            for c in todo:
                remove_owned(Path(c.out))
            t0 = time.monotonic()
            interrupted = False
            with CampaignProgress(len(cells), records.values(), progress) as bar:
                try:
                    for cell, res, attempts in ex.execute(todo, token):
                        records[cell.id] = finish_cell(cell, res, attempts)
                        bar.done(records[cell.id])
                except KeyboardInterrupt:
                    interrupted = True
            meta = {
                "executor": executor,
                "address": address,
                "jobs": n_jobs if executor == "local" else jobs,
                "wall_s": time.monotonic() - t0,
                "interrupted": interrupted,
            }
            report = _report(plan, out, meta, cells, records)
    finally:
        ex.close()
    if interrupted:
        raise KeyboardInterrupt
    return report


REPORT_FILES = ("campaign.json", "campaign.md", "junit.xml", "plots/")


def _report(plan: Plan, out: Path, run: dict, cells: list, records: dict) -> dict:
    """campaign.json, campaign.md, junit.xml and plots/ of the cells' records."""
    from simconform.campaign.report import write_campaign_report

    for c in cells:
        records.setdefault(c.id, {**record(c, {"status": "not_run"}, 0), "error": None})
    meta = {
        "name": plan.name,
        "file": str(plan.file),
        "out": str(out),
        "executor": run["executor"],
        "address": run["address"],
        "jobs": run["jobs"],
        "spec": str(plan.spec),
        "backends": plan.backends,
        "seeds": plan.seeds,
        "variants": {v.name: v.overrides for v in plan.variants},
        "worlds": {
            s.name: {"world": str(s.world), "trajectory": str(s.trajectory)} for s in plan.scenes
        },
        "duration_s": None if plan.auto else plan.duration,
        # duration: auto: the planned seconds per "variant/world"
        **(
            {"duration_auto_s": {f"{v}/{w}": t for (v, w), t in plan.auto.items()}}
            if plan.auto
            else {}
        ),
        "confidence": plan.confidence,
        "storage": plan.storage,
        "interpolation": plan.interpolation,
        "localize": plan.localize,
        "simconform": __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": run["wall_s"],
        "interrupted": run["interrupted"],
    }
    return write_campaign_report(out, meta, [records[c.id] for c in cells])


def check_campaign_budget(plan: Plan, todo: list, at_once: int, out: Path) -> None:
    """Refuse a campaign whose cells, `at_once` at a time on this machine, would need more
    memory than it has, or whose run folders would not fit on the disk (budget.estimate per
    cell, as `simconform run --dry-run` shows it)."""
    if not todo:
        return
    from simconform.spec import Spec
    from simconform.trajectory import load_trajectory
    from simconform.world import load_world

    specs = {v.name: Spec.model_validate(v.content) for v in plan.variants}
    spans = {}
    for sc in plan.scenes:
        traj = load_trajectory(sc.trajectory, load_world(sc.world), plan.interpolation)
        spans[sc.name] = (traj.start_ns, traj.end_ns)
    memory, disk = [], 0
    for c in todo:
        start, end = spans[c.scene]
        if c.duration is not None:
            end = min(end, start + round(c.duration * 1e9))
        est = budget.estimate(specs[c.variant], start, end, 0, c.storage, jobs=0)
        memory.append(est.memory_bytes)
        disk += est.disk_bytes
    need = budget.Estimate([], at_once, sum(sorted(memory)[-at_once:]), 0, 0, disk)
    budget.check(need, out, source=plan.file)


def _installed_here(file: Path, backends: list[str]) -> None:
    """Refuse, before any cell starts, a backend whose engine this machine lacks: each of its
    cells would fail after the others had run (exit 2, as `run --backend` refuses it)."""
    from simconform.registry import BACKENDS

    for i, name in enumerate(backends):
        why = BACKENDS.load(name).unavailable()
        if why is not None:
            raise UserError(file, f"backends.{i}", name, why)

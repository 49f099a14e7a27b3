"""run_campaign: validate, prepare DIR, run the cells not already done, write the report."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from pathlib import Path

from simconform import __version__
from simconform.campaign.local import LocalExecutor
from simconform.campaign.plan import load_campaign
from simconform.campaign.progress import CampaignProgress
from simconform.campaign.ray_executor import RayExecutor, Transfer, import_ray
from simconform.campaign.store import done_record, finish_cell, prepare, record
from simconform.errors import UserError


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
    from simconform.campaign.report import write_campaign_report

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
    out = Path(out).resolve()
    n_jobs = jobs or os.cpu_count() or 1
    ex: LocalExecutor | RayExecutor = (
        LocalExecutor(n_jobs) if executor == "local" else RayExecutor(jobs, address, transfer, plan)
    )
    ex.open()
    try:
        token = prepare(out)
        (out / "specs").mkdir(exist_ok=True)
        for v in plan.variants:
            spec_file = out / "specs" / f"{v.name}.yaml"
            if not spec_file.is_file() or spec_file.read_text() != v.text:
                spec_file.write_text(v.text)
        cells = plan.cells(out)
        records: dict[str, dict] = {}
        if not force:
            for c in cells:
                rec = done_record(c)
                if rec is not None:
                    records[c.id] = rec
        todo = [c for c in cells if c.id not in records]
        for c in todo:
            shutil.rmtree(c.out, ignore_errors=True)
        t0 = time.monotonic()
        interrupted = False
        with CampaignProgress(len(cells), records.values(), progress) as bar:
            try:
                for cell, res, attempts in ex.execute(todo, token):
                    records[cell.id] = finish_cell(cell, res, attempts)
                    bar.done(records[cell.id])
            except KeyboardInterrupt:
                interrupted = True
    finally:
        ex.close()
    for c in cells:
        records.setdefault(c.id, {**record(c, {"status": "not_run"}, 0), "error": None})
    meta = {
        "name": plan.name,
        "file": str(plan.file),
        "out": str(out),
        "executor": executor,
        "address": address,
        "jobs": n_jobs if executor == "local" else jobs,
        "spec": str(plan.spec),
        "backends": plan.backends,
        "seeds": plan.seeds,
        "variants": {v.name: v.overrides for v in plan.variants},
        "worlds": {
            s.name: {"world": str(s.world), "trajectory": str(s.trajectory)} for s in plan.scenes
        },
        "duration_s": plan.duration,
        "confidence": plan.confidence,
        "storage": plan.storage,
        "interpolation": plan.interpolation,
        "simconform": __version__,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.monotonic() - t0,
        "interrupted": interrupted,
    }
    report = write_campaign_report(out, meta, [records[c.id] for c in cells])
    if interrupted:
        raise KeyboardInterrupt
    return report

"""`simconform export RUN --format F --out DIR`: claim DIR, build the dataset aside, move it in.

The exporter is found in simconform.registry.EXPORTERS (a plugin adds a run format there): a
function (source, folder, deskew) -> summary. Everything is built in DIR/.simconform/building-*
and moved into DIR at the end, export.json last, so a folder with export.json is complete; bad
input is refused before anything is written: a run still recording, a run file the user cannot
read (open_run reads every file first). A damaged, cut off or interrupted run is exported as far
as it is intact and export.json's `integrity` says what was left out, as verify's report does
(downstream/runcheck.py); the command then exits 4 as verify does.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from simconform.downstream.runcheck import read_error, record
from simconform.errors import UserError
from simconform.export.source import open_run
from simconform.outdir import claim, io_error, remove_owned

DESKEW = {True: "true motion (gt/), per point", False: "none: as published"}
NOT_A_RUN_FORMAT = {"sdf": "it exports a world and spec, not a run: use `simconform export-sdf`"}


@dataclass
class ExportConfig:
    run_dir: Path
    format: str
    out: Path
    sensor: str | None = None
    deskew: bool = True
    force: bool = False


def export(cfg: ExportConfig) -> dict:
    """Write the dataset; returns export.json's content."""
    from simconform.registry import EXPORTERS

    EXPORTERS.check(cfg.format)
    if cfg.format in NOT_A_RUN_FORMAT:
        raise UserError(None, "--format", cfg.format, NOT_A_RUN_FORMAT[cfg.format])
    writer = EXPORTERS.load(cfg.format)
    src = open_run(Path(cfg.run_dir), cfg.sensor)
    out = Path(cfg.out)
    if out.resolve() == src.run_dir.resolve():
        raise UserError(None, "--out", str(out), "expected a folder other than the run's")
    started = time.perf_counter()
    fresh = not (out.exists() or out.is_symlink())
    unreadable = None
    with claim(out, "export", cfg.force, clear=False) as owned:  # the old export stays till then
        try:
            with owned.staged(last="export.json") as tmp:  # --force: old export goes last
                body = writer(src, tmp, cfg.deskew)
                report = {
                    "format": cfg.format,
                    "run": str(src.run_dir),
                    "lidar": src.lidar,
                    "cameras": src.cameras,
                    "deskew": DESKEW[cfg.deskew],
                    **body,
                    "skipped": src.skipped,
                    "integrity": record(src.integrity, src.stopped),
                    "seconds": round(time.perf_counter() - started, 3),
                }
                (tmp / "export.json").write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            unreadable = read_error(exc, out)  # a run file (changed since open_run read it)
            if unreadable is None:
                raise io_error(out, exc) or exc from None
    if unreadable is not None:
        if fresh:  # the run's fault, not --out's: leave no --out behind
            remove_owned(out, "export")
        raise unreadable
    return report

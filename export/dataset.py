"""`simconform export RUN --format F --out DIR`: claim DIR, build the dataset aside, move it in.

The exporter is found in simconform.registry.EXPORTERS (a plugin adds a run format there): a
function (source, folder, deskew) -> summary. Everything is built in DIR/.simconform/building-*
and moved into DIR at the end, export.json last, so a folder with export.json is complete; bad
input is refused before anything is written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from simconform.errors import UserError
from simconform.export.source import open_run
from simconform.outdir import claim, io_error

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
    with claim(out, "export", cfg.force) as owned:
        tmp = owned.building()
        try:
            body = writer(src, tmp, cfg.deskew)
            report = {
                "format": cfg.format,
                "run": str(src.run_dir),
                "lidar": src.lidar,
                "cameras": src.cameras,
                "deskew": "true motion (gt/), per point" if cfg.deskew else "none: as published",
                **body,
                "skipped": src.skipped,
                "seconds": round(time.perf_counter() - started, 3),
            }
            (tmp / "export.json").write_text(json.dumps(report, indent=2) + "\n")
            owned.adopt(tmp, last="export.json")
            owned.seal()
        except OSError as exc:
            raise io_error(out, exc) or exc from None
    return report

"""`compare`: compute a comparison (runner.py) and write its folder: compare.json, compare.md,
junit.xml (report.py) and the plots (plots.py)."""

from __future__ import annotations

import json
from pathlib import Path

from simconform.outdir import claim, io_error
from simconform.progress import step
from simconform.verify.compare.config import CompareConfig
from simconform.verify.compare.identity import check_out
from simconform.verify.compare.plots import write_plots
from simconform.verify.compare.report import junit, markdown
from simconform.verify.compare.runner import Comparison, compare_runs


def write_compare(out: Path, res: Comparison) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out, res)
    names = [p.name for p in plots]
    files = {
        "compare.json": json.dumps(res.report, indent=2) + "\n",
        "compare.md": markdown(res.report, names),
        "junit.xml": junit(res.report),
    }
    for name, text in files.items():
        (out / name).write_text(text)
    return [out / n for n in files] + plots


def compare(cfg: CompareConfig, write: bool = True) -> dict:
    """Compare two runs and (with cfg.out) write compare.md, compare.json, junit.xml, plots."""
    res = compare_runs(cfg)
    if write and cfg.out is not None:
        out = Path(cfg.out)
        check_out(out, cfg.force, (Path(cfg.run_a), Path(cfg.run_b)))
        # locked; with --force the old comparison stays whole until the new one is drawn (in
        # DIR/.simconform/), then our old files go and the new ones are renamed in
        with claim(out, "compare", cfg.force, clear=False) as owned:
            try:
                with owned.staged(last="compare.json") as tmp:
                    step("compare: writing the report and its plots", cfg.progress)
                    write_compare(tmp, res)
            except OSError as exc:
                raise io_error(out, exc) or exc from None
    return res.report

"""`simconform compare RUN_A RUN_B`: cross-simulator conformance of two runs (docs/compare.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from simconform.cli.common import ProgressOpt, exit_code
from simconform.verify.compare.config import PSNR_MIN, RANGE_TOLERANCE


def compare_command(
    run_a: Annotated[
        Path, typer.Argument(help="First run folder (made by `simconform run`).", metavar="RUN_A")
    ],
    run_b: Annotated[
        Path,
        typer.Argument(
            help="Second run folder: same spec, world, trajectory and seed; any backend.",
            metavar="RUN_B",
        ),
    ],
    out: Annotated[
        Path, typer.Option(help="Folder for compare.md, compare.json, junit.xml and plots.")
    ],
    confidence: Annotated[
        float,
        typer.Option(help="Confidence 1 - alpha; equivalence uses (1 - 2 alpha) intervals."),
    ] = 0.95,
    range_tolerance: Annotated[
        float,
        typer.Option(help="Lidar truth agreement in metres: |range bias| and p99 |difference|."),
    ] = RANGE_TOLERANCE,
    psnr_min: Annotated[
        float, typer.Option(help="Least mean PSNR (dB) of one engine's truth images vs the other.")
    ] = PSNR_MIN,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing comparison in --out.")
    ] = False,
    progress: ProgressOpt = None,
) -> None:
    """Compare two runs of one spec, world, trajectory and seed made on two backends."""
    from simconform.verify.compare import CompareConfig, compare

    cfg = CompareConfig(
        run_a=run_a,
        run_b=run_b,
        out=out,
        confidence=confidence,
        range_tolerance=range_tolerance,
        psnr_min=psnr_min,
        force=force,
        progress=progress,
    )
    report = compare(cfg)
    print_summary(report)
    print(f"report: {out / 'compare.md'}")
    raise typer.Exit(exit_code(report))


def print_summary(report: dict, console=None) -> None:
    from simconform.verify.compare import console_rows
    from simconform.verify.report import SYMBOL

    style = {"pass": "green", "fail": "bold red", "inconclusive": "yellow", "not_applicable": "dim"}
    if console is None:
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    a, b = report["runs"]["a"], report["runs"]["b"]
    title = (
        f"simconform compare: A {a['backend']} vs B {b['backend']}, seed {a['seed']}, "
        f"{a['duration_s']:g} s"
    )
    table = Table(title=title)
    for col in (
        "part",
        "sensor",
        "metric",
        "A",
        "B",
        "B - A / value",
        "CI",
        "tolerance",
        "verdict",
    ):
        table.add_column(col, justify="right" if col in ("A", "B", "B - A / value") else "left")
    for r in console_rows(report):
        v = r["verdict"]
        label = f"{r['metric']} [{r['unit']}]" if r["unit"] and r["unit"] != "1" else r["metric"]
        table.add_row(
            r["part"],
            r["sensor"],
            label,
            r["a"],
            r["b"],
            r["value"],
            r["ci"],
            r["tolerance"],
            f"[{style[v]}]{SYMBOL[v]}[/]",
        )
    console.print(table)
    v = report["verdict"]
    console.print(f"verdict: [{style[v]}]{SYMBOL[v]}[/]")

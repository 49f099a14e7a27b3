"""`simconform campaign CAMPAIGN.yaml`: backends x seeds x spec variants x worlds, resumably."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simconform.cli.common import Interrupted, ProgressOpt


def print_summary(report: dict, console=None) -> None:
    from simconform.campaign import SYMBOL

    if console is None:
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    c = report["campaign"]
    t = report["totals"]
    table = Table(
        title=f"simconform campaign {c['name']}: {t['cells']} cells "
        f"({t['resumed']} resumed), confidence {c['confidence']:g}"
    )
    cols = ("backend", "variant", "world", "cells", "pass", "fail", "inconclusive", "crashed")
    for col in (*cols, "coverage"):
        table.add_column(col, justify="right" if col not in cols[:3] else "left")
    for g in report["groups"]:
        n = g["counts"]
        bad_cov = g["coverage_flags"]
        table.add_row(
            g["backend"],
            g["variant"],
            g["scene"],
            str(g["cells"]),
            f"[green]{n.get('pass', 0)}[/]",
            f"[red]{n.get('fail', 0)}[/]" if n.get("fail") else "0",
            f"[yellow]{n.get('inconclusive', 0)}[/]" if n.get("inconclusive") else "0",
            f"[red]{n.get('crashed', 0) + n.get('error', 0)}[/]"
            if n.get("crashed") or n.get("error")
            else "0",
            "ok" if not bad_cov else f"[yellow]{bad_cov} off[/]",
        )
    console.print(table)
    for r in report["cells"]:
        if r["status"] in ("crashed", "error"):
            why = escape(str(r.get("error")))
            console.print(f"{SYMBOL[r['status']]} {r['id']}: {r['status']} ({why})")
    v = report["verdict"]
    style = "green" if v == "pass" else "bold red"
    console.print(f"campaign verdict: [{style}]{v.upper()}[/]")


def campaign_command(
    campaign: Annotated[
        Path, typer.Argument(help="Campaign file (YAML).", metavar="CAMPAIGN.yaml")
    ],
    out: Annotated[Path, typer.Option(help="Campaign folder: cells/, campaign.md, plots.")],
    jobs: Annotated[
        int | None, typer.Option(help="Cells run at once (default: the CPU count).")
    ] = None,
    executor: Annotated[
        str, typer.Option(help="local (process pool) or ray (a Ray cluster).")
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(help="Ray cluster: local (default; starts one), auto or ray://host:port."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Run every cell again, even those already done.")
    ] = False,
    progress: ProgressOpt = None,
) -> None:
    """Run a campaign (backends x seeds x spec variants x worlds), resumably, and report it."""
    from simconform.campaign import run_campaign

    try:
        report = run_campaign(campaign, out, jobs, executor, address, force, progress)
    except KeyboardInterrupt:
        raise Interrupted("campaign interrupted; rerun the same command to resume") from None
    print_summary(report)
    print(f"report: {Path(out) / 'campaign.md'}")
    raise typer.Exit(0 if report["verdict"] == "pass" else 1)

"""What every command prints and returns: the verdict table, exit codes, the stderr console."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from simconform.errors import UserError

err = Console(stderr=True, highlight=False)
STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow", "not_applicable": "dim"}
INTERRUPT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def stdout_console(width: int = 150) -> Console:
    """Rich output on stdout: the terminal's width, or `width` columns in a log or a pipe."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else width)


def print_table(report: dict, console: Console | None = None) -> None:
    from simconform.verify.report import SYMBOL, rows

    if console is None:
        console = stdout_console()
    r = report["run"]
    title = (
        f"simconform: {r['backend']} backend, seed {r['seed']}, {r['duration_s']:g} s"
        + (", Gazebo's own <noise>" if r.get("noise") == "engine" else "")
        + ("" if r["complete"] else "  [yellow](incomplete run)[/]")
    )
    table = Table(title=title, show_lines=False)
    for col in ("sensor", "metric", "configured", "measured", "CI", "tolerance", "verdict"):
        table.add_column(
            col,
            justify="right" if col in ("configured", "measured") else "left",
            no_wrap=col in ("sensor", "metric", "verdict"),
        )
    for s, m, c, me, ci, tol, v, unit, _note in rows(report):
        label = f"{m} [{unit}]" if unit and unit != "1" else m
        table.add_row(s, label, c, me, ci, tol, f"[{STYLE[v]}]{SYMBOL[v]}[/]")
    console.print(table)
    v = report["verdict"]
    console.print(f"verdict: [{STYLE[v]}]{SYMBOL[v]}[/]")


def exit_code(report: dict) -> int:
    return 0 if report["verdict"] in ("pass", "not_applicable") else 1


def check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1:
        raise UserError(None, "--confidence", confidence, "expected a level in [0.5, 1)")

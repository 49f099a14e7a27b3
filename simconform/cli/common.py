"""What every command prints and returns: the verdict table, exit codes, the stderr console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from simconform.errors import UserError

err = Console(stderr=True, highlight=False)
STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow", "not_applicable": "dim"}
INTERRUPT_CODES = {"SIGINT": 130, "SIGTERM": 143}
PARTIAL = 4  # the verdict covers only part of the run (damaged or not all recorded)


class Interrupted(Exception):
    """A command stopped by Ctrl-C that says what it kept: one line, exit code 130."""


ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="Progress on stderr: a bar on a terminal, a plain line every 10 % elsewhere "
        "(default).",
    ),
]
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Print nothing but errors (no table, no progress); the exit code is the verdict.",
    ),
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the verdict as one JSON object on stdout instead of the table (for "
        "scripts; progress and messages stay on stderr).",
    ),
]


def progress_of(progress: bool | None, quiet: bool) -> bool | None:
    return False if quiet else progress


def verdict_json(report: dict, report_dir: Path | None) -> str:
    """--json: the verdict, counts, what was not checked and each metric's verdict with its
    interval; the full report is report.json (docs/report-schema.md)."""
    sensors = {
        name: {
            mname: {
                k: m[k] for k in ("verdict", "measured", "ci", "tolerance", "unit", "why") if k in m
            }
            for mname, m in s["metrics"].items()
        }
        for name, s in report["sensors"].items()
    }
    out = {
        "schema_version": report.get("schema_version"),
        "verdict": report["verdict"],
        "exit_code": exit_code(report),
        "scope": ((report.get("run") or {}).get("integrity") or {}).get("scope", "whole run"),
        "counts": (report.get("summary") or {}).get("counts"),
        "not_checked": (report.get("summary") or {}).get("not_checked"),
        "report": None if report_dir is None else str(report_dir / "report.json"),
        "sensors": sensors,
    }
    return json.dumps(out, indent=2)


def print_verdict(report: dict, report_dir: Path | None, quiet: bool, as_json: bool) -> None:
    """The table (default), the JSON (--json) or nothing (--quiet) on stdout."""
    if as_json:
        print(verdict_json(report, report_dir))
    elif not quiet:
        print_table(report)
    if not quiet and not as_json:
        print_integrity(report)
    elif as_json:
        for line in (report["run"].get("integrity") or {}).get("findings", []):
            print(f"integrity: {line}", file=sys.stderr)


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
    scope = (r.get("integrity") or {}).get("scope", "whole run")
    if scope == "whole run":
        console.print(f"verdict: [{STYLE[v]}]{SYMBOL[v]}[/]")
    else:
        console.print(
            f"verdict: [{STYLE[v]}]{SYMBOL[v]}[/] [yellow](of the {scope.replace(' only', '')} "
            "only: not a verdict on the whole run)[/]"
        )


def print_integrity(report: dict) -> None:
    """What the integrity checks found (verify/integrity.py), one line each, on stderr."""
    integ = report["run"].get("integrity") or {}
    for line in integ.get("findings", []):
        err.print(f"[yellow]integrity[/]: {line}", soft_wrap=True)


def exit_code(report: dict) -> int:
    """0 pass, 1 fail or inconclusive, 4 (PARTIAL) a verdict on part of the run only: damaged
    data left out or a run that did not record its whole span. A FAIL on the part judged is a
    FAIL of the run (1); anything else on part of it is not a PASS of the whole (4)."""
    v = report["verdict"]
    if v == "fail":
        return 1
    if ((report.get("run") or {}).get("integrity") or {}).get("scope", "whole run") != "whole run":
        return PARTIAL
    return 0 if v in ("pass", "not_applicable") else 1


def check_confidence(confidence: float) -> None:
    if not 0.5 <= confidence < 1:
        raise UserError(None, "--confidence", confidence, "expected a level in [0.5, 1)")


def check_power(power: float) -> None:
    if not 0.5 <= power < 1:
        raise UserError(None, "--power", power, "expected a probability in [0.5, 1)")

"""`simconform backends [NAME ...]`: which backends work on this machine, before a long run."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from simconform.cli.common import stdout_console
from simconform.cli.kernels import PROBE, say_if_compiling
from simconform.registry import BACKENDS

NOT_PROBED = {"replay": "verifies recorded bags: `simconform replay BAG --map MAP.yaml`"}


def backends_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Backends to check (default: all registered).", metavar="[NAME]..."),
    ] = None,
) -> None:
    """Say which backends are usable here: each opens the demo world and captures once."""
    from simconform.probe import probe

    for n in names or []:
        BACKENDS.check(n, field="backends NAME")
    chosen = names or list(BACKENDS)
    if any(n not in NOT_PROBED for n in chosen):
        say_if_compiling(PROBE)
    table = Table(title="simconform backends")
    for col in ("backend", "usable", "engine", "seconds", "note"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    ok = True
    for n in chosen:
        if n in NOT_PROBED:
            table.add_row(n, "-", "-", "-", NOT_PROBED[n])
            continue
        p = probe(n)
        ok &= p.usable
        mark = "[green]yes[/]" if p.usable else "[bold red]no[/]"
        # the note is text, not markup: a Debian source's "[arch=... signed-by=...]" stays
        table.add_row(n, mark, escape(p.version or "-"), f"{p.seconds:.1f}", escape(p.note))
    stdout_console().print(table)
    raise typer.Exit(0 if ok else 1)

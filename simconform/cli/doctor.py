"""`simconform doctor`: each backend with what it found, each optional piece, what is missing."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from simconform.cli.common import JsonOpt, stdout_console
from simconform.cli.kernels import PROBE, say_if_compiling


def doctor_command(
    capture: Annotated[
        bool,
        typer.Option(
            "--capture/--no-capture",
            help="Probe each backend with a real capture (default; Gazebo takes seconds), or "
            "only check that it loads.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Say what this machine has for simconform: backends (probed), engines, renderers, Ray,
    lidar odometry, with versions, and how to install what is missing. Exit 0 when the
    reference backend works (missing optional parts are listed, not errors), 1 otherwise."""
    from simconform.doctor import as_json as to_json
    from simconform.doctor import backend_findings, components

    if capture:
        say_if_compiling(PROBE)
    backends = backend_findings(capture=capture)
    parts = components()
    ok = any(f.name == "reference" and f.found for f in backends)
    if as_json:
        print(json.dumps(to_json(backends, parts), indent=2))
        raise typer.Exit(0 if ok else 1)
    console = stdout_console()
    for title, rows in (("backends", backends), ("components", parts)):
        table = Table(title=f"simconform doctor: {title}")
        for col in ("name", "found", "version / where / why not", "needed for", "to install"):
            table.add_column(col)
        for f in rows:
            mark = "[green]yes[/]" if f.found else "[bold red]no[/]"
            table.add_row(
                f.name,
                mark,
                escape(f.detail),
                escape(f.needed_for),
                escape(f.install * (not f.found)),
            )
        console.print(table)
    missing = [f.name for f in backends + parts if not f.found]
    console.print(f"missing: {', '.join(missing)}" if missing else "nothing missing")
    raise typer.Exit(0 if ok else 1)

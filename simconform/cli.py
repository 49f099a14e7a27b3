"""The `simconform` command line.

Exit codes: 0 every metric passes, 1 any metric fails or is inconclusive, 2 bad input (one
message, no traceback, nothing written), 3 the engine failed mid-run (the run folder keeps what
was recorded and the engine's log), 130/143 when a run was interrupted (after its partial
recording has been verified).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from simconform.errors import UserError

# Set before numpy loads (nothing above imports it). Our arrays are small: BLAS threads only
# spin and fight the capture workers for the cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="Verify simulated sensor models against their declared error models, on any simulator.",
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)
STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow", "not_applicable": "dim"}
INTERRUPT_CODES = {"SIGINT": 130, "SIGTERM": 143}


def print_table(report: dict, console: Console | None = None) -> None:
    from simconform.verify.report import SYMBOL, rows

    if console is None:
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
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


@app.command()
def run(
    world: Annotated[Path | None, typer.Option(help="World file (YAML).")] = None,
    spec: Annotated[Path | None, typer.Option(help="Sensor spec (YAML).")] = None,
    trajectory: Annotated[
        Path | None, typer.Option(help="TUM file (t x y z qx qy qz qw) or 2D waypoints (t x y).")
    ] = None,
    backend: Annotated[
        str, typer.Option(help="Simulator backend: reference, mujoco, gazebo.")
    ] = "reference",
    seed: Annotated[int, typer.Option(help="Seed of every sensor's error streams.")] = 1234,
    noise: Annotated[
        str,
        typer.Option(
            help="Who adds the spec's noise: pipeline (simconform, any backend) or engine "
            "(Gazebo's own SDF <noise>, signed off against the spec; --backend gazebo only)."
        ),
    ] = "pipeline",
    out: Annotated[Path, typer.Option(help="Run folder to create.")] = Path("runs/demo"),
    duration: Annotated[
        float | None,
        typer.Option(help="Run only the first SECONDS of the trajectory.", metavar="SECONDS"),
    ] = None,
    storage: Annotated[str, typer.Option(help="Bag storage: mcap or sqlite3.")] = "mcap",
    interpolation: Annotated[
        str,
        typer.Option(
            help="Between the trajectory's poses: spline (C2: cubic spline and RotationSpline) "
            "or linear (linear and SLERP, the old behaviour)."
        ),
    ] = "spline",
    emulate: Annotated[
        str | None,
        typer.Option(
            help="With --backend reference: render the lidar and camera as that engine does "
            "(gazebo: gpu_lidar's cube-map texels and global shutter, ogre2's sRGB shading), "
            "on the exact geometry.",
            metavar="ENGINE",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing run in --out.")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Worker processes rendering lidar/camera ahead (default: CPUs - 1, max 4; "
            "0: in-process).",
            min=0,
            max=64,
        ),
    ] = None,
    confidence: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
    progress: Annotated[
        bool | None,
        typer.Option("--progress/--no-progress", help="Progress bar (default: on a terminal)."),
    ] = None,
) -> None:
    """Run a spec on a world along a trajectory, record the bag, verify it (defaults: the demo)."""
    from simconform.run import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD, RunConfig
    from simconform.run import run as do_run
    from simconform.verify.verifier import verify_run

    if storage not in ("mcap", "sqlite3"):
        raise UserError(None, "--storage", storage, "expected mcap or sqlite3")
    if not 0.5 <= confidence < 1:
        raise UserError(None, "--confidence", confidence, "expected a level in [0.5, 1)")
    cfg = RunConfig(
        world=world or DEMO_WORLD,
        spec=spec or DEMO_SPEC,
        trajectory=trajectory or DEMO_TRAJECTORY,
        backend=backend,
        seed=seed,
        noise=noise,
        out=out,
        duration=duration,
        storage=storage,
        interpolation=interpolation,
        emulate=emulate,
        force=force,
        jobs=max(0, min((os.cpu_count() or 1) - 1, 4)) if jobs is None else jobs,
    )
    result = do_run(cfg, progress=progress)
    if result.stopped_by:
        err.print(
            f"[yellow]interrupted by {result.stopped_by}[/]: the bag is closed and holds "
            f"{sum(result.captures.values())} captures; verifying what was recorded"
        )
    report = verify_run(result.out, confidence)
    print_table(report)
    print(f"report: {result.out / 'report' / 'report.md'}")
    if result.stopped_by:
        raise typer.Exit(INTERRUPT_CODES.get(result.stopped_by, 1))
    raise typer.Exit(exit_code(report))


@app.command()
def verify(
    run_dir: Annotated[
        Path, typer.Argument(help="A run folder made by `simconform run`.", metavar="DIR")
    ],
    confidence: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
) -> None:
    """Verify a recorded run again, rewrite DIR/report/ and print the verdict table."""
    from simconform.verify.verifier import verify_run

    report = verify_run(run_dir, confidence)
    print_table(report)
    raise typer.Exit(exit_code(report))


from simconform.campaign import campaign_command  # noqa: E402
from simconform.compare import compare_command  # noqa: E402
from simconform.replay_cli import replay_command  # noqa: E402

app.command("compare")(compare_command)
app.command("campaign")(campaign_command)

app.command("replay")(replay_command)

from simconform.adapters.gazebo.sdf import export_sdf_command  # noqa: E402

app.command("export-sdf")(export_sdf_command)

from simconform.adapters.gazebo.sdf_import import import_sdf_command  # noqa: E402

app.command("import-sdf")(import_sdf_command)


def main() -> None:
    from simconform.adapters.base import BackendUnavailable, EngineError

    try:
        code = app(standalone_mode=False)  # click returns the Exit code in this mode
    except (UserError, BackendUnavailable) as exc:
        one_line = " ".join(str(exc).split())
        print(f"simconform: error: {one_line}", file=sys.stderr)
        sys.exit(2)
    except EngineError as exc:  # the run folder keeps what was recorded and the engine's log
        one_line = " ".join(str(exc).split())
        print(f"simconform: engine error: {one_line}", file=sys.stderr)
        sys.exit(3)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # usage errors of the click that typer bundles
        if type(exc).__name__ == "Abort":
            print("simconform: aborted", file=sys.stderr)
            sys.exit(130)
        if callable(getattr(exc, "show", None)) and isinstance(
            getattr(exc, "exit_code", None), int
        ):
            exc.show()
            sys.exit(2)
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

"""`simconform plan [SPEC]`: how long a run must be for every metric to PASS with a stated
power if the sensors conform (verify/planning.py); the same tables in `run --dry-run`, and
the length `run --duration auto` chooses."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from simconform.cli.common import check_confidence, check_power, stdout_console

if TYPE_CHECKING:  # runplan loads the whole recording pipeline: not for `simconform verify`
    from simconform.runplan import Section


def plan_command(
    spec: Annotated[
        Path | None, typer.Argument(help="Sensor spec (YAML; default: the demo's).")
    ] = None,
    world: Annotated[
        Path | None, typer.Option(help="World file (YAML): decides how many lidar rays hit.")
    ] = None,
    trajectory: Annotated[
        Path | None, typer.Option(help="TUM file or 2D waypoints (its span caps the run).")
    ] = None,
    power: Annotated[
        float, typer.Option(help="Chance that a conforming metric PASSes at the planned length.")
    ] = 0.8,
    confidence: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
) -> None:
    """Print per sensor and metric the run length that makes it conclusive (PASS with
    --power if the sensor conforms), the dominating metric, and the length for all at once."""
    from simconform.cli.kernels import needed, say_if_compiling
    from simconform.run import RunConfig, load_inputs

    check_confidence(confidence)
    check_power(power)
    given = {"spec": spec, "world": world, "trajectory": trajectory}
    inp = load_inputs(RunConfig(**{k: v for k, v in given.items() if v is not None}))  # demo
    if any(s.type == "lidar" for s in inp.spec.sensors.values()):  # its probe sweeps cast rays
        say_if_compiling(needed("reference", ("lidar",), verify=False))
    plan = make_plan(inp, confidence, power)
    c = stdout_console()
    span = (inp.trajectory.end_ns - inp.trajectory.start_ns) / 1e9
    for sec in plan_sections(plan, span, None):
        print_section(c, sec)


def make_plan(inp, level: float, power: float):
    from simconform.verify.runlength import plan_inputs

    return plan_inputs(inp.spec, inp.world, inp.trajectory, level, power)


def _length(t: float | None) -> str:
    return "never" if t is None else f"{t:g} s"


def plan_sections(plan, span_s: float, run_s: float | None) -> list[Section]:
    """The plan as tables: every metric; per sensor its length and dominating metric, and the
    run's (`run_s`: the length a run is configured with, judged against the plan)."""
    from simconform.runplan import Section
    from simconform.verify.runlength import joint_power

    pct = f"{plan.power:.0%}"
    rows = [
        [
            m.sensor,
            m.metric,
            "-" if m.n is None else f"{m.n:,} {m.counts}",
            _length(m.duration_s),
            f"{m.power:.2f}",
            m.why or m.note,
        ]
        for m in plan.metrics
    ]
    title = (
        f"sample-size plan: each metric PASSes with {pct} power if the sensor conforms "
        f"(confidence {plan.level:g})"
    )
    cols = ["sensor", "metric", "needs", "length", "P(PASS)", "note"]
    sensors = {m.sensor: plan.sensor_length(m.sensor) for m in plan.metrics}
    srows = [[name, _length(t), top] for name, (t, top) in sensors.items()]
    stuck = [f"{m.sensor}.{m.metric}" for m in plan.metrics if m.duration_s is None]
    if plan.run_s is not None:
        notes = [
            f"every metric at once: {plan.run_s:g} s (P(all PASS) >= {pct}, taken as the "
            "product of the metrics' chances)"
        ]
    elif stuck:
        notes = [
            f"no run length makes every metric conclusive: {', '.join(stuck)} never PASS "
            f"with {pct} power (see the note of each)"
        ]
    else:
        notes = [f"every metric at once needs more than the trajectory's {span_s:g} s"]
    notes.append(f"the trajectory spans {span_s:g} s")
    if run_s is not None:
        short = [n for n, (t, _) in sensors.items() if t is None or t > run_s + 1e-9]
        notes.append(
            f"this run ({run_s:g} s): P(every metric PASSes) ~ "
            f"{joint_power(plan.metrics, run_s):.2f}"
            + (f"; shorter than needed for {', '.join(short)}" if short else "")
        )
    per_sensor = Section(
        "run length per sensor", ["sensor", "length", "dominated by"], srows, notes
    )
    return [Section(title, cols, rows, list(plan.notes)), per_sensor]


def print_section(console, sec: Section) -> None:
    from rich.table import Table

    table = Table(title=sec.title, show_header=any(sec.columns))
    for col in sec.columns:
        table.add_column(col)
    for row in sec.rows:
        table.add_row(*row)
    console.print(table)
    for note in sec.notes:
        console.print(f"  {note}")

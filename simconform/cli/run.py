"""`simconform run` and `simconform verify`: record one run and verify it, or verify it again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from simconform.cli.common import (
    INTERRUPT_CODES,
    Interrupted,
    JsonOpt,
    ProgressOpt,
    QuietOpt,
    check_confidence,
    check_power,
    err,
    exit_code,
    print_verdict,
    progress_of,
    stdout_console,
)
from simconform.cli.kernels import say_if_compiling
from simconform.errors import UserError


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
        str | None,
        typer.Option(
            help="Run only the first SECONDS of the trajectory; auto: the shortest length at "
            "which every metric PASSes with --power if the sensors conform (simconform plan), "
            "at most the trajectory's span.",
            metavar="SECONDS|auto",
        ),
    ] = None,
    storage: Annotated[str, typer.Option(help="Bag storage: mcap or sqlite3.")] = "mcap",
    epoch: Annotated[
        int | None,
        typer.Option(
            help="Clock of the trajectory's t = 0, in whole seconds since 1970 (default "
            "1704067200, 2024-01-01 UTC; a trajectory already stamped after 2001 keeps its "
            "stamps; 0: the trajectory's own clock).",
            metavar="SECONDS",
        ),
    ] = None,
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
            help="Worker processes rendering lidar/camera ahead and adding their noise, and "
            "at most that many (up to 2) reading a long camera run's bag to verify it "
            "(default: the CPUs this process may use, max 4; 0: in-process).",
            min=0,
            max=64,
        ),
    ] = None,
    confidence: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
    power: Annotated[
        float,
        typer.Option(
            help="With --duration auto and --dry-run: the chance that a conforming metric "
            "PASSes at the planned length."
        ),
    ] = 0.8,
    progress: ProgressOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Validate everything, print the plan and the resource estimate per sensor, "
            "write nothing.",
        ),
    ] = False,
    max_memory: Annotated[
        str | None,
        typer.Option(
            help="Refuse a run estimated to need more memory than this (512M, 4G; default: "
            "what the machine has available).",
            metavar="SIZE",
        ),
    ] = None,
    max_disk: Annotated[
        str | None,
        typer.Option(
            help="Refuse a run estimated to write more than this (default: the free space "
            "at --out).",
            metavar="SIZE",
        ),
    ] = None,
) -> None:
    """Run a spec on a world along a trajectory, record the bag, verify it (defaults: the demo)."""
    from simconform.budget import parse_size
    from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
    from simconform.outdir import session
    from simconform.run import RunConfig
    from simconform.run import run as do_run
    from simconform.verify.verifier import verify_run

    if storage not in ("mcap", "sqlite3"):
        raise UserError(None, "--storage", storage, "expected mcap or sqlite3")
    check_confidence(confidence)
    check_power(power)
    auto = duration is not None and duration.strip().lower() == "auto"
    cfg = RunConfig(
        world=world or DEMO_WORLD,
        spec=spec or DEMO_SPEC,
        trajectory=trajectory or DEMO_TRAJECTORY,
        backend=backend,
        seed=seed,
        noise=noise,
        out=out,
        duration=None if auto else parse_duration(duration),
        storage=storage,
        epoch=epoch,
        interpolation=interpolation,
        emulate=emulate,
        force=force,
        jobs=default_jobs() if jobs is None else jobs,
        max_memory=None if max_memory is None else parse_size(max_memory, "--max-memory"),
        max_disk=None if max_disk is None else parse_size(max_disk, "--max-disk"),
    )
    sample_plan = None
    if auto:
        cfg.duration, sample_plan = choose_duration(cfg, confidence, power)
    if dry_run:
        print_plan(cfg, confidence, power, sample_plan)
        return
    shown = progress_of(progress, quiet)
    if shown is not False:
        say_if_compiling(_kernels(cfg))
    with session():  # --out stays locked from the first capture to the last report file
        result = do_run(cfg, progress=shown)
        if result.stopped_by:
            err.print(
                f"[yellow]interrupted by {result.stopped_by}[/]: the bag is closed and holds "
                f"{sum(result.captures.values())} captures; verifying what was recorded"
            )
        try:
            report = verify_run(result.out, confidence, progress=shown, jobs=cfg.jobs)
        except KeyboardInterrupt:  # the recording is whole: say how to judge it
            kept = "complete" if result.complete else "closed, as far as it went"
            raise Interrupted(
                f"interrupted (Ctrl-C) while verifying; the recording is {kept}: "
                f"`simconform verify {result.out}` judges it"
            ) from None
    print_verdict(report, result.out / "report", quiet, as_json)
    if not (quiet or as_json):
        print(f"report: {result.out / 'report' / 'report.md'}")
    if result.stopped_by:
        raise typer.Exit(INTERRUPT_CODES.get(result.stopped_by, 1))
    raise typer.Exit(exit_code(report))


def default_jobs() -> int:
    """One capture worker per CPU this process may use, at most 4: the workers render, add the
    heavy sensors' noise and encode, the main process only orders and writes, so on 2 CPUs two
    workers beat one (bench/demo.py, idle 2-core machine: 63.6 s against 89.8 s; under load
    5-7.5 it was the other way, 162 s against 117 s, as the main process then gets less CPU:
    pass --jobs 1 on a busy machine). On one CPU the run stays in-process (0). The affinity
    mask is read, not cgroup CPU quotas."""
    from simconform.lifeline import usable_cpus

    cpus = usable_cpus()
    return 0 if cpus <= 1 else min(cpus, 4)


def parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise UserError(None, "--duration", text, "expected seconds > 0 or auto") from None


def choose_duration(cfg, confidence: float, power: float):
    """--duration auto: the plan's length for every metric (verify/runlength.py auto_length),
    said on stderr with what it could not reach; returns (seconds, the plan), so --dry-run
    shows the same plan without casting its lidar probes again."""
    from simconform.cli.plan import make_plan
    from simconform.run import load_inputs
    from simconform.verify.runlength import auto_length

    inp = load_inputs(cfg)
    span = (inp.end_ns - inp.start_ns) / 1e9
    sample_plan = make_plan(inp, confidence, power)
    auto = auto_length(sample_plan, span)
    together = f"all of them together: P ~ {auto.power:.2f}"
    if auto.capped:
        what = (
            f"the trajectory's whole span, too short for {power:.0%} power on every metric "
            f"that can become conclusive ({together})"
        )
    else:
        what = (
            f"where each metric that can become conclusive PASSes with {power:.0%} power if "
            f"the sensors conform ({together})"
        )
    err.print(f"--duration auto: {auto.seconds:g} s, {what}", soft_wrap=True)
    for m in auto.stuck:
        err.print(
            f"[yellow]--duration auto[/]: {m.sensor}.{m.metric} cannot become conclusive at "
            f"any length: {m.why}",
            soft_wrap=True,
        )
    return auto.seconds, sample_plan


def print_plan(cfg, confidence: float = 0.95, power: float = 0.8, sample_plan=None) -> None:
    """--dry-run: the plan's sections as tables (with the sample-size plan: simconform plan,
    or `sample_plan` when --duration auto already made it); exit 2 with the refusal the run
    would meet."""
    from simconform.cli.plan import make_plan, plan_sections, print_section
    from simconform.runplan import plan_run

    def sample_size(ctx) -> list:
        inp = ctx.prepared.inputs
        length = (inp.end_ns - inp.start_ns) / 1e9
        span = (inp.trajectory.end_ns - inp.trajectory.start_ns) / 1e9
        made = sample_plan or make_plan(inp, confidence, power)
        return plan_sections(made, span, length)

    plan = plan_run(cfg, extra=[sample_size])
    console = stdout_console()
    for sec in plan.sections:
        print_section(console, sec)
    if plan.refusal is not None:
        raise plan.refusal
    console.print("dry run: the run would start; nothing was written")


def verify(
    run_dir: Annotated[
        Path, typer.Argument(help="A run folder made by `simconform run`.", metavar="DIR")
    ],
    confidence: Annotated[float, typer.Option(help="Confidence level of every interval.")] = 0.95,
    jobs: Annotated[
        int | None,
        typer.Option(
            help="Worker processes reading a long camera run's bag: its cameras in one, the "
            "other sensors in another (default: 2 where the CPUs allow; 1: every sensor in "
            "one; 0: in-process).",
            min=0,
            max=64,
        ),
    ] = None,
    progress: ProgressOpt = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Verify a recorded run again, rewrite DIR/report/ and print the verdict table.

    The run's files are checked against the SHA-256 in run.json and its MCAP chunks against
    their CRCs; damaged data is left out and named, a killed run is verified up to its last
    complete chunk. Exit 4 when the verdict covers only part of the run (and is not FAIL)."""
    from simconform.verify.verifier import verify_run

    check_confidence(confidence)
    report = verify_run(run_dir, confidence, progress=progress_of(progress, quiet), jobs=jobs)
    print_verdict(report, Path(run_dir) / "report", quiet, as_json)
    raise typer.Exit(exit_code(report))


def _kernels(cfg) -> list[str]:
    """The numba kernels this run will call (cli/kernels.py); every kind where the spec does
    not load here (the run itself then says what is wrong with it)."""
    from simconform.cli.kernels import needed
    from simconform.spec import load_spec

    try:
        kinds = {s.type for s in load_spec(cfg.spec).sensors.values()}
    except UserError:
        kinds = {"lidar", "camera"}
    return needed(cfg.backend, kinds)

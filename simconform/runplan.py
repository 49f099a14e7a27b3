"""`simconform run --dry-run`: everything a run checks before it writes, and what it would do.

A plan is a list of sections (a title, column names, rows and notes) that the CLI prints as
tables; each section comes from one builder in SECTIONS, called with the config and the
prepared run; a caller adds its own builders (`extra`: the CLI's sample-size plan, which
lives in the verify layer above this one).

Nothing is written: the inputs are validated as `run` does (simconform.run.prepare), the
output folder is checked without touching it (outdir.check_target), the resource estimate is
compared with the machine, and only when all of that passes is the backend opened and closed
again (an engine that is missing or refuses the spec is found here too; a run too large for
the machine is refused before its backend allocates anything).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from simconform.budget import Estimate, fmt_bytes
from simconform.errors import UserError
from simconform.outdir import check_target
from simconform.run import Prepared, RunConfig, check_resources, prepare


@dataclass
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class RunPlan:
    sections: list[Section]
    estimate: Estimate
    refusal: UserError | None = None  # what the run would stop with (exit 2)


def plan_run(
    cfg: RunConfig, extra: Sequence[Callable[[PlanContext], list[Section]]] = ()
) -> RunPlan:
    """Validate everything `run` validates and describe the run; write nothing.

    Input errors raise UserError at once, as the run would. A run that would be refused later
    (its --out, its resource estimate) still gets its plan, with the refusal in `refusal`."""
    p = prepare(cfg)
    refusal: UserError | None = None
    out_state = ""
    try:
        out_state = check_target(cfg.out, "run", cfg.force)
    except UserError as exc:
        refusal = exc
    try:
        budget_lines = check_resources(cfg, p)
    except UserError as exc:
        refusal = refusal or exc
        budget_lines = [str(exc.allowed)]
    if refusal is None:
        if cfg.noise == "engine":
            p.backend.use_engine_noise(cfg.seed)
        p.backend.open(p.inputs.world, p.inputs.spec)  # BackendUnavailable: exit 2 as in run
        p.backend.close()
    ctx = PlanContext(cfg, p, out_state, budget_lines, refusal)
    sections = [build(ctx) for build in SECTIONS] + [s for build in extra for s in build(ctx)]
    return RunPlan(sections, p.estimate, refusal)


@dataclass
class PlanContext:
    cfg: RunConfig
    prepared: Prepared
    out_state: str  # check_target's answer: new, empty, replace ("" when refused)
    budget: list[str]  # the estimate against the machine, one line per resource
    refusal: UserError | None


OUT_STATES = {
    "new": "a new folder",
    "empty": "an empty folder",
    "replace": "replaces the run there (--force): only files simconform wrote",
}


def run_section(ctx: PlanContext) -> Section:
    cfg, p = ctx.cfg, ctx.prepared
    inp = p.inputs
    span = (inp.trajectory.end_ns - inp.trajectory.start_ns) / 1e9
    length = (inp.end_ns - inp.start_ns) / 1e9
    backend = cfg.backend + (f" (--emulate {cfg.emulate})" if cfg.emulate else "")
    rows = [
        ["backend", backend + (", Gazebo's own noise" if cfg.noise == "engine" else "")],
        ["seed", str(cfg.seed)],
        ["spec", f"{cfg.spec} ({inp.spec.name}, {len(inp.spec.sensors)} sensors)"],
        ["world", f"{cfg.world} ({inp.world.name}, {len(inp.world.objects)} objects)"],
        ["trajectory", f"{cfg.trajectory} ({span:g} s, {cfg.interpolation} interpolation)"],
        ["length", f"{length:g} s" + ("" if cfg.duration is None else " (--duration)")],
        ["storage", cfg.storage],
        [
            "rendering",
            f"{p.workers} capture worker process{'es' if p.workers > 1 else ''}"
            if p.workers
            else "in this process",
        ],
        [
            "out",
            f"{cfg.out}: "
            + (OUT_STATES.get(ctx.out_state, ctx.out_state) if ctx.out_state else "refused"),
        ],
    ]
    return Section("simconform run --dry-run: the plan (nothing written)", ["", ""], rows)


def estimate_section(ctx: PlanContext) -> Section:
    est = ctx.prepared.estimate
    rows = [
        [
            r.name,
            r.type,
            r.size or "-",
            f"{ctx.prepared.inputs.spec.sensors[r.name].rate_hz:g} Hz",
            str(r.captures),
            fmt_bytes(r.record_bytes + r.peak_bytes),
            fmt_bytes(r.verify_bytes),
            fmt_bytes(r.disk_bytes),
        ]
        for r in est.sensors
    ]
    rows.append(
        [
            "total",
            "",
            "",
            "",
            str(sum(r.captures for r in est.sensors)),
            fmt_bytes(est.record_bytes),
            fmt_bytes(est.verify_bytes),
            fmt_bytes(est.disk_bytes),
        ]
    )
    notes = [
        "a model, not a measurement (docs/resources.md): memory is the larger of recording and "
        f"verifying, {fmt_bytes(est.memory_bytes)} in all with the process itself"
        + (" and its workers" if est.workers else ""),
        *est.notes,
        *ctx.budget,
    ]
    cols = ["sensor", "type", "size", "rate", "captures", "recording", "verifying", "disk"]
    return Section("resource estimate", cols, rows, notes)


SECTIONS: list[Callable[[PlanContext], Section]] = [run_section, estimate_section]

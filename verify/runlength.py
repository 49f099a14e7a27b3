"""A run's length from its metrics' plans (verify/planning.py): every metric at once, what
`run --duration auto` chooses, and the lidar returns per sweep that the plan counts on, cast
in the run's own world.

The run's length is the shortest (in planning.STEP_S steps) at which the product of the
metrics' PASS probabilities reaches the power: exact for independent metrics (axes, sensors),
on the safe side for the positively associated ones of one series (bias, std and RMS of the
same errors). bench/planning.py measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simconform.spec import LidarSpec, Spec
from simconform.verify import power as pw
from simconform.verify.planning import STEP_S, MetricPlan, Plan, plan_spec

PROBE_SWEEPS = 5  # lidar sweeps cast along the trajectory to count returns per sweep


def joint_power(metrics: list[MetricPlan], t: float) -> float:
    """P(every metric PASSes) at a run of t s, taken as the product."""
    return float(np.prod([m.power_at(t) for m in metrics]))


def run_length(metrics: list[MetricPlan], power: float) -> float | None:
    """Shortest length at which joint_power reaches `power`; None when a metric never
    becomes conclusive, or no length does."""
    if any(m.duration_s is None for m in metrics):
        return None
    k0 = max(1, round(max((m.duration_s or 0.0) for m in metrics) / STEP_S))
    need = pw.needed(lambda k: joint_power(metrics, k * STEP_S), power, n_min=k0)
    return None if need.n is None else round(need.n * STEP_S, 6)


@dataclass
class Auto:
    """What `--duration auto` chooses: `seconds`, the metrics no length makes conclusive,
    whether the trajectory's span cut the length short, and P(all the others PASS) there."""

    seconds: float
    stuck: list[MetricPlan]
    capped: bool
    power: float


def auto_length(plan: Plan, span_s: float) -> Auto:
    """The shortest length making every metric that can become conclusive do so with the
    plan's power, at most the trajectory's span."""
    ok = [m for m in plan.metrics if m.duration_s is not None]
    stuck = [m for m in plan.metrics if m.duration_s is None]
    # plan_inputs already searched the joint length when every metric can become conclusive
    t = plan.run_s if not stuck and plan.run_s is not None else run_length(ok, plan.power)
    capped = t is None or t > span_s + 1e-9
    seconds = span_s if capped else t
    return Auto(seconds, stuck, capped, joint_power(ok, seconds))


def lidar_returns(spec: Spec, world, motion, start_ns: int, end_ns: int) -> dict[str, float]:
    """Mean true returns per sweep of each lidar, cast by the reference backend at
    PROBE_SWEEPS instants spread over the run's span (the world decides how many rays hit)."""
    from simconform.adapters.reference import ReferenceBackend

    lidars = [n for n, s in spec.sensors.items() if isinstance(s, LidarSpec)]
    if not lidars:
        return {}
    backend = ReferenceBackend()
    backend.open(world, spec)
    try:
        times = np.linspace(start_ns, max(end_ns - 1, start_ns), PROBE_SWEEPS).astype(np.int64)
        hits = {n: [backend.capture(n, int(t), motion).ranges for t in times] for n in lidars}
    finally:
        backend.close()
    return {n: float(np.mean([np.isfinite(r).sum() for r in rs])) for n, rs in hits.items()}


def plan_inputs(spec: Spec, world, motion, level: float, power: float) -> Plan:
    """The plan for a run of `spec` in `world` along `motion` (its whole span): lidar returns
    counted by casting there; `run_s` every metric at once, if within the span."""
    start_ns, end_ns = motion.start_ns, motion.end_ns
    returns = lidar_returns(spec, world, motion, start_ns, end_ns)
    plan = plan_spec(spec, level, power, returns)
    t = run_length(plan.metrics, power)
    plan.run_s = t if t is not None and t <= (end_ns - start_ns) / 1e9 + 1e-9 else None
    for name, r in returns.items():
        plan.notes.append(
            f"{name}: {r:.0f} true returns per sweep (mean of {PROBE_SWEEPS} sweeps cast "
            "along the trajectory)"
        )
    return plan

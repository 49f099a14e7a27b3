"""Is a run of the planned length conclusive at the stated power? (issue 18, item 1)

Plans the spec (verify/runlength.py plan_inputs: every metric at once, power --power), then
runs a seed campaign (`simconform campaign`, reference backend, demo world) at each fraction of
that length given by --fractions, and compares, per run length:

- the share of runs whose every metric PASSes with the plan's P(all PASS) (a product, meant
  to be exact or on the safe side), with a Clopper-Pearson 95 % interval;
- per metric, the share of runs where it PASSes with its planned P(PASS) at that length:
  the calibration of each closed form on real runs (the metrics whose share lies outside the
  binomial 99.9 % range of their prediction are listed).

    python bench/planning.py --seeds 40 --fractions 0.5,1 --jobs 2 --out runs/planning
    python bench/planning.py --spec sensors_spec/rover_core.yaml --seeds 10 --fractions 1

The default spec is tests/data/planning/spec.yaml (lidar, IMU, GNSS, odometry with wide
tolerances: a planned run of seconds). Cells stay in --out, so a rerun resumes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scipy.stats import binom, binomtest
from seed_campaign import ROOT, write_campaign  # bench/seed_campaign.py

from simconform.campaign import run_campaign
from simconform.run import RunConfig, load_inputs
from simconform.verify.runlength import joint_power, plan_inputs

SPEC = ROOT / "tests" / "data" / "planning" / "spec.yaml"


def tally(out: Path, plan, length: float) -> dict:
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("cells/*/report/report.json"))]
    runs = len(reports)
    passed = sum(r["verdict"] == "pass" for r in reports)
    ci = binomtest(passed, runs).proportion_ci(0.95, method="exact") if runs else None
    rows, off = [], []
    for m in plan.metrics:
        got = [r["sensors"][m.sensor]["metrics"].get(m.metric, {}).get("verdict") for r in reports]
        k = sum(v == "pass" for v in got)
        p = m.power_at(length)
        q = min(max(p, 1e-12), 1 - 1e-12)  # binom.ppf is NaN at p = 0 and 1
        lo, hi = binom.ppf(0.0005, runs, q), binom.ppf(0.9995, runs, q)
        rows.append({"metric": f"{m.sensor}.{m.metric}", "predicted": p, "passed": k})
        if not lo <= k <= hi:
            off.append(f"{m.sensor}.{m.metric}: {k}/{runs} passed, predicted {p:.3f}")
    mid = [r for r in rows if 0.05 < r["predicted"] < 0.95]
    return {
        "length_s": length,
        "runs": runs,
        "all_pass_runs": passed,
        "all_pass_ci95": [ci.low, ci.high] if ci else None,
        "predicted_all_pass": joint_power(plan.metrics, length),
        "metrics_in_between": len(mid),
        "mean_predicted_in_between": sum(r["predicted"] for r in mid) / len(mid) if mid else None,
        "mean_passed_in_between": sum(r["passed"] for r in mid) / runs / len(mid) if mid else None,
        "outside_99_9": off,
        "metrics": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=SPEC)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--start", type=int, default=2000)
    ap.add_argument("--fractions", default="0.5,1")
    ap.add_argument("--power", type=float, default=0.8)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("runs/planning"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    inp = load_inputs(RunConfig(spec=args.spec))
    plan = plan_inputs(inp.spec, inp.world, inp.trajectory, 0.95, args.power)
    if plan.run_s is None:
        raise SystemExit("the plan has no length making every metric conclusive")
    results = []
    for frac in (float(f) for f in args.fractions.split(",")):
        length = round(plan.run_s * frac, 1)
        out = args.out / f"x{frac:g}"
        folder = args.out / f"x{frac:g}_yaml"
        file = write_campaign(folder, "planning", args.spec, args.seeds, args.start, length)
        run_campaign(file, out, jobs=args.jobs, progress=False)
        results.append(tally(out, plan, length))
    if args.json:
        print(json.dumps({"planned_s": plan.run_s, "results": results}, indent=2))
        return
    print(f"{args.spec}: planned {plan.run_s:g} s for every metric at power {args.power:g}")
    for r in results:
        lo, hi = r["all_pass_ci95"]
        mid = (
            f"the {r['metrics_in_between']} metrics with a planned P(PASS) in (0.05, 0.95): "
            f"mean planned {r['mean_predicted_in_between']:.3f}, passed "
            f"{r['mean_passed_in_between']:.3f}"
            if r["metrics_in_between"]
            else "every metric's planned P(PASS) outside (0.05, 0.95)"
        )
        print(
            f"  {r['length_s']:g} s: {r['all_pass_runs']}/{r['runs']} runs PASS every metric "
            f"(95 % CI [{lo:.2f}, {hi:.2f}]; plan {r['predicted_all_pass']:.2f}); {mid}"
        )
        for line in r["outside_99_9"]:
            print(f"    outside the binomial 99.9 % range: {line}")


if __name__ == "__main__":
    main()

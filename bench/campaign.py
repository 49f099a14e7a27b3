"""Campaign throughput: cells per minute with 1 and 2 workers, on the local pool and on Ray.

Every configuration runs the same small campaign from scratch into a fresh folder: rover.yaml's
lidar alone at 16 x 90 on the demo world, reference backend, `--cells` seeds of `--duration` s.
Wall time is end to end, as a user sees it: worker start-up (spawned pool processes, or
ray.init(num_cpus=jobs) plus Ray's workers), every run and verification, and the campaign
report with its plots. Ray rows are skipped when Ray is not installed.

    python bench/campaign.py [--cells 12] [--duration 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

from simconform.campaign import run_campaign
from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD


def write_campaign(folder: Path, cells: int, duration: float) -> Path:
    lidar = yaml.safe_load(DEMO_SPEC.read_text())["sensors"]["lidar"]
    lidar.update(columns=90, rings={"count": 16, "fov_deg": [-15.0, 15.0]})
    (folder / "lidar.yaml").write_text(
        yaml.safe_dump({"name": "bench", "sensors": {"lidar": lidar}}, sort_keys=False)
    )
    campaign = {
        "name": "bench",
        "spec": "lidar.yaml",
        "seeds": {"start": 1, "count": cells},
        "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}],
        "duration": duration,
    }
    path = folder / "campaign.yaml"
    path.write_text(yaml.safe_dump(campaign, sort_keys=False))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=12)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import ray  # noqa: F401

        executors = ("local", "ray")
    except ImportError:
        executors = ("local",)
        print("ray is not installed: local rows only", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="simconform-bench-") as tmp:
        file = write_campaign(Path(tmp), args.cells, args.duration)
        for executor in executors:
            for jobs in (1, 2):
                out = Path(tmp) / f"{executor}-{jobs}"
                t0 = time.perf_counter()
                report = run_campaign(file, out, jobs=jobs, executor=executor, progress=False)
                wall = time.perf_counter() - t0
                ran = report["totals"]["cells"] - report["totals"]["resumed"]
                rows.append(
                    {
                        "executor": executor,
                        "jobs": jobs,
                        "cells": ran,
                        "wall_s": round(wall, 2),
                        "cells_per_min": round(60 * ran / wall, 1),
                        "verdict": report["verdict"],
                    }
                )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"campaign: {args.cells} cells, lidar 16x90, {args.duration:g} s each, reference backend")
    print(f"{'executor':<9} {'jobs':>4} {'cells':>5} {'wall s':>7} {'cells/min':>9}  speed-up")
    base: dict[str, float] = {}
    for r in rows:
        base.setdefault(r["executor"], r["cells_per_min"])
        up = r["cells_per_min"] / base[r["executor"]]
        print(
            f"{r['executor']:<9} {r['jobs']:>4} {r['cells']:>5} {r['wall_s']:>7.1f} "
            f"{r['cells_per_min']:>9.1f}  {up:.2f}x"
        )


if __name__ == "__main__":  # the local pool spawns workers that import this module
    main()

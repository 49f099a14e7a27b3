"""Gazebo backend: wall time per simulated second against the gz-sim server's own CPU time.

The peer is the server itself, measured in the same process: `os.times()` counts the CPU time
of waited-for children, and the backend waits for its `gz sim` server when it closes, so the
difference of `children_user + children_system` around a run is the server's CPU (physics,
sensors, the render thread, the drive system). Start-up (loading ogre2, the warm-up second) is
taken out by running two durations and dividing the differences: marginal wall seconds and
marginal server CPU seconds per simulated second. A ratio near 1 means simconform's side
(stepping round trips, decoding, the pipeline, the bag) hides behind the server; the target is
<= 1.2. `--block-ms 0` makes one multi_step request per capture event (how the backend
stepped before), for comparison.

    . ../shared/gazebo/env.sh
    python bench/gazebo.py [--spec sensors_spec/rover_core.yaml] [--short 2] [--long 7]
                           [--block-ms 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from simconform.adapters.gazebo import backend as gz_backend
from simconform.demo import DEMO_SPEC
from simconform.run import RunConfig, run


def one_run(spec: Path, duration: float, out: Path) -> tuple[float, float, float]:
    """(wall s, server CPU s, this process's CPU s) of one gazebo run."""
    t0, w0 = os.times(), time.perf_counter()
    result = run(
        RunConfig(spec=spec, backend="gazebo", duration=duration, out=out, jobs=0),
        progress=False,
    )
    w1, t1 = time.perf_counter(), os.times()
    if not result.complete:
        raise SystemExit(f"the {duration:g} s run did not complete")
    server = (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)
    own = (t1.user - t0.user) + (t1.system - t0.system)
    return w1 - w0, server, own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", type=Path, default=DEMO_SPEC.parent / "rover_core.yaml")
    ap.add_argument("--short", type=float, default=2.0)
    ap.add_argument("--long", type=float, default=7.0)
    ap.add_argument(
        "--block-ms", type=float, default=None,
        help="simulation time per multi_step request (default: the backend's, 1000 ms; "
        "0: one request per capture event, the old way)",
    )  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.block_ms is not None:
        gz_backend.BLOCK_NS = int(args.block_ms * 1e6)
    with tempfile.TemporaryDirectory(prefix="simconform_bench_gz_") as tmp:
        a = one_run(args.spec, args.short, Path(tmp) / "short")
        b = one_run(args.spec, args.long, Path(tmp) / "long")
    span = args.long - args.short
    wall, server, own = ((y - x) / span for x, y in zip(a, b))
    row = {
        "spec": str(args.spec),
        "block_ms": gz_backend.BLOCK_NS / 1e6,
        "wall_s_per_sim_s": wall,
        "server_cpu_s_per_sim_s": server,
        "simconform_cpu_s_per_sim_s": own,
        "wall_over_server_cpu": wall / server if server > 0 else None,
        "runs": {"short": a, "long": b},
    }
    if args.json:
        json.dump(row, sys.stdout, indent=2)
        print()
        return
    print(
        f"{args.spec.name}, block {row['block_ms']:g} ms: {wall:.2f} wall-s, server "
        f"{server:.2f} CPU-s, simconform {own:.2f} CPU-s per simulated second; "
        f"wall / server CPU = {row['wall_over_server_cpu']:.2f} (target <= 1.2)"
    )


if __name__ == "__main__":
    main()

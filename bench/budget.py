"""The resource estimate against measured runs: peak memory and bytes written, per configuration.

Each row runs `simconform run --jobs 0` (in-process rendering, so one process holds all the
memory) in a subprocess on the demo world and reads its peak RSS from wait4 and the size of its
run folder; the estimate is simconform.budget.estimate for the same spec and length. With
`--demo`, also the full 200 s demo (rover.yaml, the default --jobs, so capture workers and
verify's camera process): its peak is the processes' summed PSS, polled from /proc every
0.2 s (PSS shares the pages the workers have in common with their fork server among them,
which summed RSS would count once per process).

    python bench/budget.py [--demo] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from simconform.budget import estimate, fmt_bytes
from simconform.cli.run import default_jobs
from simconform.demo import DEMO_SPEC
from simconform.spec import Spec


def lidar_spec(rings: int, columns: int) -> dict:
    demo = yaml.safe_load(DEMO_SPEC.read_text())["sensors"]
    lidar = dict(demo["lidar"], columns=columns, rings={"count": rings, "fov_deg": [-15, 15]})
    return {"name": "bench", "sensors": {"lidar": lidar, "imu": demo["imu"]}}


def camera_spec(width: int, height: int) -> dict:
    demo = yaml.safe_load(DEMO_SPEC.read_text())["sensors"]
    camera = dict(demo["camera"], width=width, height=height)
    return {"name": "bench", "sensors": {"camera": camera}}


CASES = [
    ("lidar 16 x 360 + IMU, 20 s", lidar_spec(16, 360), 20.0),
    ("lidar 64 x 2048 + IMU, 2 s", lidar_spec(64, 2048), 2.0),
    ("lidar 128 x 4096 + IMU, 2 s", lidar_spec(128, 4096), 2.0),
    ("camera 1280 x 960, 2 s", camera_spec(1280, 960), 2.0),
]


def _tree_pss(pid: int) -> int:
    """Summed PSS of `pid` and every process below it (bytes)."""
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
    tree, grew = {pid}, True
    while grew:
        more = {k for k, v in parent.items() if v in tree} - tree
        tree |= more
        grew = bool(more)
    total = 0
    for k in tree:
        try:
            for line in Path(f"/proc/{k}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def measure(folder: Path, spec: dict | None, duration: float | None, jobs: int | None) -> dict:
    args = ["run", "--out", str(folder / "run")]
    if jobs is not None:
        args += ["--jobs", str(jobs)]
    if spec is not None:
        (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        args += ["--spec", str(folder / "spec.yaml")]
    if duration is not None:
        args += ["--duration", str(duration)]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform", *args],  # the `simconform` command's entry
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    tree = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            break
        tree = max(tree, _tree_pss(proc.pid))
        time.sleep(0.2)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"simconform run failed: {proc.stderr.read().decode()[-500:]}")
    peak = usage.ru_maxrss * 1024  # this process alone; `tree` adds its workers (PSS)
    written = sum(p.stat().st_size for p in (folder / "run").rglob("*") if p.is_file())
    return {"peak": max(peak, tree), "written": written, "wall_s": time.monotonic() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", action="store_true", help="also the full 200 s demo")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    cases = [(n, s, d, 0) for n, s, d in CASES]
    if args.demo:
        name = f"full demo (rover.yaml, 200 s, default --jobs: {default_jobs()})"
        cases.append((name, None, None, None))
    for name, spec, duration, jobs in cases:
        model = Spec.model_validate(spec or yaml.safe_load(DEMO_SPEC.read_text()))
        length = int((duration or 200.0) * 1e9)
        n = default_jobs() if jobs is None else jobs
        est = estimate(model, 0, length, n, jobs=n)  # --jobs bounds verify's readers too
        with tempfile.TemporaryDirectory(prefix="simconform-bench-") as tmp:
            got = measure(Path(tmp), spec, duration, jobs)
        rows.append(
            {
                "case": name,
                "memory_estimate": est.memory_bytes,
                "peak_bytes": got["peak"],
                "disk_estimate": est.disk_bytes,
                "written": got["written"],
                "wall_s": round(got["wall_s"], 1),
            }
        )
        r = rows[-1]
        if not args.json:
            mem_x = r["memory_estimate"] / r["peak_bytes"]
            print(
                f"{name}: memory {fmt_bytes(r['memory_estimate'])} estimated, "
                f"{fmt_bytes(r['peak_bytes'])} measured ({mem_x:.2f} x); "
                f"disk {fmt_bytes(r['disk_estimate'])} estimated, {fmt_bytes(r['written'])} "
                f"written ({r['disk_estimate'] / r['written']:.2f} x); {r['wall_s']} s",
                flush=True,
            )
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""The default demo (`simconform run`, no input flags) end to end, with --jobs 1 and --jobs 2.

Runs `simconform run --jobs J --out DIR` (the interpreter's `simconform` script) as a
subprocess for each J, alternating (J1, J2, J1, J2, ...) so that a shared machine's load falls
on both alike, and prints per run: wall seconds
of the whole command (recording + verification), the recording's wall (run.json wall_s), the
CPU seconds of every process of the run (the CLI and its capture workers, read from /proc
while they live), the real-time factor (simulated seconds / wall seconds) and the verdict;
then the best wall of each J, the ratio jobs1/jobs2, and the most that ratio could be on this
machine's CPUs (no run is shorter than its CPU-s over the CPUs). Say the load (`uptime`) with the
figures: on a busy machine they measure the machine as much as the run.

With `--baseline PYTHON` (the interpreter of a venv holding an older simconform, e.g. a
`git worktree` of an earlier commit installed with `pip install --no-deps -e`), each run of
this code is followed by the same run with that one, so that both meet the same load; the
best of each and their ratio are printed. The host's speed moved by 1.8x between days: only
runs made side by side compare.

    python bench/demo.py [--duration SECONDS] [--repeats 1] [--jobs 1 2] [--keep DIR]
                         [--baseline PYTHON]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _session_cpu(sid: int, seen: dict[int, float]) -> None:
    """CPU seconds so far of every live process in session `sid`, kept per pid (max seen)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid:
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            seen[int(entry)] = max(cpu, seen.get(int(entry), 0.0))


def run_once(jobs: int, duration: float | None, out: Path, python: str = sys.executable) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    # the `simconform` command of that interpreter's install, as users run it (its first
    # step starts the capture workers' fork server: simconform/launch.py)
    script = Path(python).parent / "simconform"
    entry = [str(script)] if script.exists() else [python, "-m", "simconform.cli"]
    cmd = [*entry, "run", "--out", str(out), "--jobs", str(jobs)]
    cmd += ["--no-progress", "--quiet"] + (
        [] if duration is None else ["--duration", f"{duration}"]
    )
    t0 = time.monotonic()
    # outside any checkout: `-m` (no script) puts the working folder first on sys.path, where
    # a checkout's simconform/ would shadow the interpreter's own install
    proc = subprocess.Popen(cmd, start_new_session=True, cwd=out.parent)
    seen: dict[int, float] = {}
    while proc.poll() is None:
        _session_cpu(proc.pid, seen)
        time.sleep(0.1)
    wall = time.monotonic() - t0
    manifest = json.loads((out / "run.json").read_text())
    report = json.loads((out / "report" / "report.json").read_text())
    sim = (manifest["end_ns"] - manifest["start_ns"]) / 1e9
    return {
        "code": "this" if python == sys.executable else "baseline",
        "jobs": jobs,
        "rc": proc.returncode,
        "wall_s": wall,
        "record_s": manifest["wall_s"],
        "cpu_s": sum(seen.values()),
        "rtf": sim / wall,
        "verdict": report["verdict"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=None, help="default: the whole demo")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--keep", type=Path, default=None, help="leave the run folders here")
    ap.add_argument("--baseline", default=None, help="a Python whose simconform to compare")
    args = ap.parse_args()
    pythons = [sys.executable] + ([args.baseline] if args.baseline else [])
    root = args.keep or Path(tempfile.mkdtemp(prefix="simconform-bench-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, cpus: {os.cpu_count()}")
    rows = []
    try:
        for rep in range(args.repeats):
            for jobs, (k, py) in ((j, p) for j in args.jobs for p in enumerate(pythons)):
                r = run_once(jobs, args.duration, root / f"j{jobs}-{rep}-{k}", py)
                rows.append(r)
                print(
                    f"{r['code']:8} --jobs {jobs}: wall {r['wall_s']:6.1f} s"
                    f" (recording {r['record_s']:6.1f} s)"
                    f"  cpu {r['cpu_s']:6.1f} s  real-time factor {r['rtf']:5.2f}"
                    f"  verdict {r['verdict']}  rc {r['rc']}  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.baseline:
        for j in args.jobs:
            b = {c: min(r["wall_s"] for r in rows if r["jobs"] == j and r["code"] == c)
                 for c in ("this", "baseline")}  # fmt: skip
            print(
                f"best --jobs {j}: this {b['this']:.1f} s, baseline {b['baseline']:.1f} s "
                f"(this / baseline {b['this'] / b['baseline']:.2f})"
            )
    rows = [r for r in rows if r["code"] == "this"]
    best = {j: min(r["wall_s"] for r in rows if r["jobs"] == j) for j in args.jobs}
    rec = {j: min(r["record_s"] for r in rows if r["jobs"] == j) for j in args.jobs}
    for j in args.jobs:
        print(f"best --jobs {j}: wall {best[j]:.1f} s, recording {rec[j]:.1f} s")
    if 1 in best and 2 in best:
        print(
            f"jobs2/jobs1 speed-up: {best[1] / best[2]:.2f}x whole command, "
            f"{rec[1] / rec[2]:.2f}x recording"
        )
        # no run is shorter than its CPU spread over every CPU: that bounds what --jobs 2
        # can gain over --jobs 1's best (on 2 CPUs --jobs 1 already keeps both busy)
        cpus = len(os.sched_getaffinity(0))
        fastest = min((r for r in rows if r["jobs"] == 2), key=lambda r: r["wall_s"])
        print(
            f"the most --jobs 2 could give on {cpus} CPUs: {best[1] * cpus / fastest['cpu_s']:.2f}x"
            f" (--jobs 1's best wall over the best --jobs 2 run's {fastest['cpu_s']:.1f} CPU-s"
            f" / {cpus})"
        )


if __name__ == "__main__":
    main()

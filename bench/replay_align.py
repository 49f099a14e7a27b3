"""Replay time alignment over seeds and offsets: the estimate, its interval's coverage, and the
lidar's range_std verdict with and without compensation.

Each case writes a foreign bag with the independent "foreign simulator" of tests/test_replay.py
(1 kHz trajectory, 8 x 180 rolling-shutter lidar, sigma 0.03 m, 10 % point dropout, 100 Hz tf
ground truth) whose pose stream is stamped LATE ms late, replays it with alignment (default)
and with --no-align, and verifies both.

    python bench/replay_align.py [--seeds 10] [--late 0 0.5 1 2 5 12] [--no-raw] [--json]
    python bench/replay_align.py --coverage --seeds 60 --late 1   # the interval's coverage

The estimate's error does not depend on the offset (the model is linear and each seed's
noise is the same at every offset), so the interval's coverage is measured over seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import test_align as ta  # noqa: E402

from simconform.adapters.replay import ReplayConfig, replay  # noqa: E402
from simconform.verify.verifier import verify_run  # noqa: E402


def case(tmp: Path, late: float, seed: int, raw: bool = True) -> dict:
    bag, mp = ta.foreign_bag(tmp, late, seed=seed)
    out = {"raw": {"range_std": {"measured": float("nan"), "verdict": "-"}}}
    for name, on in (("aligned", True), ("raw", False))[: 2 if raw else 1]:
        replay(ReplayConfig(bag=bag, map=mp, out=tmp / name, align=on))
        rep = verify_run(tmp / name, write=False)
        out[name] = rep["sensors"]["lidar"]["metrics"]
    a = json.loads((tmp / "aligned" / "run.json").read_text())["replay"]["alignment"]["lidar"]
    lo, hi = a["ci_ms"]
    return {
        "late_ms": late,
        "seed": seed,
        "estimate_ms": a["offset_ms"],
        "ci_ms": [lo, hi],
        "covered": lo <= late <= hi,
        "offset_verdict": out["aligned"]["time_offset_ms"]["verdict"],
        "range_std_aligned": out["aligned"]["range_std"]["measured"],
        "verdict_aligned": out["aligned"]["range_std"]["verdict"],
        "range_std_raw": out["raw"]["range_std"]["measured"],
        "verdict_raw": out["raw"]["range_std"]["verdict"],
    }


def estimate_only(tmp: Path, late: float, seed: int) -> dict:
    """Scan and align only (no run folder, no verify): the estimate and its interval."""
    from simconform.adapters.replay.align import align
    from simconform.adapters.replay.map import load_map
    from simconform.adapters.replay.write import Replay
    from simconform.bag.reader import SourceBag
    from simconform.spec import load_spec
    from simconform.world import load_world

    bag, mp = ta.foreign_bag(tmp, late, seed=seed)
    m = load_map(mp)
    src = SourceBag(bag)
    try:
        job = Replay(
            ReplayConfig(bag=bag, map=mp, out=tmp / "x"),
            m,
            load_spec(m.path_of("spec")),
            load_world(m.path_of("world")),
            m.path_of("spec"),
            m.path_of("world"),
            src,
        )
        job.scan()
        a = align(job, "auto", {})["lidar"]
    finally:
        src.close()
    lo, hi = a["ci_ms"]
    return {"late_ms": late, "seed": seed, "estimate_ms": a["offset_ms"], "ci_ms": [lo, hi]}


def coverage(seeds: int, late: float) -> None:
    errs, cov, width = [], 0, []
    for seed in range(100, 100 + seeds):
        with tempfile.TemporaryDirectory() as tmp:
            r = estimate_only(Path(tmp), late, seed)
        lo, hi = r["ci_ms"]
        errs.append(r["estimate_ms"] - late)
        cov += lo <= late <= hi
        width.append(hi - lo)
        print(f"seed {seed}: error {errs[-1]:+.3f} ms, interval [{lo:+.3f}, {hi:+.3f}]", flush=True)
    e = np.array(errs)
    print(
        f"late {late:g} ms, {seeds} seeds: interval covers {cov}/{seeds}; error mean "
        f"{e.mean():+.3f} ms, sd {e.std(ddof=1):.3f} ms; mean half-width "
        f"{np.mean(width) / 2:.3f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--late", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0, 5.0, 12.0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-raw", action="store_true", help="skip the --no-align replays")
    ap.add_argument(
        "--coverage", action="store_true", help="estimate only, over seeds, at the first --late"
    )
    args = ap.parse_args()
    if args.coverage:
        coverage(args.seeds, args.late[0])
        return
    rows = []
    for late in args.late:
        for seed in range(100, 100 + args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(case(Path(tmp), late, seed, not args.no_raw))
            r = rows[-1]
            if not args.json:
                print(
                    f"late {late:5.2f} ms seed {seed}: estimate {r['estimate_ms']:+.3f} "
                    f"[{r['ci_ms'][0]:+.3f}, {r['ci_ms'][1]:+.3f}] offset {r['offset_verdict']}; "
                    f"range_std {r['range_std_aligned']:.4f} {r['verdict_aligned']} aligned, "
                    f"{r['range_std_raw']:.4f} {r['verdict_raw']} raw",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    for late in args.late:
        sub = [r for r in rows if r["late_ms"] == late]
        cov = sum(r["covered"] for r in sub)
        fa = sum(r["verdict_aligned"] == "fail" for r in sub)
        fr = sum(r["verdict_raw"] == "fail" for r in sub)
        print(
            f"late {late:g} ms: interval covers {cov}/{len(sub)}; range_std FAIL aligned "
            f"{fa}/{len(sub)}, raw {fr}/{len(sub)}"
        )


if __name__ == "__main__":
    main()

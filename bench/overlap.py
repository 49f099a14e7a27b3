"""Would verifying while recording shorten the demo? Recording alone, then beside a verify.

`simconform run` records the bag, then verifies it. Verifying as the bag is written (a
verifier tailing the file) would run the two phases at once; this measures what that could
give on this machine before anyone builds it: it records the default demo (`--jobs J`, no
verification: simconform.run.run) alone, then again while `simconform verify RUN` judges an
existing demo run in a second process, and prints both walls. On a machine whose cores the
recording already fills, the second wall is about recording + verification: overlapping
gains nothing there, and only less CPU makes the demo shorter. Say the load (`uptime`).

    python bench/overlap.py RUN [--jobs 2]     # RUN: a finished demo run (simconform run)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORD = """
import sys
from pathlib import Path
from simconform.run import RunConfig, run
run(RunConfig(out=Path(sys.argv[1]), jobs=int(sys.argv[2])), progress=False)
"""


def record(out: Path, jobs: int) -> subprocess.Popen:
    shutil.rmtree(out, ignore_errors=True)
    return subprocess.Popen([sys.executable, "-c", RECORD, str(out), str(jobs)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a finished demo run to verify beside the recording")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if not (args.run / "run.json").is_file():
        sys.exit(f"{args.run}: not a run folder (no run.json); make one with simconform run")
    print(f"load: {os.getloadavg()[0]:.2f}, cpus: {len(os.sched_getaffinity(0))}")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        record(Path(tmp) / "alone", args.jobs).wait()
        alone = time.monotonic() - t0
        t0 = time.monotonic()
        rec = record(Path(tmp) / "beside", args.jobs)
        cmd = [sys.executable, "-m", "simconform.cli", "verify", str(args.run), "--quiet"]
        verify = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
        verified = time.monotonic() - t0
        rec.wait()
        both = time.monotonic() - t0
    t0 = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
    verify_alone = time.monotonic() - t0
    print(f"recording alone (--jobs {args.jobs}): {alone:.1f} s")
    print(f"verify alone: {verify_alone:.1f} s (exit {verify.returncode} beside the recording)")
    print(f"one after the other: {alone + verify_alone:.1f} s")
    print(f"at once: {both:.1f} s (the verify ended at {verified:.1f} s)")


if __name__ == "__main__":
    main()

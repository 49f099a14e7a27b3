"""Record the Gazebo fixture in tests/data/gazebo/: a short real gz-sim 8 run, so that decoding
and `simconform compare` are tested on real engine output on machines without Gazebo.

Writes, from the repository root (needs Gazebo: `. ../shared/gazebo/env.sh`):

- tests/data/gazebo/run/: `simconform run --backend gazebo` of tests/data/gazebo/spec.yaml
  (the rover's lidar, IMU, GNSS, odometry and a 160 x 120 camera with depth) on the demo world
  for FIXTURE_S seconds, seed FIXTURE_SEED. run.json's input paths are made relative to the
  repository root, so the tests find the same world and trajectory files (their SHA-256 is
  checked) in any clone;
- tests/data/gazebo/wire.npz: every gz.msgs10 message the backend received, as the wire bytes
  gz-transport delivered (`topic|stamp_ns` -> bytes), for decode.py's tests.

    python tests/data/record_gazebo_fixture.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from simconform.adapters.gazebo import transport
from simconform.run import RunConfig, run

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "tests" / "data" / "gazebo"
FIXTURE_S = 2.0
FIXTURE_SEED = 1234


def main() -> None:
    wire: dict[str, bytes] = {}
    wait_for = transport.GzSession.wait_for

    def recording_wait_for(self, topic, stamp_ns, timeout_s=30.0):  # every message consumed
        raw = wait_for(self, topic, stamp_ns, timeout_s)
        wire[f"{topic}|{stamp_ns}"] = raw
        return raw

    transport.GzSession.wait_for = recording_wait_for
    out = HERE / "run"
    if out.exists():
        shutil.rmtree(out)
    result = run(
        RunConfig(
            spec=HERE / "spec.yaml",
            backend="gazebo",
            duration=FIXTURE_S,
            seed=FIXTURE_SEED,
            out=out,
            jobs=0,
        ),
        progress=False,
    )
    if not result.complete:
        raise SystemExit("the fixture run did not complete")
    shutil.rmtree(out / "report", ignore_errors=True)
    manifest = json.loads((out / "run.json").read_text())
    for key in ("spec", "world", "trajectory"):
        manifest[key] = str(Path(manifest[key]).resolve().relative_to(REPO))
    (out / "run.json").write_text(json.dumps(manifest, indent=2) + "\n")
    np.savez_compressed(
        HERE / "wire.npz", **{k: np.frombuffer(v, np.uint8) for k, v in wire.items()}
    )
    size = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"fixture: {len(wire)} wire messages, {size / 1e6:.2f} MB in {HERE}")


if __name__ == "__main__":
    main()

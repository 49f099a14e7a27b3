"""Regenerate worlds/demo.tum: two laps of a 200 s loop with turns, over the demo world's ramp.

The path is given as 2D waypoints (t x y) at 50 Hz and put on the ground by simconform itself
(heading from the tangent, z and pitch from the world), exactly as a waypoint file would be.
Run: python worlds/make_demo_trajectory.py
"""

from pathlib import Path

import numpy as np

from simconform.trajectory import waypoints_to_trajectory
from simconform.world import load_world

HERE = Path(__file__).resolve().parent
DURATION_S, RATE_HZ, LAPS = 200, 50, 2


def main() -> None:
    world = load_world(HERE / "demo.yaml")
    t_ns = np.arange(DURATION_S * RATE_HZ + 1, dtype=np.int64) * (1_000_000_000 // RATE_HZ)
    th = 2 * np.pi * LAPS * t_ns / (DURATION_S * 1e9)
    x = 30 * np.cos(th)
    y = 18 * np.sin(th) + 4 * np.sin(3 * th)
    traj = waypoints_to_trajectory(HERE / "demo.tum", t_ns, x, y, world)
    traj.write_tum(HERE / "demo.tum")
    print(
        f"wrote {HERE / 'demo.tum'}: {len(traj)} poses, z in "
        f"[{traj.positions[:, 2].min():.3f}, {traj.positions[:, 2].max():.3f}] m"
    )


if __name__ == "__main__":
    main()

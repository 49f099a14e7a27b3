"""Regenerate worlds/demo.tum: two laps of a 200 s loop with turns, over the demo world's ramp.

The path is given in 2D (x, y at 50 Hz); the vehicle on it is a rigid body on two axles
WHEELBASE_M apart, each resting on the ground averaged over a tyre contact patch CONTACT_M
long. Its height is the mean of the axles' and its pitch their slope, so where the ground's
slope changes (the ramp's edges) the vehicle pitches over the time it takes to roll one
wheelbase, as a real one does, instead of within one 20 ms waypoint step: the ground is only
C0 there, the contact patch makes each axle's height C1. Heading is the path's tangent, roll 0.

(`simconform.trajectory.waypoints_to_trajectory`, for users' `t x y` files, puts a point on
the ground instead: the body's origin at the ground under it, pitch from the ground's slope
along the path.)

Run: python worlds/make_demo_trajectory.py
"""

from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.raycast import Scene
from simconform.trajectory import Trajectory
from simconform.world import load_world

HERE = Path(__file__).resolve().parent
DURATION_S, RATE_HZ, LAPS = 200, 50, 2
WHEELBASE_M = 1.0
CONTACT_M = 0.3
CONTACT_SAMPLES = 31


def axle_height(scene: Scene, x, y, yaw, offset: float) -> np.ndarray:
    """Ground height under an axle `offset` metres ahead of the body's origin, averaged over
    the tyre's contact patch along the heading."""
    s = offset + np.linspace(-CONTACT_M / 2, CONTACT_M / 2, CONTACT_SAMPLES)
    px = x[:, None] + s[None, :] * np.cos(yaw)[:, None]
    py = y[:, None] + s[None, :] * np.sin(yaw)[:, None]
    z = scene.ground_height(px, py)
    if not np.isfinite(z).all():
        raise SystemExit("the demo path leaves the ground")
    return z.mean(axis=1)


def main() -> None:
    world = load_world(HERE / "demo.yaml")
    scene = Scene(world)
    t_ns = np.arange(DURATION_S * RATE_HZ + 1, dtype=np.int64) * (1_000_000_000 // RATE_HZ)
    th = 2 * np.pi * LAPS * t_ns / (DURATION_S * 1e9)
    x = 30 * np.cos(th)
    y = 18 * np.sin(th) + 4 * np.sin(3 * th)
    yaw = np.arctan2(np.gradient(y), np.gradient(x))
    front = axle_height(scene, x, y, yaw, WHEELBASE_M / 2)
    rear = axle_height(scene, x, y, yaw, -WHEELBASE_M / 2)
    z = 0.5 * (front + rear)
    pitch = -np.arctan2(front - rear, WHEELBASE_M)  # nose up is negative pitch (REP 103)
    rot = Rotation.from_euler("ZYX", np.c_[yaw, pitch, np.zeros_like(yaw)])
    traj = Trajectory(t_ns, np.c_[x, y, z], rot)
    traj.write_tum(HERE / "demo.tum")
    print(
        f"wrote {HERE / 'demo.tum'}: {len(traj)} poses, z in "
        f"[{traj.positions[:, 2].min():.3f}, {traj.positions[:, 2].max():.3f}] m, pitch in "
        f"[{np.degrees(pitch.min()):.2f}, {np.degrees(pitch.max()):.2f}] deg"
    )


if __name__ == "__main__":
    main()

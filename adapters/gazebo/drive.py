"""The drive table: per physics step, the state and wrench that make Gazebo's vehicle follow the
prescribed trajectory with the trajectory's own accelerations (read by driver_system.py).

Simulation time is sim = t - T0 (backend.sim_offset_ns). Step k runs from t_s = T0 + (k-1) dt
to t_e = T0 + k dt. Its row holds a start pose, the linear and angular velocity at t_s and a
world wrench. For a rigid body of mass m and isotropic inertia I with gravity off (the exported
vehicle) and the engine's semi-implicit Euler step (dartsim's FreeJoint: v' = v + a dt,
omega' = omega + alpha dt, then R' = exp(omega' dt) R and p' = p + v' dt):

- angular: alpha = (omega(t_e) - omega(t_s)) / dt, torque I * alpha (the gyroscopic term
  omega x I omega vanishes for isotropic I), so the gyro reads omega(t_e);
- linear: at the IMU's mount r, a_mount(t_e) as the reference backend computes it (second
  difference of the mount's position, step = the IMU period); the force m * a_origin uses
  a_origin = a_mount - alpha x r_w - omega x (omega x r_w), the rigid-body lever arm the
  engine adds back when gz-sim reads the acceleration at the sensor's offset;
- the start pose is the one that this step carries exactly onto the trajectory's pose at t_e,
  so lidar, camera and GNSS see the trajectory's pose however sharp its corners (the default
  spline path is C2; with `--interpolation linear` its true rate jumps at every knot, unlike
  the smoothed IMU rates).

The state is set afresh every step, so nothing drifts. Before the trajectory starts (the
renderer's warm-up second) the vehicle holds the first pose at rest; after it ends, the last.
With several IMUs only the first one's mount is exact; the others see the O(h^2) difference
between the lever-arm formula and a second difference.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.adapters.base import Motion
from simconform.adapters.gazebo.driver_system import NCOL, TABLE_MAGIC
from simconform.adapters.kinematics import rates
from simconform.frames import Pose

CHUNK = 50_000  # steps per block, to bound memory on long runs


def _block(
    motion: Motion,
    t0_ns: int,
    k: np.ndarray,
    step_ns: int,
    h_ns: int,
    imu_mount: Pose | None,
    mass: float,
    inertia: float,
) -> np.ndarray:
    # k is consecutive: the n + 1 step boundaries serve as starts ([:-1]) and ends ([1:])
    t = t0_ns + np.arange(k[0] - 1, k[-1] + 1, dtype=np.int64) * step_ns
    lo, hi = motion.start_ns, motion.end_ns
    moving_s = ((t[:-1] >= lo) & (t[:-1] < hi))[:, None]
    moving_e = ((t[1:] >= lo) & (t[1:] <= hi))[:, None]
    t_in = np.clip(t, lo, hi)
    base = rates(motion, t_in, h_ns)
    w_world = base.world_rate()
    v_s = np.where(moving_s, base.velocity[:-1], 0.0)
    w_s = np.where(moving_s, w_world[:-1], 0.0)
    w_e = np.where(moving_e, w_world[1:], 0.0)
    alpha = (w_e - w_s) / (step_ns * 1e-9)
    here_e = base.here[1:]
    if imu_mount is None:
        a_origin = base.accel[1:]
    else:
        a_mount = rates(motion, t_in[1:], h_ns, imu_mount).accel
        r_w = here_e.rot.apply(imu_mount.t)
        a_origin = a_mount - np.cross(alpha, r_w) - np.cross(w_e, np.cross(w_e, r_w))
    a_origin = np.where(moving_e, a_origin, 0.0)
    # the start pose that one semi-implicit Euler step (v' = v + a dt, then p' = p + v' dt and
    # R' = exp(omega' dt) R) carries exactly onto the trajectory's pose at t_e
    dt = step_ns * 1e-9
    v_e = v_s + a_origin * dt
    start_rot = Rotation.from_rotvec(-w_e * dt) * here_e.rot
    q_xyzw = Pose(here_e.t, start_rot).quat()
    rows = np.zeros((len(k), NCOL))
    rows[:, 0:3] = here_e.t - v_e * dt
    rows[:, 3] = q_xyzw[:, 3]
    rows[:, 4:7] = q_xyzw[:, :3]
    rows[:, 7:10] = v_s
    rows[:, 10:13] = w_s
    rows[:, 13:16] = mass * a_origin
    rows[:, 16:19] = inertia * alpha
    return rows


def drive_rows(
    motion: Motion,
    t0_ns: int,
    first: int,
    last: int,
    step_ns: int,
    h_ns: int,
    imu_mount: Pose | None,
    publish_sim_ns: np.ndarray,
    mass: float,
    inertia: float,
) -> np.ndarray:
    """(last - first + 1, NCOL) rows for steps first..last (see the module doc); `publish` set
    where the step ends at one of publish_sim_ns."""
    out = np.empty((last - first + 1, NCOL))
    for lo in range(first, last + 1, CHUNK):
        k = np.arange(lo, min(lo + CHUNK, last + 1), dtype=np.int64)
        out[lo - first : lo - first + len(k)] = _block(
            motion, t0_ns, k, step_ns, h_ns, imu_mount, mass, inertia
        )
    ends = (np.arange(first, last + 1, dtype=np.int64)) * step_ns
    out[:, NCOL - 1] = np.isin(ends, np.asarray(publish_sim_ns, dtype=np.int64))
    return out


def table_header(step_ns: int) -> bytes:
    """The header row driver_system.DriveTable checks; rows follow as float64 LE."""
    header = np.zeros(NCOL)
    header[:3] = (TABLE_MAGIC, NCOL, step_ns)
    return header.astype("<f8").tobytes()


def rows_bytes(rows: np.ndarray) -> bytes:
    return np.ascontiguousarray(rows, dtype="<f8").tobytes()

"""A gz-sim 8 Python system that moves the simconform vehicle along its prescribed trajectory.

Loaded inside the `gz sim` server by gz-sim's PythonSystemLoader (a `<plugin
filename="gz-sim-python-system-loader-system">` on the vehicle model, `<module_name>` this
file's module, found on GZ_SIM_SYSTEM_PLUGIN_PATH). It needs only the standard library and
Gazebo's own Python bindings (gz.sim8, gz.math7, gz.transport13, gz.msgs10), never simconform
or numpy, because the server's embedded interpreter does not see simconform's environment.

Why not teleport: a body moved only by pose commands is at rest to the physics engine, so
Gazebo's IMU would read gravity alone. Instead, on every physics step k (sim time t_k -> t_k+1)
the table written by `drive.py` gives, in PreUpdate:

- the pose at t_k (`Model.set_world_pose_cmd`), the linear and angular velocity at t_k
  (`Link.set_linear_velocity` / `set_angular_velocity`, converted to the link frame with the
  orientation gz-sim uses for that conversion), so the state never drifts;
- a world wrench (`Link.add_world_wrench`, cleared by gz-sim after each step) whose force and
  torque make the physics engine's acceleration over the step the trajectory's.

gz-sim's Physics system applies the wrench, then the pose, then the velocities, and steps; the
IMU system then reads the engine's acceleration and angular velocity. In PostUpdate, at the
steps the table marks, the link's pose is published (gz.msgs.Pose, stamped with sim time) on
POSE_TOPIC: the backend checks the vehicle is where it should be, and reads odometry from it.

Actors (world.actors, moved models from sdf.py): in PreUpdate each one's model pose is set to
the actor's pose at the step's end time (linear between waypoints, as simconform/actors.py),
so a sensor rendering after the step sees it where the reference casts it.

Table file (little-endian float64, NCOL per row): a header row [TABLE_MAGIC, NCOL, step_ns,
0...], then one row per physics step, row k (1-based) for the step ending at k * step_ns.
"""

from __future__ import annotations

import array
import bisect
import json
import math
import os
import sys
from datetime import timedelta
from typing import Any

COLUMNS = (
    "px", "py", "pz", "qw", "qx", "qy", "qz",  # pose at the step's start (map frame)
    "vx", "vy", "vz", "wx", "wy", "wz",  # world linear (m/s) and angular (rad/s) velocity then
    "fx", "fy", "fz", "tx", "ty", "tz",  # world force (N) and torque (N m) over the step
    "publish",  # 1: publish the pose after this step
)  # fmt: skip
NCOL = len(COLUMNS)
TABLE_MAGIC = 7.0e7 + 20261202.0  # marks a simconform drive table, format 1
TABLE_ENV = "SIMCONFORM_GZ_DRIVE"
# JSON file of the world's actors: {"t_at_sim0_s": run time at sim 0, "actors": [{"model",
# "path": [[t, x, y, z, yaw], ...], "loop"}]}; absent: no actors
ACTORS_ENV = "SIMCONFORM_GZ_ACTORS"
POSE_TOPIC = "/simconform/vehicle/pose"
MODULE_NAME = "simconform_gz_driver"  # the name the backend copies this file to


class DriveTable:
    """Rows of a drive table file, read one step at a time with the standard library only.

    Reading by offset lets the backend append rows while the server runs: it writes the rows of
    the steps it is about to request before requesting them."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 - kept open for the server's lifetime
        header = self._read(0)
        if header is None or header[0] != TABLE_MAGIC or int(header[1]) != NCOL:
            raise ValueError(f"{path} is not a simconform drive table (format 1)")
        self.step_ns = int(header[2])

    def _read(self, index: int) -> tuple[float, ...] | None:
        self._fh.seek(index * NCOL * 8)
        raw = self._fh.read(NCOL * 8)
        if len(raw) < NCOL * 8:
            return None
        data = array.array("d", raw)
        if sys.byteorder != "little":
            data.byteswap()
        return tuple(data)

    def step_index(self, sim_time: timedelta) -> int:
        """The 1-based step that ends at `sim_time` (gz-sim's UpdateInfo.sim_time in an update)."""
        us = sim_time // timedelta(microseconds=1)
        return round(us * 1000 / self.step_ns)

    def row(self, k: int) -> tuple[float, ...] | None:
        """Row of step k, or None where the table has none (the vehicle is then left alone)."""
        return self._read(k) if k >= 1 else None


def actor_pose(path: list, loop: bool, t: float) -> tuple[float, float, float, float]:
    """(x, y, z, yaw) at run time t (s): simconform/actors.py's interpolation, in pure Python
    (waypoint yaws are unwrapped by the backend)."""
    t0, t1 = path[0][0], path[-1][0]
    if loop and t > t1:
        t = t0 + math.fmod(t - t0, t1 - t0)
    if t <= t0:
        return tuple(path[0][1:5])
    if t >= t1:
        return tuple(path[-1][1:5])
    k = bisect.bisect_right([w[0] for w in path], t)
    a, b = path[k - 1], path[k]
    u = (t - a[0]) / (b[0] - a[0])
    return tuple(a[i] + u * (b[i] - a[i]) for i in range(1, 5))


class VehicleDriver:
    """The system object PythonSystemLoader calls (configure, pre_update, post_update)."""

    def configure(self, entity: int, sdf: Any, ecm: Any, event_mgr: Any) -> None:
        from gz.msgs10.pose_pb2 import Pose
        from gz.sim8 import Link, Model
        from gz.transport13 import Node

        self.table = DriveTable(os.environ[TABLE_ENV])
        self.model = Model(entity)
        if not self.model.valid(ecm):
            raise RuntimeError(f"simconform driver: entity {entity} is not a model")
        self.name = self.model.name(ecm)
        self.link = Link(self.model.canonical_link(ecm))
        self._Pose = Pose
        self.node = Node()
        self.pub = self.node.advertise(POSE_TOPIC, Pose)
        self.actors: list = []
        self.actor_models: list | None = None
        if os.environ.get(ACTORS_ENV):
            with open(os.environ[ACTORS_ENV]) as fh:
                spec = json.load(fh)
            self.t_at_sim0 = float(spec["t_at_sim0_s"])
            self.actors = spec["actors"]

    def _move_actors(self, info: Any, ecm: Any) -> None:
        from gz.math7 import Pose3d
        from gz.sim8 import Model, World, world_entity

        if self.actor_models is None:  # the models exist once the world has loaded
            world = World(world_entity(ecm))
            self.actor_models = [Model(world.model_by_name(ecm, a["model"])) for a in self.actors]
        t = info.sim_time / timedelta(seconds=1) + self.t_at_sim0
        for a, model in zip(self.actors, self.actor_models):
            x, y, z, yaw = actor_pose(a["path"], a["loop"], t)
            model.set_world_pose_cmd(ecm, Pose3d(x, y, z, 0.0, 0.0, yaw))

    def pre_update(self, info: Any, ecm: Any) -> None:
        if info.paused:
            return
        if self.actors:
            self._move_actors(info, ecm)
        row = self.table.row(self.table.step_index(info.sim_time))
        if row is None:
            return
        from gz.math7 import Pose3d, Quaterniond, Vector3d

        px, py, pz, qw, qx, qy, qz, vx, vy, vz, wx, wy, wz, fx, fy, fz, tx, ty, tz, _ = row
        self.model.set_world_pose_cmd(ecm, Pose3d(px, py, pz, qw, qx, qy, qz))
        # gz-sim turns a link velocity command into world frame with the link's current
        # orientation (the Pose component, before this step's pose command is applied)
        current = self.link.world_pose(ecm)
        rot = current.rot() if current is not None else Quaterniond(qw, qx, qy, qz)
        self.link.set_angular_velocity(ecm, rot.rotate_vector_reverse(Vector3d(wx, wy, wz)))
        self.link.set_linear_velocity(ecm, rot.rotate_vector_reverse(Vector3d(vx, vy, vz)))
        self.link.add_world_wrench(ecm, Vector3d(fx, fy, fz), Vector3d(tx, ty, tz))

    def post_update(self, info: Any, ecm: Any) -> None:
        if info.paused:
            return
        row = self.table.row(self.table.step_index(info.sim_time))
        if row is None or not row[-1]:
            return
        pose = self.link.world_pose(ecm)
        msg = self._Pose(name=self.name)
        ns = (info.sim_time // timedelta(microseconds=1)) * 1000
        msg.header.stamp.sec, msg.header.stamp.nsec = divmod(ns, 1_000_000_000)
        p, q = pose.pos(), pose.rot()
        msg.position.x, msg.position.y, msg.position.z = p.x(), p.y(), p.z()
        o = msg.orientation
        o.x, o.y, o.z, o.w = q.x(), q.y(), q.z(), q.w()
        self.pub.publish(msg)


def get_system() -> VehicleDriver:
    """PythonSystemLoader's entry point."""
    return VehicleDriver()

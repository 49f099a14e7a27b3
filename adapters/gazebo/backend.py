"""Gazebo Harmonic backend (gz-sim 8, gz-transport 13): the same world and sensors, measured by
Gazebo's own gpu_lidar, camera, imu and navsat sensors.

How a run is driven (see docs/gazebo.md for the limits):

- open(): the world and spec are exported to SDF (adapters/gazebo/sdf.py) in a temp folder and
  `gz sim -s --headless-rendering` starts on it, paused.
- Simulation time: sim = t - T0, with T0 one whole second before the trajectory's first whole
  second, so every capture time k/rate is a whole number of 1 ms physics steps after sim 0
  (for rates that divide 1000 Hz), Gazebo's sensors (which update at 0, 1/rate, 2/rate...)
  render exactly at the captures, and the first second warms the renderer up.
- Stepping: the union of all Gazebo sensors' capture times is walked in order; before each one
  the vehicle is teleported to the trajectory pose there (/world/<name>/set_pose), then the
  world advances to it with /world/<name>/control multi_step, and the backend waits for every
  sensor due then to publish a message with that stamp (the control service answers before
  the iterations run, so this is what keeps the next teleport from landing mid-step).
  Sensors' requests arrive in ascending time per sensor, so the walk only moves forward;
  messages waiting for another sensor's request stay buffered. Use `--jobs 0`: worker
  processes would each start their own server (they would still be correct, each in its own
  GZ_PARTITION, just slower).
- Teleporting means Gazebo's physics sees a body at rest between captures: the IMU reads
  gravity only (zero rate), unlike the reference. The pose itself, lidar, camera and GNSS are
  exact at each capture. gpu_lidar renders a whole sweep at once (global shutter).
- Odometry has no Gazebo sensor; it is the pose the vehicle was set to.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from simconform.adapters.base import (
    BackendUnavailable,
    Motion,
    OdomTruth,
    SensorBackend,
    TruthSample,
)
from simconform.adapters.gazebo import decode
from simconform.adapters.gazebo.sdf import PHYSICS_STEP_S, VEHICLE, gz_topic, write_sdf
from simconform.adapters.gazebo.transport import GzSession, unavailable_message
from simconform.pipeline.schedule import capture_times
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.world import World

NS = 1_000_000_000
STEP_NS = round(PHYSICS_STEP_S * NS)

# gz.msgs10 module and class per spec sensor type; the topic each is read from
MSG_CLASSES = {
    LidarSpec: ("laserscan_pb2", "LaserScan"),
    CameraSpec: ("image_pb2", "Image"),
    ImuSpec: ("imu_pb2", "IMU"),
    GnssSpec: ("navsat_pb2", "NavSat"),
}


def sim_offset_ns(start_ns: int) -> int:
    """T0: one second before the trajectory's first whole second (see the module doc)."""
    return (start_ns // NS) * NS - NS


class GazeboBackend(SensorBackend):
    name = "gazebo"

    def open(self, world: World, spec: Spec) -> None:
        msg = unavailable_message()
        if msg is not None:
            raise BackendUnavailable(msg)
        import importlib

        self.world, self.spec = world, spec
        for n, s in spec.sensors.items():
            period = NS / s.rate_hz
            if (
                isinstance(s, tuple(MSG_CLASSES))
                and abs(period / STEP_NS - round(period / STEP_NS)) > 1e-9
            ):
                raise BackendUnavailable(
                    f"sensor {n}: rate {s.rate_hz:g} Hz is not a whole number of Gazebo's "
                    f"{PHYSICS_STEP_S * 1e3:g} ms physics steps; use a rate dividing 1000 Hz"
                )
        self.tmp = Path(tempfile.mkdtemp(prefix="simconform_gz_"))
        self.session: GzSession | None = None
        self.topics: dict[str, str] = {}
        self._events: np.ndarray | None = None
        try:
            self.session = GzSession(write_sdf(world, spec, self.tmp), world.name)
            for n, s in spec.sensors.items():
                if type(s) not in MSG_CLASSES:
                    continue
                module, cls = MSG_CLASSES[type(s)]
                msg_class = getattr(importlib.import_module(f"gz.msgs10.{module}"), cls)
                self.topics[n] = gz_topic(n)
                self.session.subscribe(self.topics[n], msg_class)
        except BaseException:
            self.close()  # no server left running, no temp folder left behind
            raise

    # ------------------------------------------------------------------ stepping

    def _plan(self, motion: Motion) -> None:
        """Every Gazebo capture time of the run, ascending, and T0."""
        self.t0 = sim_offset_ns(motion.start_ns)
        times = [
            capture_times(self.spec.sensors[n].rate_hz, motion.start_ns, motion.end_ns)
            for n in self.topics
        ]
        self._events = np.unique(np.concatenate(times)) if times else np.zeros(0, np.int64)
        self._due: dict[int, list[str]] = {}
        for n, ts in zip(self.topics, times):
            for t in ts.tolist():
                self._due.setdefault(t, []).append(n)
        self._next = 0
        self.sim_ns = 0

    def _advance(self, t_ns: int, motion: Motion) -> None:
        """Walk the events up to and including t_ns: teleport, then step to each."""
        if self._events is None:
            self._plan(motion)
        ev = self._events
        while self._next < len(ev) and ev[self._next] <= t_ns:
            e = int(ev[self._next])
            pose = motion.pose_at(e)
            self.session.set_pose(VEHICLE, pose.t, pose.quat())
            target = e - self.t0
            self.session.step((target - self.sim_ns) // STEP_NS)
            # stepping is asynchronous: the sensors' messages at `target` prove it has run
            for n in self._due[e]:
                self.session.wait_stamp(self.topics[n], target)
            self.sim_ns = target
            self._next += 1

    # ------------------------------------------------------------------ capture

    def capture(self, sensor: str, t_ns: int, motion: Motion) -> TruthSample:
        s = self.spec.sensors[sensor]
        if isinstance(s, OdomSpec):
            p = motion.pose_at(t_ns)
            return OdomTruth(x=float(p.t[0]), y=float(p.t[1]), yaw=float(p.yaw()))
        if sensor not in self.topics:
            raise TypeError(f"gazebo backend has no sensor type {type(s).__name__}")
        self._advance(t_ns, motion)
        raw = self.session.wait_for(self.topics[sensor], t_ns - self.t0)
        if isinstance(s, LidarSpec):
            return decode.laserscan_to_truth(raw)
        if isinstance(s, CameraSpec):
            return decode.image_to_truth(raw)
        if isinstance(s, ImuSpec):
            return decode.imu_to_truth(raw)
        return decode.navsat_to_truth(raw, self.world.origin)

    def close(self) -> None:
        session = getattr(self, "session", None)
        if session is not None:
            session.close()
            self.session = None
        tmp = getattr(self, "tmp", None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            self.tmp = None

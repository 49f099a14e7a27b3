"""Gazebo Harmonic backend (gz-sim 8, gz-transport 13): the same world and sensors, measured by
Gazebo's own gpu_lidar, camera (+ depth_camera), imu and navsat sensors.

How a run is driven (docs/gazebo.md says more, and what to expect):

- open(): the world and spec are exported to SDF (adapters/gazebo/sdf.py) with simconform's
  drive system on the vehicle, in a temp folder. The server starts at the first capture, when
  the trajectory is known: `gz sim -s --headless-rendering`, paused.
- Simulation time: sim = t - T0, with T0 one whole second before the trajectory's first whole
  second, so every capture time k/rate is a whole number of 1 ms physics steps after sim 0
  (for rates that divide 1000 Hz), Gazebo's sensors (which update at 0, 1/rate, 2/rate...)
  render exactly at the captures, and the first second warms the renderer up.
- Motion: inside the server, driver_system.py sets the vehicle's pose and velocity and applies
  a wrench on every physics step from the drive table (drive.py) that this backend appends to
  ahead of each step request. The engine therefore integrates the trajectory's own motion and
  Gazebo's IMU reads real accelerations and rates, not a teleported body at rest.
- Stepping: the union of all sensors' capture times is walked in order. The world advances
  with /world/<name>/control multi_step, one request per BLOCK_NS (1 s) of events rather than
  one per event; for each event the backend waits for every sensor due then to publish a
  message with that stamp, and for the driver's pose message (the control service answers
  before the iterations run). The pose must be the trajectory's
  (POSE_TOLERANCE): otherwise the drive system did not run and the run stops with the log.
  Odometry is that pose. `--jobs` is ignored (`prefetch = False`): worker processes would each
  start their own server and step the whole timeline.
- gpu_lidar renders a whole sweep at once (global shutter).
- `--noise engine` (`use_engine_noise`): the SDF carries the spec's noise as Gazebo <noise>
  and a noiseless twin of each noisy sensor (sdf.py); capture() returns the twin's output as
  truth with the noisy sensor's output of the same stamp in its `engine` field, and the server
  is started with `--seed` (`gz_seed`) so gz-sensors' noise draws are seeded.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.adapters.base import (
    BackendUnavailable,
    EngineError,
    LidarTruth,
    Motion,
    OdomTruth,
    SensorBackend,
    TruthSample,
)
from simconform.adapters.gazebo import decode, driver_system
from simconform.adapters.gazebo.drive import drive_rows, rows_bytes, table_header
from simconform.adapters.gazebo.noise import engine_noise_plan, engine_noise_values
from simconform.adapters.gazebo.sdf import (
    PHYSICS_STEP_S,
    VEHICLE_INERTIA,
    VEHICLE_MASS,
    actor_model,
    depth_topic,
    gz_topic,
    twin_topic,
    write_sdf,
)
from simconform.adapters.gazebo.transport import GzSession, gz_sim_version, unavailable_message
from simconform.frames import Pose
from simconform.lifeline import remove_scratch, scratch_dir
from simconform.pipeline.schedule import capture_times
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.world import World

NS = 1_000_000_000
STEP_NS = round(PHYSICS_STEP_S * NS)
POSE_TOLERANCE = (1e-3, 1e-3)  # m, rad: further off means the vehicle is not being driven
TABLE_AHEAD_STEPS = 2_000  # rows appended past the next request, to write in blocks
BLOCK_NS = NS  # simulation time per multi_step request (a round trip per block, not per event)

# gz.msgs10 module and class per spec sensor type; the topic each is read from
MSG_CLASSES = {
    LidarSpec: ("laserscan_pb2", "LaserScan"),
    CameraSpec: ("image_pb2", "Image"),
    ImuSpec: ("imu_pb2", "IMU"),
    GnssSpec: ("navsat_pb2", "NavSat"),
}


def gz_seed(seed: int) -> int:
    """The run's seed as `gz sim --seed`: 1 .. 2^31 - 2 (gz-sim ignores 0, parses an int)."""
    return seed % (2**31 - 2) + 1


def sim_offset_ns(start_ns: int) -> int:
    """T0: one second before the trajectory's first whole second (see the module doc)."""
    return (start_ns // NS) * NS - NS


class GazeboBackend(SensorBackend):
    name = "gazebo"
    prefetch = False  # one server steps one timeline; `--jobs` would start a server per worker
    run_outputs = ("gazebo/",)  # the SDF that ran and the server's log (_keep_dir)
    supports_engine_noise = True
    # actors are models the driver system moves every physics step (driver_system.py); a
    # gpu_lidar return names no object, so returns are labelled by the actor box they lie in
    moves_actors = True
    engine_seed: int | None = None  # set by use_engine_noise: Gazebo applies the spec's noise

    def use_engine_noise(self, seed: int) -> None:
        self.engine_seed = seed

    def engine_version(self) -> str | None:
        return gz_sim_version()

    def engine_noise_plan(self) -> dict[str, dict]:
        if self.engine_seed is None:
            return {}
        plan = engine_noise_plan(self.spec, self.world.origin)
        return {n: p for n, p in plan.items() if n in self.truth_topics}

    @classmethod
    def unavailable(cls) -> str | None:
        return unavailable_message()

    def open(self, world: World, spec: Spec) -> None:
        msg = self.unavailable()
        if msg is not None:
            raise BackendUnavailable(msg)
        self.world, self.spec = world, spec
        for n, s in spec.sensors.items():
            period = NS / s.rate_hz
            if abs(period / STEP_NS - round(period / STEP_NS)) > 1e-9:
                raise BackendUnavailable(
                    f"sensor {n}: rate {s.rate_hz:g} Hz is not a whole number of Gazebo's "
                    f"{PHYSICS_STEP_S * 1e3:g} ms physics steps; use a rate dividing 1000 Hz"
                )
        # named after this process: one a killed run leaves is removed by the next (lifeline)
        self.tmp = scratch_dir("simconform_gz_")
        self.session: GzSession | None = None
        self._table = None
        try:
            self.sdf_path = write_sdf(
                world, spec, self.tmp, driver=True, engine_noise=self.engine_seed is not None
            )
            # the server's PythonSystemLoader imports the driver by name from its plugin path
            driver = self.tmp / f"{driver_system.MODULE_NAME}.py"
            shutil.copyfile(driver_system.__file__, driver)
        except BaseException:
            self.close()  # no temp folder left behind
            raise
        self.topics = {n: gz_topic(n) for n, s in spec.sensors.items() if type(s) in MSG_CLASSES}
        # --noise engine: the noiseless twin of each noisy sensor (its output is the truth)
        self.truth_topics = {
            n: twin_topic(n)
            for n in self.topics
            if self.engine_seed is not None and engine_noise_values(spec.sensors[n], world.origin)
        }
        self.depth_topics = {
            n: depth_topic(n)
            for n, s in spec.sensors.items()
            if isinstance(s, CameraSpec) and s.depth
        }
        imus = [s for s in spec.sensors.values() if isinstance(s, ImuSpec)]
        self.h_ns = round(NS / imus[0].rate_hz) if imus else 10 * STEP_NS
        self.imu_mount = Pose.from_xyz_rpy(imus[0].mount.xyz, imus[0].mount.rpy) if imus else None
        self.max_pose_error = (0.0, 0.0)
        self._actor_sets: dict[int, object] = {}  # ActorSet per motion start

    # ------------------------------------------------------------------ starting

    def _start(self, motion: Motion) -> None:
        """Plan every capture of the trajectory, write the table's head, start the server."""
        self.motion = motion
        self.t0 = sim_offset_ns(motion.start_ns)
        names = list(self.topics) + [
            n for n, s in self.spec.sensors.items() if isinstance(s, OdomSpec)
        ]
        times = [
            capture_times(self.spec.sensors[n].rate_hz, motion.start_ns, motion.end_ns)
            for n in names
        ]
        self._events = np.unique(np.concatenate(times)) if times else np.zeros(0, np.int64)
        self._due: dict[int, list[str]] = {}
        for n, ts in zip(names, times):
            for t in ts.tolist():
                self._due.setdefault(t, []).append(n)
        self._next = 0
        self.sim_ns = 0
        self._poses: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._table_path = self.tmp / "drive.f64"
        self._table = open(self._table_path, "wb")  # noqa: SIM115 - closed in close()
        self._table.write(table_header(STEP_NS))
        self._table_steps = 0
        self._extend_table(1)
        plugin_path = os.pathsep.join(
            p for p in (str(self.tmp), os.environ.get("GZ_SIM_SYSTEM_PLUGIN_PATH")) if p
        )
        env = {
            driver_system.TABLE_ENV: str(self._table_path),
            "GZ_SIM_SYSTEM_PLUGIN_PATH": plugin_path,
        }
        if self.world.actors:
            env[driver_system.ACTORS_ENV] = str(self._write_actors(motion))
        seed = None if self.engine_seed is None else gz_seed(self.engine_seed)
        self.session = GzSession(
            self.sdf_path, self.world.name, env, seed=seed, log_path=self._keep_dir("server.log")
        )
        for n, topic in self.topics.items():
            module, cls = MSG_CLASSES[type(self.spec.sensors[n])]
            msg_class = getattr(importlib.import_module(f"gz.msgs10.{module}"), cls)
            self.session.subscribe(topic, msg_class)
            if n in self.truth_topics:
                self.session.subscribe(self.truth_topics[n], msg_class)
        image = importlib.import_module("gz.msgs10.image_pb2").Image
        for topic in self.depth_topics.values():
            self.session.subscribe(topic, image)
        pose = importlib.import_module("gz.msgs10.pose_pb2").Pose
        self.session.subscribe(driver_system.POSE_TOPIC, pose)

    def _write_actors(self, motion: Motion) -> Path:
        """The actors' file driver_system.py reads: paths with unwrapped yaw, run time at sim 0."""
        import json

        actors = []
        for a, actor in enumerate(self.world.actors):
            path = np.asarray(actor.path, dtype=float)
            path[:, 4] = np.unwrap(path[:, 4])
            actors.append({"model": actor_model(a), "path": path.tolist(), "loop": actor.loop})
        out = self.tmp / "actors.json"
        at0 = (self.t0 - motion.start_ns) / NS
        out.write_text(json.dumps({"t_at_sim0_s": at0, "actors": actors}))
        return out

    def _extend_table(self, upto_step: int) -> None:
        """Append drive rows so the table covers at least steps 1..upto_step."""
        if upto_step <= self._table_steps:
            return
        last = upto_step + TABLE_AHEAD_STEPS
        rows = drive_rows(
            self.motion,
            self.t0,
            self._table_steps + 1,
            last,
            STEP_NS,
            self.h_ns,
            self.imu_mount,
            self._events - self.t0,
            VEHICLE_MASS,
            VEHICLE_INERTIA,
        )
        self._table.write(rows_bytes(rows))
        self._table.flush()  # the server reads it before the steps are requested
        self._table_steps = last

    # ------------------------------------------------------------------ stepping

    def _check_pose(self, e: int, raw: bytes, keep: bool) -> None:
        _stamp, xyz, quat = decode.read_pose(raw)
        want = self.motion.pose_at(e)
        dp = float(np.linalg.norm(xyz - want.t))
        dr = float((want.rot.inv() * Rotation.from_quat(quat)).magnitude())
        self.max_pose_error = (max(self.max_pose_error[0], dp), max(self.max_pose_error[1], dr))
        if dp > POSE_TOLERANCE[0] or dr > POSE_TOLERANCE[1]:
            raise EngineError(
                f"Gazebo's vehicle is {dp:.3g} m / {dr:.3g} rad off the trajectory at "
                f"{e} ns: simconform's drive system is not moving it; "
                + (
                    f"see {self.session.log.name} for PythonSystemLoader errors"
                    if self.run_dir is not None
                    else "run it with `simconform run` to keep the server log"
                )
            )
        if keep:  # an odometry capture reads it
            self._poses[e] = (xyz, quat)

    def _request_block(self, first: int) -> None:
        """Ask the server to run from the last requested step through the events of the next
        BLOCK_NS of simulation time (or fewer), in one multi_step.

        gz-sim's Sensors system copies the scene at each sensor's update time and renders it
        while physics goes on; the next update waits for that render (Sensors::PostUpdate), so
        one long request loses no frame and renders each at its own state. The drive table
        is written for the whole block first."""
        ev = self._events
        end = int(np.searchsorted(ev, ev[first] + BLOCK_NS, side="right")) - 1
        target = int(ev[max(end, first)]) - self.t0
        self._extend_table(target // STEP_NS)
        proof = (driver_system.POSE_TOPIC, int(ev[first]) - self.t0)  # published in the block
        self.session.step((target - self.sim_ns) // STEP_NS, proof)
        self.sim_ns = target

    def _advance(self, t_ns: int, motion: Motion) -> None:
        """Walk the events up to and including t_ns: collect what each produced, requesting
        the server's steps a block at a time (`_request_block`)."""
        if self.session is None:
            self._start(motion)
        ev = self._events
        while self._next < len(ev) and ev[self._next] <= t_ns:
            e = int(ev[self._next])
            target = e - self.t0
            if target > self.sim_ns:
                self._request_block(self._next)
            # stepping is asynchronous: the messages stamped `target` prove it has run
            odom = any(isinstance(self.spec.sensors[n], OdomSpec) for n in self._due[e])
            self._check_pose(e, self.session.wait_for(driver_system.POSE_TOPIC, target), odom)
            # every message of the event, so none is in flight at the next block's request
            for n in self._due[e]:
                for topics in (self.topics, self.truth_topics, self.depth_topics):
                    if n in topics:
                        self.session.wait_stamp(topics[n], target)
            self._next += 1

    # ------------------------------------------------------------------ capture

    def capture(self, sensor: str, t_ns: int, motion: Motion) -> TruthSample:
        s = self.spec.sensors[sensor]
        if not isinstance(s, OdomSpec) and sensor not in self.topics:
            raise TypeError(f"gazebo backend has no sensor type {type(s).__name__}")
        self._advance(t_ns, motion)
        if isinstance(s, OdomSpec):
            xyz, quat = self._poses.pop(t_ns)
            yaw = Pose.from_xyz_quat(xyz, quat).yaw()
            return OdomTruth(x=float(xyz[0]), y=float(xyz[1]), yaw=float(yaw))
        raw = self.session.wait_for(self.topics[sensor], t_ns - self.t0)
        if sensor not in self.truth_topics:
            return self._label(sensor, self._decode(sensor, raw, t_ns), t_ns, motion)
        # --noise engine: truth from the noiseless twin, the noisy sensor's output beside it
        truth = self._decode(
            sensor, self.session.wait_for(self.truth_topics[sensor], t_ns - self.t0), t_ns
        )
        truth.engine = self._decode(sensor, raw, t_ns, depth=False)
        return self._label(sensor, truth, t_ns, motion)

    def _label(self, sensor: str, truth: TruthSample, t_ns: int, motion: Motion) -> TruthSample:
        """A lidar sweep's returns inside an actor's box (2 cm margin, gpu_lidar's one instant)
        get that actor's index in `objects`; every other return -1 (static objects unnamed)."""
        if not isinstance(truth, LidarTruth) or not self.world.actors:
            return truth
        from simconform.actors import LABEL_MARGIN_M, ActorSet

        if motion.start_ns not in self._actor_sets:
            self._actor_sets[motion.start_ns] = ActorSet(self.world, motion.start_ns)
        m = self.spec.sensors[sensor].mount
        sensor_pose = motion.pose_at(t_ns).compose(Pose.from_xyz_rpy(m.xyz, m.rpy))
        pts = sensor_pose.apply(truth.points.reshape(-1, 3))
        labels = self._actor_sets[motion.start_ns].label(t_ns, pts, LABEL_MARGIN_M)
        truth.objects = labels.reshape(truth.ranges.shape)
        return truth

    def _decode(self, sensor: str, raw: bytes, t_ns: int, depth: bool = True) -> TruthSample:
        s = self.spec.sensors[sensor]
        if isinstance(s, LidarSpec):
            return decode.laserscan_to_truth(raw)
        if isinstance(s, CameraSpec):
            d = None
            if depth and sensor in self.depth_topics:
                d = self.session.wait_for(self.depth_topics[sensor], t_ns - self.t0)
            return decode.image_to_truth(raw, d)
        if isinstance(s, ImuSpec):
            return decode.imu_to_truth(raw)
        return decode.navsat_to_truth(raw, self.world.origin)

    def _keep_dir(self, name: str) -> Path | None:
        """`run_dir`/gazebo/`name` (the SDF that was run is kept beside it), else None."""
        if self.run_dir is None:
            return None
        keep = Path(self.run_dir) / "gazebo"
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.sdf_path, keep / self.sdf_path.name)
        return keep / name

    def close(self) -> None:
        session = getattr(self, "session", None)
        if session is not None:
            session.close()
            self.session = None
        table = getattr(self, "_table", None)
        if table is not None:
            table.close()
            self._table = None
        tmp = getattr(self, "tmp", None)
        if tmp is not None:
            remove_scratch(tmp)
            self.tmp = None

"""MuJoCo backend: the same world and sensors, measured by a real physics engine.

- World: every object becomes a static geom (adapters/mjcf.py). The vehicle is a free body
  with one site per sensor mount; it follows the prescribed trajectory exactly because its state
  (qpos, qvel, qacc) is set from the trajectory before each capture; contacts are disabled.
- Lidar: `mujoco.mj_multiRay` from the mount frame, all rings of a column in one call (one
  call per column, since a rolling shutter moves the origin; one call per sweep for a global
  shutter), excluding the vehicle's own body, cut off at the maximum range.
- IMU: MuJoCo's own accelerometer and gyro sensors on the mount site, from `mj_inverse` with
  the state set from the trajectory (velocities and accelerations by central differences over
  one IMU period, the same stencil the reference uses), so MuJoCo computes the lever-arm and
  gravity terms itself.
- GNSS: a framepos sensor on the antenna site; odometry from the body pose.
- Camera: `mujoco.Renderer` (colour and depth) with the world's light; global shutter only.
  MUJOCO_GL defaults to egl where a GPU device exists, else to osmesa (libosmesa6) where that
  library is installed, else to egl (Mesa's EGL renders on the CPU too).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.actors import ActorSet
from simconform.adapters.base import (
    BackendUnavailable,
    CameraTruth,
    GnssTruth,
    ImuTruth,
    LidarTruth,
    Motion,
    OdomTruth,
    SensorBackend,
    TruthSample,
)
from simconform.adapters.mjcf import (
    actor_body,
    geom_object_index,
    quat_wxyz,
    vec3s,
    world_to_mjcf,
)
from simconform.adapters.sweep import lidar_sweep
from simconform.frames import Pose
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.world import World

# MuJoCo cameras look along -z with +y up; in the camera body frame (x forward, z up) that is
CAM_IN_BODY = Rotation.from_matrix(np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))


_INSTALL = "install it with `pip install 'simconform[mujoco]'` (or `pip install mujoco`)"
PICKED: str | None = None  # MUJOCO_GL as default_gl chose it (None: the user's own)


def default_gl() -> None:
    """Pick MuJoCo's OpenGL backend before mujoco is imported (it reads MUJOCO_GL once):
    EGL where a GPU device exists; on a CPU-only machine OSMesa (libosmesa6) when it is
    installed, else Mesa's EGL, which renders on the CPU as well (a missing libOSMesa made
    `import mujoco` fail deep inside PyOpenGL)."""
    global PICKED
    if "MUJOCO_GL" not in os.environ:
        gpu = any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/dri/renderD128"))
        if gpu:
            gl = "egl"
        elif ctypes.util.find_library("OSMesa") or not ctypes.util.find_library("EGL"):
            gl = "osmesa"
        else:
            gl = "egl"
        os.environ["MUJOCO_GL"] = PICKED = gl
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


default_gl()


def _xyzw(wxyz: np.ndarray) -> np.ndarray:
    return np.array([wxyz[1], wxyz[2], wxyz[3], wxyz[0]])


class MujocoBackend(SensorBackend):
    name = "mujoco"
    # actors are mocap bodies moved to each lidar column's time and each frame's time
    moves_actors = True

    def engine_version(self) -> str | None:
        return f"MuJoCo {self.mj.__version__}"

    @classmethod
    def unavailable(cls) -> str | None:
        if importlib.util.find_spec("mujoco") is None:
            return "--backend mujoco needs the mujoco Python package: " + _INSTALL
        return None

    def open(self, world: World, spec: Spec) -> None:
        default_gl()
        try:
            import mujoco
        except ImportError as exc:
            raise BackendUnavailable(
                f"--backend mujoco needs the mujoco Python package ({exc}); " + _INSTALL
            ) from None
        except Exception as exc:  # PyOpenGL fails in many ways when its GL library is missing
            gl = os.environ.get("MUJOCO_GL")
            raise BackendUnavailable(
                f"--backend mujoco could not load OpenGL for MUJOCO_GL={gl} "
                f"({type(exc).__name__}: {exc}); install libosmesa6 (OSMesa) or an EGL driver "
                "(libegl1 with Mesa or a GPU driver), or set MUJOCO_GL=egl/osmesa/glfw"
            ) from None
        self.mj = mujoco
        self.world, self.spec = world, spec
        self.mounts = {
            n: Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy) for n, s in spec.sensors.items()
        }
        gravity = next(
            (s.gravity for s in spec.sensors.values() if isinstance(s, ImuSpec)), 9.80665
        )
        xml = world_to_mjcf(world, self._vehicle_xml())
        self.model = mujoco.MjModel.from_xml_string(self._with_options(xml, gravity))
        self.data = mujoco.MjData(self.model)
        mujoco.mj_forward(self.model, self.data)
        self.body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, "simconform_vehicle")
        obj = geom_object_index(self.model)
        self.geom_object = np.append(obj, -1)  # index -1 (no hit) maps to -1
        shapes = [*world.objects, *(a.shape for a in world.actors)]
        self.reflectivity = np.array([o.reflectivity for o in shapes] + [0.0])
        self.mocap = [
            int(
                self.model.body_mocapid[
                    mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, actor_body(a))
                ]
            )
            for a in range(len(world.actors))
        ]
        self._actors: dict[int, ActorSet] = {}  # per motion start (the actors' t = 0)
        self.dirs = {n: s.directions() for n, s in spec.sensors.items() if isinstance(s, LidarSpec)}
        self.sensor_adr = {}
        for n, s in spec.sensors.items():
            if isinstance(s, ImuSpec):
                self.sensor_adr[n] = (self._adr(f"{n}_accel"), self._adr(f"{n}_gyro"))
            elif isinstance(s, GnssSpec):
                self.sensor_adr[n] = (self._adr(f"{n}_pos"),)
        self.renderers = {}
        for n, s in spec.sensors.items():
            if isinstance(s, CameraSpec):
                if s.shutter == "rolling":
                    raise BackendUnavailable(
                        f"the mujoco backend renders whole frames; sensor {n} asks for a rolling "
                        "shutter (use --backend reference, or shutter: global)"
                    )
                self.model.vis.global_.offwidth = max(self.model.vis.global_.offwidth, s.width)
                self.model.vis.global_.offheight = max(self.model.vis.global_.offheight, s.height)
                try:
                    self.renderers[n] = mujoco.Renderer(self.model, s.height, s.width)
                except Exception as exc:  # no usable OpenGL: egl/osmesa missing
                    raise BackendUnavailable(
                        f"MuJoCo could not create an OpenGL context for camera {n} with "
                        f"MUJOCO_GL={os.environ.get('MUJOCO_GL')} ({exc}); on a machine without "
                        "a GPU install Mesa (Debian/Ubuntu: apt-get install libosmesa6 libegl1) "
                        "and set MUJOCO_GL=osmesa or egl"
                    ) from None

    # ------------------------------------------------------------------ model

    def _vehicle_xml(self) -> str:
        sites, sensors, cams = [], [], []
        for n, s in self.spec.sensors.items():
            m = self.mounts[n]
            sites.append(
                f'<site name="{n}" pos="{vec3s(m.t)}" quat="{quat_wxyz(m.rot)}" size="0.01"/>'
            )
            if isinstance(s, ImuSpec):
                sensors.append(f'<accelerometer name="{n}_accel" site="{n}"/>')
                sensors.append(f'<gyro name="{n}_gyro" site="{n}"/>')
            elif isinstance(s, GnssSpec):
                sensors.append(f'<framepos name="{n}_pos" objtype="site" objname="{n}"/>')
            elif isinstance(s, CameraSpec):
                fx, fy, cx, cy = s.k()
                if not (
                    np.isclose(fx, fy)
                    and np.isclose(cx, (s.width - 1) / 2)
                    and np.isclose(cy, (s.height - 1) / 2)
                ):
                    raise BackendUnavailable(
                        f"camera {n}: MuJoCo's camera has square pixels and a centred principal "
                        "point; use hfov_deg or such intrinsics, or --backend reference"
                    )
                fovy = float(np.degrees(2 * np.arctan(0.5 * s.height / fy)))
                cams.append(
                    f'<camera name="{n}" pos="{vec3s(m.t)}" quat="{quat_wxyz(m.rot * CAM_IN_BODY)}"'
                    f' fovy="{fovy!r}"/>'
                )
        self._sensor_xml = "".join(sensors)
        return (
            '<body name="simconform_vehicle"><freejoint/>'
            '<inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>'
            + "".join(sites)
            + "".join(cams)
            + "</body>"
        )

    def _with_options(self, xml: str, gravity: float) -> str:
        w = self.world
        light = np.asarray(w.light.direction, dtype=float)
        light = light / np.linalg.norm(light)
        opts = (
            f'<option gravity="0 0 {-gravity!r}" timestep="0.001"><flag contact="disable"/>'
            "</option>"
            f'<visual><headlight ambient="{vec3s([w.light.ambient] * 3)}" diffuse="0 0 0" '
            'specular="0 0 0"/><map znear="0.001" zfar="5"/>'
            '<quality shadowsize="0"/></visual>'
        )
        opts += '<statistic extent="100" center="0 0 0"/>'  # depth range 0.1 .. 500 m
        sky = vec3s(w.sky_color)
        opts += (
            f'<asset><texture name="simconform_sky" type="skybox" builtin="flat" '
            f'rgb1="{sky}" rgb2="{sky}" width="16" height="16"/></asset>'
        )
        head, rest = xml.split(">", 1)
        xml = head + ">" + opts + rest
        lights = (
            f'<light directional="true" castshadow="false" dir="{vec3s(light)}" '
            f'diffuse="{vec3s([w.light.diffuse] * 3)}" specular="0 0 0"/>'
        )
        xml = xml.replace("<worldbody>", "<worldbody>" + lights, 1)
        sensors = f"<sensor>{self._sensor_xml}</sensor>" if self._sensor_xml else ""
        return xml.replace("</mujoco>", sensors + "</mujoco>")

    def _adr(self, name: str) -> int:
        mj = self.mj
        sid = mj.mj_name2id(self.model, mj.mjtObj.mjOBJ_SENSOR, name)
        return int(self.model.sensor_adr[sid])

    def _set_pose(self, pose: Pose) -> None:
        self.data.qpos[:3] = pose.t
        q = pose.rot.as_quat()
        self.data.qpos[3:7] = (q[3], q[0], q[1], q[2])

    # ------------------------------------------------------------------ capture

    def capture(self, sensor: str, t_ns: int, motion: Motion) -> TruthSample:
        s = self.spec.sensors[sensor]
        if isinstance(s, LidarSpec):
            return self._lidar(sensor, s, t_ns, motion)
        if isinstance(s, CameraSpec):
            return self._camera(sensor, s, t_ns, motion)
        if isinstance(s, ImuSpec):
            return self._imu(sensor, s, t_ns, motion)
        mj = self.mj
        self._set_pose(motion.pose_at(t_ns))
        mj.mj_kinematics(self.model, self.data)
        if isinstance(s, GnssSpec):
            site = mj.mj_name2id(self.model, mj.mjtObj.mjOBJ_SITE, sensor)
            return GnssTruth(enu=self.data.site_xpos[site].copy())
        if isinstance(s, OdomSpec):
            p = self.data.xpos[self.body]
            yaw = Rotation.from_quat(_xyzw(self.data.xquat[self.body])).as_euler("ZYX")[0]
            return OdomTruth(x=float(p[0]), y=float(p[1]), yaw=float(yaw))
        raise TypeError(f"mujoco backend has no sensor type {type(s).__name__}")

    def _place_actors(self, t_ns: int, motion: Motion) -> None:
        """Move every actor's mocap body to where the actor is at t_ns (then kinematics, so
        that mj_ray and the renderer see it there)."""
        if not self.mocap:
            return
        start = int(motion.start_ns)
        if start not in self._actors:
            self._actors[start] = ActorSet(self.world, start)
        actors = self._actors[start]
        for a, mid in enumerate(self.mocap):
            xyz, yaw = actors.pose(a, np.array([t_ns]))
            self.data.mocap_pos[mid] = xyz[0]
            self.data.mocap_quat[mid] = (np.cos(yaw[0] / 2), 0.0, 0.0, np.sin(yaw[0] / 2))
        self.mj.mj_kinematics(self.model, self.data)

    def _lidar(self, name: str, s: LidarSpec, t_ns: int, motion: Motion) -> LidarTruth:
        mj, m, d = self.mj, self.model, self.data

        def cast(origins, d_world, max_range, times):
            rings, cols = d_world.shape[:2]
            dist = np.empty((rings, cols))
            geom = np.empty((rings, cols), dtype=np.int32)
            normal = np.empty((rings, cols, 3))
            same = s.shutter == "global"
            groups = [np.arange(cols)] if same else [[c] for c in range(cols)]
            for cols_ in groups:
                # actors where they are at this column's time (a global shutter: one time)
                self._place_actors(int(times[..., cols_[0]].flat[0]), motion)
                vec = np.ascontiguousarray(d_world[:, cols_].transpose(1, 0, 2).reshape(-1))
                n = len(vec) // 3
                g = np.empty(n, dtype=np.int32)
                dd = np.empty(n)
                nn = np.empty(3 * n)
                mj.mj_multiRay(
                    m,
                    d,
                    np.ascontiguousarray(origins[cols_[0]]),
                    vec,
                    None,
                    1,
                    self.body,
                    g,
                    dd,
                    nn,
                    n,
                    float(max_range),
                )
                k = len(cols_)
                dist[:, cols_] = dd.reshape(k, rings).T
                geom[:, cols_] = g.reshape(k, rings).T
                normal[:, cols_] = nn.reshape(k, rings, 3).transpose(1, 0, 2)
            miss = geom < 0
            dist[miss] = np.inf
            normal[miss] = np.nan
            index = self.geom_object[np.where(miss, -1, geom)]
            return dist, normal, index

        return lidar_sweep(
            s, self.mounts[name], self.dirs[name], t_ns, motion, cast, self.reflectivity
        )

    def _imu(self, name: str, s: ImuSpec, t_ns: int, motion: Motion) -> ImuTruth:
        mj, m, d = self.mj, self.model, self.data
        h_ns = round(1e9 / s.rate_hz)
        c = min(max(t_ns, motion.start_ns + h_ns), motion.end_ns - h_ns)
        p = motion.pose_at(np.array([c - h_ns, c, c + h_ns]))
        h = h_ns * 1e-9
        here = motion.pose_at(t_ns)
        vel = (p.t[2] - p.t[0]) / (2 * h)
        acc = (p.t[2] - 2 * p.t[1] + p.t[0]) / h**2
        # body angular velocity at t - h/2 and t + h/2, and their mean and difference
        w0 = (p.rot[0].inv() * p.rot[1]).as_rotvec() / h
        w1 = (p.rot[1].inv() * p.rot[2]).as_rotvec() / h
        # a rotation vector is the same in the frames before and after its own rotation, so
        # both are already in the body frame at t
        self._set_pose(here)
        d.qvel[:3] = vel
        d.qvel[3:6] = 0.5 * (w0 + w1)
        d.qacc[:3] = acc
        d.qacc[3:6] = (w1 - w0) / h
        mj.mj_inverse(m, d)
        a_adr, g_adr = self.sensor_adr[name]
        site = mj.mj_name2id(m, mj.mjtObj.mjOBJ_SITE, name)
        quat = Rotation.from_matrix(d.site_xmat[site].reshape(3, 3)).as_quat()
        quat = -quat if quat[3] < 0 else quat
        return ImuTruth(
            accel=d.sensordata[a_adr : a_adr + 3].copy(),
            gyro=d.sensordata[g_adr : g_adr + 3].copy(),
            orientation=quat,
        )

    def _camera(self, name: str, s: CameraSpec, t_ns: int, motion: Motion) -> CameraTruth:
        mj = self.mj
        self._set_pose(motion.pose_at(t_ns))
        self._place_actors(t_ns, motion)
        mj.mj_forward(self.model, self.data)
        r = self.renderers[name]
        r.update_scene(self.data, camera=name)
        image = r.render().copy()
        depth = None
        if s.depth:
            r.enable_depth_rendering()
            r.update_scene(self.data, camera=name)
            depth = r.render().astype(np.float32)
            r.disable_depth_rendering()
            depth[depth >= self.model.vis.map.zfar * self.model.stat.extent * 0.999] = np.inf
        return CameraTruth(image=image, depth=depth)

    def close(self) -> None:
        for r in getattr(self, "renderers", {}).values():
            r.close()
        self.renderers = {}

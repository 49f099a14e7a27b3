"""The reference backend: exact geometry and exact kinematics, no engine in between.

Lidar returns are analytic ray-primitive intersections (simconform/raycast.py). IMU truth comes
from the prescribed motion itself: angular velocity from the SO(3) log of the orientations one
IMU period apart, specific force from the central second difference of the sensor's position
over the same period (what an integrating accelerometer measures over its sample interval),
both including the lever arm of the mount.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simconform.adapters.base import (
    CameraTruth,
    GnssTruth,
    ImuTruth,
    LidarTruth,
    Motion,
    OdomTruth,
    SensorBackend,
    TruthSample,
)
from simconform.adapters.kinematics import rates
from simconform.adapters.shading import gazebo_pixels, gazebo_unseen
from simconform.adapters.sweep import lidar_sweep
from simconform.frames import Pose
from simconform.spec import (
    OPTICAL_TO_BODY,
    CameraSpec,
    GnssSpec,
    ImuSpec,
    LidarSpec,
    OdomSpec,
    Spec,
)
from simconform.world import World


class ReferenceBackend(SensorBackend):
    name = "reference"
    # None: the exact reference. "gazebo": the sensors as Gazebo Harmonic renders them, on the
    # same exact geometry: gpu_lidar's texel-centre rays and global shutter, ranges published
    # along the nominal rays, intensity the visual's laser_retro (adapters/gazebo/gpu_rays.py);
    # the camera's sRGB PBS colours (adapters/shading.py)
    emulate: str | None = None
    # exact actors at each ray's own time (emulating Gazebo: at the sweep's one instant)
    moves_actors = True

    def __init__(self, emulate: str | None = None) -> None:
        from simconform.registry import EMULATE

        if emulate not in (None, *EMULATE):
            raise ValueError(f"emulate must be None or one of {tuple(EMULATE)}, got {emulate!r}")
        self.emulate = emulate

    def engine_version(self) -> str | None:
        from simconform import __version__

        return f"simconform {__version__} exact ray casting" + (
            f", emulating {self.emulate}" if self.emulate else ""
        )

    def open(self, world: World, spec: Spec) -> None:
        from simconform.raycast import Scene

        self.world = world
        self.spec = spec
        self.scene = Scene(world)
        self._moving: dict[int, object] = {}  # MovingScene per motion start (actors' t = 0)
        self.mounts = {
            n: Pose.from_xyz_rpy(s.mount.xyz, s.mount.rpy) for n, s in spec.sensors.items()
        }
        self._dirs = {
            n: s.directions() for n, s in spec.sensors.items() if isinstance(s, LidarSpec)
        }
        # camera rays in the body frame, and the albedo/shading tables per world object
        self._pixels = {
            n: s.rays_optical() @ OPTICAL_TO_BODY.T
            for n, s in spec.sensors.items()
            if isinstance(s, CameraSpec)
        }
        # each pixel ray's body-x component, contiguous: the z-depth reads 2.5 MB a 640 x 480
        # frame instead of striding through the 7.4 MB of rays
        self._pixel_x = {n: np.ascontiguousarray(r[..., 0]) for n, r in self._pixels.items()}
        shapes = [*world.objects, *(a.shape for a in world.actors)]
        self._reflectivity = np.array([o.reflectivity for o in shapes] + [0.0])
        self._gpu_rays: dict = {}  # emulate="gazebo": per lidar, built at its first sweep
        self._albedo = np.array([o.color for o in shapes] + [world.sky_color])
        self._albedo255 = (self._albedo * 255).astype(np.float32)
        light = np.asarray(world.light.direction, dtype=float)
        self._to_light = (-light / np.linalg.norm(light)).astype(np.float32)

    def moving(self, motion: Motion):
        """The scene with the actors, their waypoint times counted from the motion's start."""
        from simconform.actors import MovingScene

        start = int(motion.start_ns)
        if start not in self._moving:
            self._moving[start] = MovingScene(self.world, start, self.scene)
        return self._moving[start]

    def capture(self, sensor: str, t_ns: int, motion: Motion) -> TruthSample:
        s = self.spec.sensors[sensor]
        if isinstance(s, LidarSpec):
            return self._lidar(sensor, s, t_ns, motion)
        if isinstance(s, CameraSpec):
            return self._camera(sensor, s, t_ns, motion)
        if isinstance(s, ImuSpec | GnssSpec | OdomSpec):
            return self.capture_batch(sensor, np.array([t_ns]), motion)[0]
        raise TypeError(f"reference backend has no sensor type {type(s).__name__}")

    def capture_batch(self, sensor: str, times_ns: np.ndarray, motion: Motion) -> list[TruthSample]:
        s = self.spec.sensors[sensor]
        t = np.asarray(times_ns, dtype=np.int64)
        if isinstance(s, ImuSpec):
            return self._imu(sensor, s, t, motion)
        if isinstance(s, GnssSpec):
            enu = motion.pose_at(t).compose(self.mounts[sensor]).t
            return [GnssTruth(enu=e) for e in enu]
        if isinstance(s, OdomSpec):
            pose = motion.pose_at(t)
            return [
                OdomTruth(x=float(p[0]), y=float(p[1]), yaw=float(y))
                for p, y in zip(pose.t, pose.yaw())
            ]
        return super().capture_batch(sensor, times_ns, motion)

    def lidar_at(self, name: str, t_ns: int, ray_ns: np.ndarray, motion: Motion) -> LidarTruth:
        """A sweep whose every ray is cast at its own absolute time `ray_ns` (rings, columns):
        replay's truth for a cloud that gives each point its time."""
        return self._lidar(name, self.spec.sensors[name], t_ns, motion, ray_ns)

    def _lidar(
        self, name: str, s: LidarSpec, t_ns: int, motion: Motion, ray_ns: np.ndarray | None = None
    ) -> LidarTruth:
        if self.emulate == "gazebo":
            return self._gpu_lidar(name, s, t_ns, motion)

        scene = self.moving(motion)

        def cast(origins, d_world, max_range, times):
            rings, cols = d_world.shape[:2]
            o = origins if origins.ndim == 3 else origins[None, :, :]
            o = np.broadcast_to(o, (rings, cols, 3)).reshape(-1, 3)
            t = np.broadcast_to(times if times.ndim == 2 else times[None, :], (rings, cols))
            hits = scene.cast(o, d_world.reshape(-1, 3), 0.0, max_range, t.reshape(-1))
            return (
                hits.dist.reshape(rings, cols),
                hits.normal.reshape(rings, cols, 3),
                hits.index.reshape(rings, cols),
            )

        return lidar_sweep(
            s, self.mounts[name], self._dirs[name], t_ns, motion, cast, self._reflectivity, ray_ns
        )

    def _gpu_lidar(self, name: str, s: LidarSpec, t_ns: int, motion: Motion) -> LidarTruth:
        """What Gazebo's gpu_lidar returns on this geometry (see `emulate`)."""
        from simconform.adapters.gazebo import gpu_rays

        if name not in self._gpu_rays:
            self._gpu_rays[name] = gpu_rays.texel_directions(s)
        r, _cos, index = gpu_rays.emulate_sweep(
            self.moving(motion), s, self.mounts[name], self._gpu_rays[name], t_ns, motion
        )
        nominal = self._dirs[name]
        ok = np.isfinite(r)
        return LidarTruth(
            points=nominal * r[..., None],
            directions=nominal,
            ranges=r,
            intensity=np.where(ok, self._reflectivity[index], 0.0).astype(np.float32),
            t_offset=np.zeros(r.shape, dtype=np.float32),
        )

    def _imu(self, name: str, s: ImuSpec, t_ns: np.ndarray, motion: Motion) -> list[ImuTruth]:
        r = rates(motion, t_ns, round(1e9 / s.rate_hz), self.mounts[name])
        gravity = np.array([0.0, 0.0, -s.gravity])
        specific = r.here.rot.inv().apply(r.accel - gravity)
        gyro = r.body_rate()
        quat = r.here.quat()
        return [ImuTruth(accel=a, gyro=g, orientation=q) for a, g, q in zip(specific, gyro, quat)]

    def _camera(self, name: str, s: CameraSpec, t_ns: int, motion: Motion) -> CameraTruth:
        """One ray per pixel; Lambertian shading from one directional light plus ambient (or,
        with emulate="gazebo", Gazebo's sRGB PBS shading: adapters/shading.py).

        Rendered in horizontal bands so memory stays bounded at any resolution; with a rolling
        shutter every row has its own pose. No shadows or reflections (documented).
        """
        rays = self._pixels[name]  # (H, W, 3) body frame
        h, w = rays.shape[:2]
        row_ns = t_ns + np.round(s.row_offsets_s() * 1e9).astype(np.int64)
        row_ns = np.minimum(row_ns, motion.end_ns)
        # one pose per row; a global shutter's rows share the first
        poses = motion.pose_at(row_ns[:1] if s.shutter == "global" else row_ns)
        poses = poses.compose(self.mounts[name])
        rot = poses.rot.as_matrix()
        light = self.world.light
        scene = self.moving(motion)
        image = np.empty((h, w, 3), dtype=np.uint8)
        depth = np.empty((h, w), dtype=np.float32) if s.depth else None
        band = max(1, 65536 // w)
        for r0 in range(0, h, band):
            r1 = min(h, r0 + band)
            d = np.empty(((r1 - r0) * w, 3))
            if s.shutter == "global":
                origin = poses.t[0]
                _rotate(rays[r0:r1], rot[:1], d)
            else:
                origin = np.repeat(poses.t[r0:r1], w, axis=0)
                _rotate(rays[r0:r1], rot[r0:r1], d)
            times = row_ns[0] if s.shutter == "global" else np.repeat(row_ns[r0:r1], w)
            grid = w if s.shutter == "global" else None  # one origin: cast in tiles
            hits = scene.cast(origin, d, 0.0, np.inf, times, grid)
            if self.emulate == "gazebo":  # sRGB of ogre2's PBS shading (adapters/shading.py)
                z = hits.dist * rays[r0:r1, :, 0].reshape(-1)
                unseen = gazebo_unseen(self.world, hits.index, origin, d, hits.dist, z)
                hits.index[unseen], hits.dist[unseen] = -1, np.inf
                px = gazebo_pixels(
                    self._albedo, hits.index, hits.normal, d, self._to_light,
                    light.ambient, light.diffuse,
                )  # fmt: skip
                image[r0:r1] = px.reshape(r1 - r0, w, 3)
            else:
                _lambert(
                    hits.index, hits.normal, self._albedo255, self._to_light,
                    np.float32(light.ambient), np.float32(light.diffuse),
                    image[r0:r1].reshape(-1, 3),
                )  # fmt: skip
            if depth is not None:
                # z-depth: the ray's component along the optical axis (body x) is frame-free
                _z_depth(hits.dist, self._pixel_x[name][r0:r1], depth[r0:r1])
        return CameraTruth(image=image, depth=depth)


@njit(cache=True, nogil=True)
def _rotate(rays, rot, out) -> None:
    """out = each pixel ray (rows, W, 3) rotated by its row's matrix (rot (rows, 3, 3), or one
    matrix for every row): less than half the time of numpy's matmul (0.80 against 1.86 ms a
    640 x 480 frame, `python bench/camera.py`), whose BLAS call has little to do
    for N x 3 by 3 x 3, and the same bits on every CPU (no FMA, one summation order)."""
    rows, w = rays.shape[0], rays.shape[1]
    for r in range(rows):
        q = r if len(rot) > 1 else 0
        # in locals: read through the array, the compiler reloads the matrix after every
        # store to `out`, which it cannot prove apart (3.9 against 5.2 ns a ray)
        m00, m01, m02 = rot[q, 0, 0], rot[q, 0, 1], rot[q, 0, 2]
        m10, m11, m12 = rot[q, 1, 0], rot[q, 1, 1], rot[q, 1, 2]
        m20, m21, m22 = rot[q, 2, 0], rot[q, 2, 1], rot[q, 2, 2]
        for c in range(w):
            x, y, z = rays[r, c, 0], rays[r, c, 1], rays[r, c, 2]
            i = r * w + c
            out[i, 0] = (m00 * x + m01 * y) + m02 * z
            out[i, 1] = (m10 * x + m11 * y) + m12 * z
            out[i, 2] = (m20 * x + m21 * y) + m22 * z


@njit(cache=True, nogil=True)
def _z_depth(dist, ray_x, out) -> None:
    """out (rows, W) float32 = each pixel's hit distance times its ray's body-x component
    (ray_x, rows x W), rounded once to float32 as numpy's product and cast gave (the same
    bits), without the (rows, W) float64 product numpy made of it."""
    rows, w = out.shape
    for r in range(rows):
        for c in range(w):
            out[r, c] = np.float32(dist[r * w + c] * ray_x[r, c])


@njit(cache=True, nogil=True)
def _lambert(index, normal, albedo255, to_light, ambient, diffuse, image) -> None:
    """Lambert shading of one band into `image` (pixels, 3) uint8, in float32 as the camera
    always shaded: min(ambient + diffuse * max(n . l, 0), 1) times the albedo (x 255), + 0.5,
    truncated; a miss (index -1) is the sky colour, the albedo table's last row, unshaded."""
    one, zero, half = np.float32(1.0), np.float32(0.0), np.float32(0.5)
    for i in range(len(index)):
        k = index[i]
        shade = one
        if k >= 0:
            n0, n1, n2 = (
                np.float32(normal[i, 0]),
                np.float32(normal[i, 1]),
                np.float32(normal[i, 2]),
            )
            lit = n0 * to_light[0] + n1 * to_light[1] + n2 * to_light[2]
            shade = min(ambient + diffuse * max(lit, zero), one)
        else:
            k = len(albedo255) - 1
        for c in range(3):
            image[i, c] = np.uint8(albedo255[k, c] * shade + half)

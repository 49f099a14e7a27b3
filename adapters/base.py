"""The one interface every simulator backend implements, and the truth samples it returns.

A backend only produces noiseless engine truth in the sensor frame; the shared pipeline adds
every error. The one exception is `--noise engine` (`supports_engine_noise`, Gazebo only): the
backend then also returns the engine's own noisy output of the same capture in the truth
sample's optional `engine` field, and the pipeline publishes that instead of adding its noise
(it still applies dropout, latency and encoding). Every other backend leaves `engine` None.

`capture` receives the trajectory rather than one pose so that a rolling-shutter sensor can
re-interpolate the pose per column, and the IMU can differentiate the motion.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from simconform.frames import Pose
    from simconform.spec import Spec
    from simconform.world import World


class Motion(Protocol):
    """Prescribed motion of base_link in the map frame (a `simconform.trajectory.Trajectory`)."""

    start_ns: int
    end_ns: int

    def pose_at(self, t_ns: int | np.ndarray) -> Pose: ...


@dataclass
class LidarTruth:
    """Organized sweep as the sensor measures it: each point in the sensor frame at its own
    time (not deskewed), `t_offset` after the sweep start; NaN where a ray has no return.

    `directions` are the unit ray directions in that same per-point frame (the spec's rays), so
    noise along the ray is exact. `column_motion`, where the backend knows it, is each
    column's sensor pose in the sensor frame at sweep start (rotations (C, 3, 3), translations
    (C, 3)): what the `deskewed` convention needs to move every point into one frame
    (bag/cloud.py). None means the sensor did not move during the sweep (global shutter).
    """

    points: np.ndarray  # (rings, columns, 3) float64
    directions: np.ndarray  # (rings, columns, 3) float64, unit
    ranges: np.ndarray  # (rings, columns) float64, NaN for no return
    intensity: np.ndarray  # (rings, columns) float32
    t_offset: np.ndarray  # (rings, columns) float32 seconds from sweep start
    column_motion: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, repr=False, compare=False
    )
    # which object each return hit (rings, columns) int32: an index into world.objects, then
    # world.actors after them; -1 for no return. None where the engine cannot tell
    objects: np.ndarray | None = field(default=None, repr=False, compare=False)
    # --noise engine only: the engine's noisy output of this capture (same type, engine None)
    engine: Any = field(default=None, repr=False, compare=False)


@dataclass
class ImuTruth:
    accel: np.ndarray  # (3,) specific force in the sensor frame, m/s^2
    gyro: np.ndarray  # (3,) angular velocity in the sensor frame, rad/s
    orientation: np.ndarray  # (4,) sensor orientation in the map frame, x y z w
    # --noise engine only: the engine's noisy output of this capture (same type, engine None)
    engine: Any = field(default=None, repr=False, compare=False)


@dataclass
class GnssTruth:
    enu: np.ndarray  # (3,) antenna position in the map frame (ENU about the world origin), m
    # --noise engine only: the engine's noisy output of this capture (same type, engine None)
    engine: Any = field(default=None, repr=False, compare=False)


@dataclass
class OdomTruth:
    """Planar pose of base_link in the odom frame (the odom frame coincides with map)."""

    x: float
    y: float
    yaw: float


@dataclass
class CameraTruth:
    """rgb8 image (height, width, 3) and z-depth (REP 118, +inf where nothing is hit).

    After the pipeline's encode stage `encoded` holds the bytes that are published (JPEG), and
    `image` the pixels before encoding.
    """

    image: np.ndarray  # uint8
    depth: np.ndarray | None  # float32 metres
    encoded: bytes | None = None
    # --noise engine only: the engine's noisy output of this capture (same type, engine None)
    engine: Any = field(default=None, repr=False, compare=False)


TruthSample = LidarTruth | ImuTruth | GnssTruth | OdomTruth | CameraTruth


class BackendUnavailable(Exception):
    """The backend's engine is not installed here; the message says what to install."""


class EngineError(RuntimeError):
    """The engine failed during a run (a server died, refused a request or fell silent); the
    message names the evidence kept in the run folder (e.g. the server log)."""


class SensorBackend(ABC):
    name: str
    # whether lidar/camera captures may be rendered ahead in worker processes, each with its
    # own open backend (`--jobs`); false for engines that must step one timeline in order
    prefetch: bool = True
    # folders the engine writes in run_dir (its logs), listed in the run's outputs manifest
    run_outputs: tuple[str, ...] = ()
    # the run folder, set by `simconform run` before the first capture: engines keep their
    # logs there (an engine's failure is then explained by files that outlive the run)
    run_dir: Path | None = None
    # whether `use_engine_noise` is available (`simconform run --noise engine`)
    supports_engine_noise: bool = False
    # whether the world's moving actors (world.actors) appear in this engine's captures
    moves_actors: bool = False

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this engine is not installed here (one paragraph), or None; a cheap look, made
        before a campaign starts its cells (`open` still raises BackendUnavailable)."""
        return None

    @abstractmethod
    def open(self, world: World, spec: Spec) -> None:
        """Build the scene once. Raise BackendUnavailable when the engine is missing."""

    @abstractmethod
    def capture(self, sensor: str, t_ns: int, motion: Motion) -> TruthSample:
        """Noiseless truth of sensor `sensor` (a key of spec.sensors) captured at t_ns."""

    def capture_batch(self, sensor: str, times_ns: np.ndarray, motion: Motion) -> list[TruthSample]:
        """Truth for several capture times at once; backends override it to vectorise."""
        return [self.capture(sensor, int(t), motion) for t in times_ns]

    def use_engine_noise(self, seed: int) -> None:
        """Before open(): make the engine apply the spec's noise itself, seeded with `seed`, and
        fill each truth sample's `engine` field with its noisy output (see the module doc)."""
        raise NotImplementedError(f"{self.name} has no engine noise")

    def engine_noise_plan(self) -> dict[str, dict]:
        """After open(), with engine noise: per sensor whose noise the engine applies, what it
        applies and what it cannot express (run.json `noise_stages`); other sensors absent."""
        return {}

    def engine_version(self) -> str | None:
        """The engine's version after open() (for `simconform backends` and provenance)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release engine resources."""

    def __enter__(self) -> SensorBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""Noise stage: bias, white Gaussian noise and (IMU) bias random walk, per sensor and field.

Every capture consumes the same number of draws whatever its content (a no-return ray still
draws its noise), so the k-th capture's noise is the same on every backend for the same seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simconform.adapters.base import CameraTruth, GnssTruth, ImuTruth, LidarTruth, OdomTruth
from simconform.angles import se2_increment, wrap_angle
from simconform.pipeline.image_noise import draw_image_noise
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec


class LidarRangeNoise:
    """Range noise along each ray: the noisy point moves along the ray's own direction."""

    def __init__(self, spec: LidarSpec, rng: np.random.Generator) -> None:
        self.bias = spec.noise.range.bias
        self.sigma = spec.noise.range.sigma
        self.rng = rng

    def apply(self, s: LidarTruth) -> LidarTruth:
        e = self.bias + self.sigma * self.rng.standard_normal(s.ranges.shape)
        return dataclasses.replace(
            s, points=s.points + e[..., None] * s.directions, ranges=s.ranges + e
        )


class _AxisNoise:
    """bias + walk + sigma * N(0, 1) per axis; the walk steps by sigma_w * sqrt(dt) per sample."""

    def __init__(self, noise, rate_hz: float) -> None:
        self.bias = np.asarray(noise.bias, dtype=float)
        self.sigma = np.asarray(noise.sigma, dtype=float)
        self.walk_step = np.asarray(noise.bias_walk, dtype=float) * np.sqrt(1.0 / rate_hz)
        self.walk = np.zeros(3)

    def apply(self, value: np.ndarray, white: np.ndarray, walk_draw: np.ndarray) -> np.ndarray:
        out = value + self.bias + self.walk + self.sigma * white
        self.walk = self.walk + self.walk_step * walk_draw
        return out


class ImuNoise:
    def __init__(self, spec: ImuSpec, rng: np.random.Generator) -> None:
        self.accel = _AxisNoise(spec.noise.accel, spec.rate_hz)
        self.gyro = _AxisNoise(spec.noise.gyro, spec.rate_hz)
        self.rng = rng

    def apply(self, s: ImuTruth) -> ImuTruth:
        white = self.rng.standard_normal(6)
        walk = self.rng.standard_normal(6)
        return ImuTruth(
            accel=self.accel.apply(s.accel, white[:3], walk[:3]),
            gyro=self.gyro.apply(s.gyro, white[3:], walk[3:]),
            orientation=s.orientation,
        )


class GnssNoise:
    """Independent noise per ENU axis of the antenna position."""

    def __init__(self, spec: GnssSpec, rng: np.random.Generator) -> None:
        self.axes = _AxisNoise(spec.noise.position, spec.rate_hz)
        self.rng = rng

    def apply(self, s: GnssTruth) -> GnssTruth:
        return GnssTruth(enu=self.axes.apply(s.enu, self.rng.standard_normal(3), np.zeros(3)))


def se2_compose(a: OdomTruth, d: np.ndarray) -> OdomTruth:
    c, s = np.cos(a.yaw), np.sin(a.yaw)
    return OdomTruth(
        x=float(a.x + c * d[0] - s * d[1]),
        y=float(a.y + s * d[0] + c * d[1]),
        yaw=float(wrap_angle(a.yaw + d[2])),
    )


class OdomNoise:
    """Wheel odometry integrates noisy increments, so its error is a drift, as on a robot.

    The first capture starts at the true pose; each later one adds the true capture-to-capture
    increment plus bias and white noise in the previous base_link frame.
    """

    def __init__(self, spec: OdomSpec, rng: np.random.Generator) -> None:
        n = spec.noise.increment
        self.bias = np.asarray(n.bias, dtype=float)
        self.sigma = np.asarray(n.sigma, dtype=float)
        self.rng = rng
        self.prev_truth: OdomTruth | None = None
        self.pose: OdomTruth | None = None

    def apply(self, s: OdomTruth) -> OdomTruth:
        white = self.rng.standard_normal(3)
        if self.prev_truth is None or self.pose is None:
            self.pose = OdomTruth(s.x, s.y, s.yaw)
        else:
            d = se2_increment(self.prev_truth, s) + self.bias + self.sigma * white
            self.pose = se2_compose(self.pose, d)
        self.prev_truth = s
        return self.pose


class ImageNoise:
    """bias + sigma * N(0, 1) per pixel and channel, then clamp to [0, 255] and round to uint8:
    the stages a real camera's output goes through, which the verifier accounts for. Drawn
    from that output's exact discrete distribution by table (pipeline/image_noise.py)."""

    def __init__(self, spec: CameraSpec, rng: np.random.Generator) -> None:
        self.bias = np.float32(spec.noise.intensity.bias)
        self.sigma = np.float32(spec.noise.intensity.sigma)
        self.rng = rng

    def apply(self, s: CameraTruth) -> CameraTruth:
        return CameraTruth(
            image=draw_image_noise(s.image, self.bias, self.sigma, self.rng), depth=s.depth
        )


def apply_image_noise(image: np.ndarray, bias, sigma, rng: np.random.Generator) -> np.ndarray:
    """The camera noise model written out per pixel in float32: the definition the table
    sampler (pipeline/image_noise.py) is tested and benchmarked against."""
    x = rng.standard_normal(image.shape, dtype=np.float32)
    x *= sigma
    x += image
    x += bias
    np.clip(x, 0, 255, out=x)
    return np.rint(x).astype(np.uint8)


def make_noise(spec, rng: np.random.Generator):
    kinds = {
        LidarSpec: LidarRangeNoise,
        ImuSpec: ImuNoise,
        GnssSpec: GnssNoise,
        OdomSpec: OdomNoise,
        CameraSpec: ImageNoise,
    }
    return kinds[type(spec)](spec, rng)

"""`--noise engine`: the spec's error model as SDF <noise>, in gz-sensors 8's units, and the plan
of what Gazebo applies, what simconform still applies and what SDF cannot express.

docs/gazebo.md ("Signing off Gazebo's own noise") gives the gz-sensors source of every fact
used here (GaussianNoiseModel, ImuSensor, NavSatSensor, Lidar, the ogre2 noise shader).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, Spec
from simconform.world import Origin

# gz-sensors' dynamic bias is a Gauss-Markov process (GaussianNoiseModel::ApplyImpl): step
# sigma_b * sqrt(tau / 2 * (1 - exp(-2 dt / tau))) -> sigma_b * sqrt(dt) for dt << tau, i.e. the
# spec's bias random walk (per sqrt(s)) when tau is far longer than any run
IMU_WALK_CORRELATION_S = 1.0e6
WGS84_A = 6378137.0
WGS84_E2 = 6.69437999014e-3


def metres_per_degree(lat_deg: float, alt_m: float = 0.0) -> tuple[float, float]:
    """(north, east) metres per degree of latitude and longitude on WGS84 at lat_deg, alt_m."""
    phi = math.radians(lat_deg)
    w = 1.0 - WGS84_E2 * math.sin(phi) ** 2
    m = WGS84_A * (1.0 - WGS84_E2) / w**1.5  # meridional radius of curvature
    n = WGS84_A / math.sqrt(w)  # prime vertical radius of curvature
    return math.radians(1.0) * (m + alt_m), math.radians(1.0) * (n + alt_m) * math.cos(phi)


def _lat_alt(origin: Origin | None) -> tuple[float, float]:
    return (0.0, 0.0) if origin is None else (origin.lat, origin.alt)


def engine_noise_values(s, origin: Origin | None = None) -> dict[str, dict[str, float]]:
    """SDF <noise> parameters per noise slot of one sensor, in gz-sensors' units; slots whose
    parameters are all zero are left out (no <noise> written there).

    Slots: lidar "range" (metres); camera "image" (intensity in [0, 1]: levels / 255); IMU
    "angular_velocity/x" ... "linear_acceleration/z"; NavSat "position/horizontal" (DEGREES:
    gz-sensors applies it to latitude and longitude in degrees) and "position/vertical" (m).
    Keys: the noise.sdf element names (mean, stddev, bias_mean, dynamic_bias_stddev, ...).
    """
    out: dict[str, dict[str, float]] = {}
    if isinstance(s, LidarSpec):  # lidar.sdf's <noise> has mean and stddev only: bias -> mean
        out["range"] = {"mean": s.noise.range.bias, "stddev": s.noise.range.sigma}
    elif isinstance(s, CameraSpec):
        n = s.noise.intensity
        out["image"] = {"mean": n.bias / 255.0, "stddev": n.sigma / 255.0}
    elif isinstance(s, ImuSpec):
        groups = (("angular_velocity", s.noise.gyro), ("linear_acceleration", s.noise.accel))
        for group, noise in groups:
            for a, axis in enumerate("xyz"):
                out[f"{group}/{axis}"] = {
                    "mean": 0.0,
                    "stddev": noise.sigma[a],
                    "bias_mean": noise.bias[a],
                    "bias_stddev": 0.0,
                    "dynamic_bias_stddev": noise.bias_walk[a],
                    "dynamic_bias_correlation_time": (
                        IMU_WALK_CORRELATION_S if noise.bias_walk[a] > 0 else 0.0
                    ),
                }
    elif isinstance(s, GnssSpec):
        p = s.noise.position
        per_deg_n, _per_deg_e = metres_per_degree(*_lat_alt(origin))
        # one model for latitude and longitude: the spec's north axis, converted to degrees
        out["position/horizontal"] = {
            "mean": 0.0,
            "stddev": p.sigma[1] / per_deg_n,
            "bias_mean": p.bias[1] / per_deg_n,
            "bias_stddev": 0.0,
        }
        out["position/vertical"] = {
            "mean": 0.0,
            "stddev": p.sigma[2],
            "bias_mean": p.bias[2],
            "bias_stddev": 0.0,
        }
    return {k: v for k, v in out.items() if any(x != 0 for x in v.values())}


def engine_noise_plan(spec: Spec, origin: Origin | None = None) -> dict[str, dict]:
    """Per Gazebo sensor of the spec, for run.json and the report (--noise engine): the SDF
    noise Gazebo applies, what simconform still applies, what the spec declares that SDF cannot
    express, which bias metrics gz-sensors randomly signs, and where Gazebo's model must differ
    from the spec's (`expected`: metric -> what Gazebo's own model gives)."""
    plan: dict[str, dict] = {}
    for name, s in spec.sensors.items():
        if not isinstance(s, LidarSpec | CameraSpec | ImuSpec | GnssSpec):
            continue
        vals = engine_noise_values(s, origin)
        simc, inexpressible, notes = [], [], []
        random_sign: list[str] = []
        expected: dict[str, float] = {}
        if s.dropout.sample > 0:
            simc.append(f"sample dropout {s.dropout.sample:g}")
        if isinstance(s, LidarSpec) and s.dropout.point > 0:
            simc.append(f"point dropout {s.dropout.point:g}")
        if s.latency.fixed_ms > 0 or s.latency.jitter_ms > 0:
            jitter = f" + jitter {s.latency.jitter_ms:g} ms" if s.latency.jitter_ms > 0 else ""
            simc.append(f"latency {s.latency.fixed_ms:g} ms{jitter}")
        inexpressible = list(simc)
        if isinstance(s, CameraSpec):
            if s.encoding == "jpeg":
                simc.append(f"JPEG encoding (quality {s.jpeg_quality}, {s.jpeg_subsampling})")
                inexpressible.append("JPEG encoding")
            notes.append(
                "clamp and rounding are Gazebo's: the ogre2 noise shader clamps to [0, 1] and "
                "the image is read back as 8 bits; the shader adds sign(z)|z|^2.1 of "
                "z ~ N(mean, stddev), one value for R, G and B, so its intensity noise is "
                "far below the declared sigma (docs/gazebo.md)"
            )
        if isinstance(s, LidarSpec):
            notes.append(
                "gz-sensors clamps noisy finite ranges into [min, max] (Lidar::ApplyNoise) and "
                "leaves no-return rays (+-inf) without noise"
            )
        if isinstance(s, ImuSpec):
            random_sign += [
                f"{q}_bias_{axis}"
                for q, noise in (("accel", s.noise.accel), ("gyro", s.noise.gyro))
                for a, axis in enumerate("xyz")
                if noise.bias[a] != 0
            ]
            if any(w > 0 for w in (*s.noise.accel.bias_walk, *s.noise.gyro.bias_walk)):
                notes.append(
                    "bias random walk written as a Gauss-Markov dynamic bias with correlation "
                    f"time {IMU_WALK_CORRELATION_S:g} s (a random walk over the run)"
                )
        if isinstance(s, GnssSpec):
            p = s.noise.position
            per_n, per_e = metres_per_degree(*_lat_alt(origin))
            random_sign += [f"position_bias_{ax}" for ax, b in zip("enu", p.bias) if b != 0]
            if p.bias[1] != 0 or p.bias[0] != 0:
                expected["position_bias_e"] = p.bias[1] / per_n * per_e
            if p.sigma[1] != 0 or p.sigma[0] != 0:
                expected["position_std_e"] = p.sigma[1] / per_n * per_e
            if p.sigma[0] != p.sigma[1] or p.bias[0] != p.bias[1]:
                inexpressible.append("separate east and north noise (SDF has one horizontal)")
            inexpressible.append(
                "horizontal noise in metres: SDF's is in degrees on latitude and longitude alike, "
                f"so Gazebo's east error is {per_e / per_n:.4f} x its north error here"
            )
        if random_sign:
            notes.append(
                "gz-sensors negates each drawn bias with probability 0.5 "
                "(GaussianNoiseModel::Load): bias metrics accept -bias too"
            )
        plan[name] = {
            "engine": {k: {t: float(x) for t, x in v.items()} for k, v in vals.items()},
            "simconform": simc,
            "not_expressible": inexpressible,
            "random_sign_bias": random_sign,
            "expected": expected,
            "notes": notes,
        }
    return plan


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrib: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrib)
    if text is not None:
        el.text = text
    return el


def _noise(parent: ET.Element, values: dict[str, float], type_element: bool = False) -> None:
    """One SDF <noise type="gaussian">; lidar.sdf and camera.sdf declare `type` as a child
    element (sdformat's Noise::Load reads either)."""
    if type_element:
        noise = _sub(parent, "noise")
        _sub(noise, "type", "gaussian")
    else:
        noise = _sub(parent, "noise", type="gaussian")
    for tag, val in values.items():
        _sub(noise, tag, repr(float(val)))


def add_engine_noise(sensor: ET.Element, s, origin: Origin | None) -> None:
    """Write the spec's noise into a sensor element already holding its <lidar>/<camera>/...."""
    vals = engine_noise_values(s, origin)
    if isinstance(s, LidarSpec) and "range" in vals:
        _noise(sensor.find("lidar"), vals["range"], type_element=True)
    elif isinstance(s, CameraSpec) and "image" in vals:
        _noise(sensor.find("camera"), vals["image"], type_element=True)
    elif isinstance(s, ImuSpec):
        imu = sensor.find("imu")
        for group in ("angular_velocity", "linear_acceleration"):
            axes = [a for a in "xyz" if f"{group}/{a}" in vals]
            if axes:
                g = _sub(imu, group)
                for a in axes:
                    _noise(_sub(g, a), vals[f"{group}/{a}"])
    elif isinstance(s, GnssSpec):
        navsat = sensor.find("navsat")
        slots = [k for k in ("horizontal", "vertical") if f"position/{k}" in vals]
        if slots:
            ps = _sub(navsat, "position_sensing")
            for k in slots:
                _noise(_sub(ps, k), vals[f"position/{k}"])

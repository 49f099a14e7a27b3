"""Per-point time of a foreign lidar cloud, under any driver's name, type and origin.

A spinning lidar's driver publishes each point where the sensor saw it at its own time, with
that time in a field: Velodyne `time` (float32 s after header.stamp), Ouster `t` (uint32 ns
after header.stamp), Hesai `timestamp` (float64 s, absolute), Livox `timestamp` (float64 ns,
absolute) or `offset_time` (uint32 ns). Replay recomputes truth at each point's own time, so
it must read that time exactly; a cloud without it, from a sensor that moves during a sweep,
cannot be judged and is refused with what to put in the map (`refuse_without_time`).

The map's `point_time` (auto | none | a field name), `time_unit` (auto | s | ms | us | ns) and
`time_reference` (auto | stamp | absolute) say how; auto means: the first of KNOWN present;
integers in ns, floats in s (an absolute float: s or ns, whichever lies nearer the stamp);
`timestamp` absolute, every other name after header.stamp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simconform.errors import UserError

KNOWN = ("time", "t", "timestamp", "offset_time")
_SCALE = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
MOVING_M = 1e-3  # a sweep moves a point 10 m away by more than this: the sensor moves


@dataclass
class PointTime:
    """How one lidar's clouds carry each point's time."""

    field: str
    scale: float  # ns per unit
    absolute: bool

    def describe(self) -> str:
        unit = next(k for k, v in _SCALE.items() if v == self.scale)
        return f"{self.field} in {unit}, " + ("absolute" if self.absolute else "after header.stamp")

    def times_ns(self, values: np.ndarray, stamp_ns: int) -> np.ndarray:
        """Absolute times in ns (int64) of the field's values."""
        v = np.asarray(values)
        if self.absolute:
            if v.dtype.kind == "f" and self.scale == 1e9:  # keep ns exact: split off the seconds
                sec = np.floor(v)
                return sec.astype(np.int64) * 1_000_000_000 + np.round((v - sec) * 1e9).astype(
                    np.int64
                )
            return np.round(v.astype(np.float64) * self.scale).astype(np.int64)
        return stamp_ns + np.round(v.astype(np.float64) * self.scale).astype(np.int64)


def resolve(entry: Any, msg: Any, stamp_ns: int, where: tuple[Any, str]) -> PointTime | None:
    """The time field of a lidar's clouds from its first message, or None (no time field:
    `point_time: none`, or auto and none of KNOWN present). `where` = (file, topic) for errors."""
    names = [f.name for f in msg.fields]
    kinds = {f.name: f.datatype for f in msg.fields}
    if entry.point_time == "none":
        return None
    if entry.point_time == "auto":
        name = next((k for k in KNOWN if k in kinds), None)
        if name is None:
            return None
    else:
        name = entry.point_time
        if name not in kinds:
            raise UserError(
                where[0],
                where[1],
                f"fields {names}",
                f"expected the per-point time field {name!r} (sensors.*.point_time in the map)",
            )
    is_float = kinds[name] in (7, 8)
    absolute = (
        entry.time_reference == "absolute"
        if entry.time_reference != "auto"
        else name == "timestamp"
    )
    if entry.time_unit != "auto":
        return PointTime(name, _SCALE[entry.time_unit], absolute)
    if not is_float:
        return PointTime(name, 1.0, absolute)
    if not absolute:
        return PointTime(name, 1e9, absolute)
    from simconform.bag.messages import cloud_arrays

    v = cloud_arrays(msg)[name]
    v = v[np.isfinite(v)]
    med = float(np.median(v)) if v.size else 0.0
    scale = min((1e9, 1.0), key=lambda s: abs(med * s - stamp_ns))  # s or ns: nearer the stamp
    return PointTime(name, scale, absolute)


def check_span(
    pt: PointTime, t_ns: np.ndarray, stamp_ns: int, period_ns: int, where: tuple[Any, str]
) -> None:
    """Refuse times that lie more than two sweep periods from the header stamp: a wrong unit
    or origin (relative read as absolute, ms as s)."""
    ok = t_ns[t_ns != np.iinfo(np.int64).min]
    if ok.size == 0:
        return
    far = np.abs(ok - stamp_ns).max()
    if far > 2 * period_ns:
        raise UserError(
            where[0],
            where[1],
            f"point time {far / 1e9:.6g} s from header.stamp {stamp_ns / 1e9:.9f} s",
            f"expected every point within two sweep periods ({2 * period_ns / 1e9:g} s) of the "
            f"stamp; read as {pt.describe()}: set time_unit and time_reference in the map",
        )


def sweep_motion_m(motion: Any, mount: Any, stamps: list[int], sweep_ns: int) -> float:
    """How far the sensor's motion during one sweep moves a point 10 m away (m), the most
    over up to 200 sweeps: translation plus 10 m times the rotation angle."""
    if not stamps or sweep_ns <= 0:
        return 0.0
    picks = np.array(sorted(stamps), dtype=np.int64)
    picks = picks[np.linspace(0, len(picks) - 1, min(200, len(picks))).astype(int)]
    ends = np.minimum(picks + sweep_ns, motion.end_ns)
    a = motion.pose_at(picks).compose(mount)
    b = motion.pose_at(ends).compose(mount)
    rel = a.inverse().compose(b)
    move = np.linalg.norm(rel.t, axis=1) + 10.0 * rel.rot.magnitude()
    return float(move.max())


def refuse_without_time(
    file: Any, name: str, topic: str, fields: list[str], moved_m: float
) -> UserError:
    return UserError(
        file,
        f"sensors.{name}.point_time",
        f"auto ({topic} has no per-point time; fields {fields})",
        f"the sensor moves during a sweep (a point 10 m away by up to {moved_m:.3g} m), so "
        "truth at one time per sweep would count that motion as range error. In the map, under "
        f"sensors.{name}, set point_time: <field> (with time_unit, time_reference) if the "
        "points carry their time under another name; deskewed: true if the points are "
        "motion-compensated to header.stamp; or point_time: none to take the spec's column "
        "schedule (column c at c / (columns x rate_hz) after the sweep start; the spec's "
        "header_stamp says whether the stamp is the sweep's start or end)",
    )

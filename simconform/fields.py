"""The field types every input model is built from, so a bound is stated once.

`Strict` refuses unknown keys and, for every float of every model built on it, NaN and
infinity: no field of a spec, world, replay map or campaign has a physical reason to be
infinite, and one that is would otherwise travel silently into the noise, the plots or a PASS.
Magnitudes get a ceiling where physics gives one, far above any real sensor, so arithmetic on
them (squares, sums over a run) cannot overflow. ROS 2 names follow the ROS 2 naming rules
(design article "Topic and Service name mapping to DDS"): tokens of letters, digits and
underscores that do not start with a digit, separated by single slashes.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

MAX_ANGLE_RAD = 1e3
MAX_COORD_M = 1e7  # positions in a world (ENU metres): beyond the Earth's radius is a typo
MAX_MOUNT_M = 1e3  # a sensor mount's offset from base_link
MAX_NOISE = 1e6  # sigma / bias / walk in the field's own unit: finite squares and sums


class Strict(BaseModel):
    """Unknown keys refused, NaN and infinity refused in every float field, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


Coord = Annotated[float, Field(ge=-MAX_COORD_M, le=MAX_COORD_M)]
MountCoord = Annotated[float, Field(ge=-MAX_MOUNT_M, le=MAX_MOUNT_M)]
# Radians; several turns are allowed (worlds write 6.3), thousands only lose digits in sin/cos.
Angle = Annotated[float, Field(ge=-MAX_ANGLE_RAD, le=MAX_ANGLE_RAD)]
NonNeg = Annotated[float, Field(ge=0, le=MAX_NOISE)]
Signed = Annotated[float, Field(ge=-MAX_NOISE, le=MAX_NOISE)]
Prob = Annotated[float, Field(ge=0, lt=1)]
Rate = Annotated[float, Field(ge=0.01, le=10000)]  # Hz: one sample per 100 s at the least

Vec3 = tuple[Coord, Coord, Coord]
MountXyz = tuple[MountCoord, MountCoord, MountCoord]
Rpy = tuple[Angle, Angle, Angle]

_TOKEN = r"[A-Za-z_][A-Za-z0-9_]*"
TOPIC_PATTERN = rf"^(/{_TOKEN})+$"
FRAME_PATTERN = rf"^{_TOKEN}(/{_TOKEN})*$"
# Topics the bag already uses for itself; a sensor publishing there would corrupt them.
RESERVED_TOPICS = ("/tf", "/tf_static", "/clock", "/rosout", "/parameter_events")
# Frames of the trajectory's own tree (map -> odom -> base_link).
TRAJECTORY_FRAMES = ("map", "odom")


def _name_rule(pattern: str, allowed: str):
    def check(v: str) -> str:
        if len(v) > 200 or not re.fullmatch(pattern, v):
            raise ValueError(allowed)
        return v

    return check


_topic = _name_rule(
    TOPIC_PATTERN,
    "expected a ROS 2 topic name: /name(/name)*, each name of letters, digits and _ not "
    "starting with a digit",
)
_frame = _name_rule(
    FRAME_PATTERN,
    "expected a tf2 frame id: name(/name)* without a leading /, each name of letters, digits "
    "and _ not starting with a digit",
)
Topic = Annotated[str, AfterValidator(_topic)]
FrameId = Annotated[str, AfterValidator(_frame)]
# A world object's class: what it is to a perception stack ("car", "pole", or a nuScenes
# category such as "vehicle.car"); dataset exports and ground-truth boxes name it.
ClassName = Annotated[
    str,
    AfterValidator(
        _name_rule(
            r"[A-Za-z0-9_.\-]{1,100}",
            "expected 1-100 letters, digits, _ . - (car, pole, vehicle.car)",
        )
    ),
]


def _printable(v: str) -> str:
    if not v.strip() or not v.isprintable():
        raise ValueError("expected a non-empty name of printable characters")
    return v


Name = Annotated[str, Field(max_length=200), AfterValidator(_printable)]


def nonzero(v: tuple[float, float, float]) -> tuple[float, float, float]:
    """A direction: refused when (numerically) zero; kept as written."""
    if not math.sqrt(sum(x * x for x in v)) > 1e-9:
        raise ValueError("expected a non-zero vector")
    return v


Direction = Annotated[Vec3, AfterValidator(nonzero)]

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
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from simconform.errors import FieldProblem

MAX_ANGLE_RAD = 1e3
MAX_COORD_M = 1e7  # positions in a world (ENU metres): beyond the Earth's radius is a typo
MAX_MOUNT_M = 1e3  # a sensor mount's offset from base_link
MAX_NOISE = 1e6  # sigma / bias / walk in the field's own unit: finite squares and sums


class Strict(BaseModel):
    """Unknown keys refused, NaN and infinity refused in every float field, frozen; a number
    field takes numbers only (`_not_a_number`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name) if isinstance(name, str) else None
                if info is not None and (allowed := _not_a_number(info.annotation, value)):
                    raise FieldProblem(name, value, allowed)
        return data


def _kinds(tp: Any) -> set[Any]:
    """The scalar types an annotation admits (`object` for anything else)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _kinds(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_kinds(a) for a in get_args(tp)))
    if origin is Literal:
        return {type(v) for v in get_args(tp)}
    return {tp} if tp in (int, float, bool, str, type(None)) else {object}


def _not_a_number(tp: Any, value: Any) -> str | None:
    """What is allowed, where a number field (or a list of numbers) got true/false or a string:
    pydantic's lax mode reads `rate_hz: true` as 1 Hz and `"100"` as 100, which hides a typo
    or a quoting mistake. Strict mode would also refuse YAML's lists for tuples, so only this
    is checked. Exponent floats such as 1e-3 are numbers already (`errors._InputLoader`)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _not_a_number(get_args(tp)[0], value)
    if origin in (Union, types.UnionType) and isinstance(value, list | tuple):
        inner = [a for a in get_args(tp) if get_origin(a) in (list, tuple)]
        return _not_a_number(inner[0], value) if len(inner) == 1 else None
    if origin in (list, tuple) and isinstance(value, list | tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        if origin is list or len(args) != len(get_args(tp)):  # list[X] or tuple[X, ...]
            args = args * len(value)
        for item_tp, item in zip(args, value, strict=False):
            if found := _not_a_number(item_tp, item):
                return found
        return None
    kinds = _kinds(tp)
    if object in kinds or not kinds & {int, float}:
        return None
    if isinstance(value, bool) and bool not in kinds:
        return "expected a number, not true/false"
    if isinstance(value, str) and str not in kinds:
        return "expected a number, not a string (remove the quotes)"
    return None


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

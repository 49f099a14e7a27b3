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
from collections.abc import Callable
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
            for name, check in _plan(cls).items():
                if name in data and (allowed := check(data[name])):
                    raise FieldProblem(name, data[name], allowed)
        return data


Check = Callable[[Any], "str | None"]
_PLANS: dict[type, dict[str, Check]] = {}


def _plan(cls: type[BaseModel]) -> dict[str, Check]:
    """Each number field's check, built once per model from its annotations (a world of
    thousands of objects or an actor's 100,000 waypoints is checked in plain loops)."""
    if cls not in _PLANS:
        checks = ((n, _checker(f.annotation)) for n, f in cls.model_fields.items())
        _PLANS[cls] = {n: c for n, c in checks if c is not None}
    return _PLANS[cls]


def _checker(tp: Any) -> Check | None:
    """What is allowed, where a number field (or a list of numbers) of type `tp` got true/false
    or a string; None where `tp` holds no number. pydantic's lax mode reads `rate_hz: true` as
    1 Hz and `"100"` as 100, which hides a typo or a quoting mistake; its strict mode would
    also refuse YAML's lists for tuples, so only this is checked. Exponent floats such as 1e-3
    are numbers already (`errors._InputLoader`)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _checker(get_args(tp)[0])
    if origin in (list, tuple):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        if origin is list or len(args) != len(get_args(tp)):  # list[X] or tuple[X, ...]
            each = _checker(args[0]) if args else None
            return None if each is None else _each(each)
        items = [_checker(a) for a in args]
        return _items(items) if any(items) else None
    if origin in (Union, types.UnionType):
        members = get_args(tp)
        seqs = [a for a in members if get_origin(_bare(a)) in (list, tuple)]
        seq = _checker(seqs[0]) if len(seqs) == 1 else None
        scalar = _scalar([a for a in members if a not in seqs])
        if seq is None and scalar is None:
            return None

        def either(v: Any) -> str | None:
            check = seq if isinstance(v, list | tuple) else scalar
            return check(v) if check is not None else None

        return either
    return _scalar([tp])


def _bare(tp: Any) -> Any:
    return _bare(get_args(tp)[0]) if get_origin(tp) is Annotated else tp


def _each(check: Check) -> Check:
    def run(v: Any) -> str | None:
        if isinstance(v, list | tuple):
            for x in v:
                if found := check(x):
                    return found
        return None

    return run


def _items(checks: list[Check | None]) -> Check:
    def run(v: Any) -> str | None:
        if isinstance(v, list | tuple):
            for check, x in zip(checks, v, strict=False):
                if check is not None and (found := check(x)):
                    return found
        return None

    return run


def _scalar(members: list[Any]) -> Check | None:
    """The check of a value of one of `members` (types, Annotated types, Literals), where one
    of them is a number; a Literal's words ("auto") are the only strings it then takes."""
    kinds: set[Any] = set()
    words: set[str] = set()
    for m in map(_bare, members):
        if get_origin(m) is Literal:
            words |= {v for v in get_args(m) if isinstance(v, str)}
            kinds |= {type(v) for v in get_args(m) if not isinstance(v, str)}
        else:
            kinds.add(m if m in (int, float, bool, str, type(None)) else object)
    if object in kinds or not kinds & {int, float}:
        return None
    takes_bool, takes_str = bool in kinds, str in kinds
    also = f" or one of {', '.join(map(repr, sorted(words)))}" if words else ""

    def check(v: Any) -> str | None:
        if isinstance(v, bool) and not takes_bool:
            return f"expected a number{also}, not true/false"
        if isinstance(v, str) and not takes_str and v not in words:
            quotes = "" if words else " (remove the quotes)"
            return f"expected a number{also}, not a string{quotes}"
        return None

    return check


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

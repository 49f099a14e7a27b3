"""Both runs' engine truth, read from their bags in log order, decoded as the verifier decodes
it, and paired capture by capture (by sensor, part and header.stamp)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from simconform.errors import UserError
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec, Spec
from simconform.verify.compare.camera import depth_array


def _truth_parts(spec: Spec) -> dict[str, tuple[str, str]]:
    """truth topic -> (sensor, part) for every truth topic of the spec."""
    out = {}
    for name, s in spec.sensors.items():
        topic = spec.data_topics(name)[1]
        out[topic] = (name, "image" if isinstance(s, CameraSpec) else "main")
        if isinstance(s, CameraSpec) and s.depth:
            out[f"/truth{spec.topic(name)}/depth"] = (name, "depth")
    return out


def _decoder(s, part: str) -> Callable[[Any], Any]:
    """The verifier's decoding of each truth message."""
    from simconform.bag.messages import image_array, odom_pose
    from simconform.verify.metrics import GnssAccumulator, ImuAccumulator, LidarAccumulator

    if isinstance(s, LidarSpec):
        return LidarAccumulator.decode
    if isinstance(s, ImuSpec):
        return ImuAccumulator.decode
    if isinstance(s, GnssSpec):
        return GnssAccumulator.decode
    if isinstance(s, OdomSpec):
        return lambda msg: (lambda o: np.array([o.x, o.y, o.yaw]))(odom_pose(msg))
    if isinstance(s, CameraSpec):
        return depth_array if part == "depth" else image_array
    raise TypeError(type(s).__name__)


def _open_bag(bag: Path):
    from simconform.bag.messages import TYPESTORE
    from simconform.bag.reader import open_bag

    return open_bag(bag, typestore=TYPESTORE)


def _truth_stream(
    bag: Path, parts: dict[str, tuple[str, str]], decode: dict, notes: list[str], label: str
) -> Iterator[tuple[int, tuple[str, str, int], Any]]:
    """(log_ns, (sensor, part, stamp), decoded value) of every truth message, in log order."""
    from simconform.bag.messages import stamp_ns
    from simconform.bag.reader import SourceBag

    src = SourceBag(bag)  # an MCAP bag's chunks are checked: a damaged one is skipped
    try:
        present = {c.topic for c in src.connections}
        missing = sorted(set(parts) - present)
        if missing:
            raise UserError(
                bag,
                "topics",
                missing[0],
                f"expected the truth topic in the bag (has: {', '.join(sorted(present))})",
            )
        notes += [f"run {label}: damaged, not compared: {d.text()}" for d in src.damaged]
        for topic, msgtype, log_ns, raw in src.messages(set(parts)):
            msg = src.deserialize(raw, msgtype)
            sensor, part = parts[topic]
            key = (sensor, part, stamp_ns(msg.header))
            try:
                value = decode[(sensor, part)](msg)
            except ValueError as exc:
                raise UserError(bag, topic, key[2], str(exc)) from None
            yield log_ns, key, value
        if src.stop_reason is not None:  # cut off mid-write: keep what was readable
            notes.append(f"run {label}: bag cut off ({src.stop_reason})")
    finally:
        src.close()


def paired_truth(
    bag_a: Path, bag_b: Path, spec: Spec, notes: list[str]
) -> Iterator[tuple[tuple[str, str, int], Any, Any] | tuple[str, dict]]:
    """Merge both truth streams by log time and yield (key, value_a, value_b) for every key
    present in both; at the end yield ("unpaired", {(sensor, part): [only_a, only_b]})."""
    parts = _truth_parts(spec)
    decode = {p: _decoder(spec.sensors[p[0]], p[1]) for p in parts.values()}
    gens = [
        _truth_stream(bag_a, parts, decode, notes, "A"),
        _truth_stream(bag_b, parts, decode, notes, "B"),
    ]
    with contextlib.ExitStack() as stack:
        for g in gens:
            stack.callback(g.close)
        heads = [next(g, None) for g in gens]
        pending: list[dict] = [{}, {}]
        while heads[0] is not None or heads[1] is not None:
            side = (
                0
                if heads[1] is None or (heads[0] is not None and heads[0][0] <= heads[1][0])
                else 1
            )
            _, key, value = heads[side]
            other = pending[1 - side]
            if key in other:
                v_other = other.pop(key)
                yield (key, value, v_other) if side == 0 else (key, v_other, value)
            else:
                pending[side][key] = value
            heads[side] = next(gens[side], None)
    left: dict[tuple[str, str], list[int]] = {}
    for side in (0, 1):
        for sensor, part, _ in pending[side]:
            left.setdefault((sensor, part), [0, 0])[side] += 1
    yield "unpaired", left

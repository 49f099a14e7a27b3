"""Read a run's bag and pair each published sample with its truth by (sensor, capture stamp).

The bag is read once in log-time order. A truth message is always logged at its capture time,
before the published copy (log time = capture + latency), so pending truths are held by stamp
until their published copy arrives; those never matched are the dropped samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from simconform.bag.messages import TYPESTORE, stamp_ns
from simconform.bag.reader import open_bag
from simconform.errors import UserError


@dataclass
class Pair:
    stamp_ns: int
    log_ns: int
    truth: object
    published: object


@dataclass
class Unpaired:
    """A truth sample whose published copy never came (sample dropout)."""

    stamp_ns: int
    truth: object


@dataclass
class BagSummary:
    readable_until_ns: int | None = None
    truncated: str | None = None
    messages: int = 0


def stream_pairs(
    bag: Path,
    topics: dict[str, tuple[str, str]],
    decode: dict[str, Callable[[object], object]],
    summary: BagSummary,
) -> Iterator[tuple[str, Pair | Unpaired]]:
    """Yield (sensor, Pair) as matches arrive, then (sensor, Unpaired) for every leftover truth.

    topics maps sensor name -> (published topic, truth topic). `decode` turns a deserialized
    message into the compact form the sensor's accumulator wants.
    """
    role = {}
    for sensor, (pub, truth_topic) in topics.items():
        role[pub] = (sensor, False)
        role[truth_topic] = (sensor, True)
    wanted = set(role)
    pending: dict[str, dict[int, object]] = {s: {} for s in topics}
    reader = open_bag(bag, typestore=TYPESTORE)
    try:
        present = {c.topic for c in reader.connections}
        missing = sorted(wanted - present)
        if missing:
            raise UserError(
                bag,
                "topics",
                missing[0],
                f"expected the topic in the bag (has: {', '.join(sorted(present))})",
            )
        conns = [c for c in reader.connections if c.topic in wanted]
        it = reader.messages(connections=conns)
        while True:
            try:
                conn, log_ns, raw = next(it)
            except StopIteration:
                break
            except Exception as exc:  # a bag cut off mid-write: keep what was readable
                summary.truncated = f"{type(exc).__name__}: {exc}"
                break
            summary.messages += 1
            summary.readable_until_ns = log_ns
            msg = reader.deserialize(raw, conn.msgtype)
            sensor, truth = role[conn.topic]
            st = stamp_ns(msg.header)
            value = decode[sensor](msg)
            if truth:
                pending[sensor][st] = value
            elif st in pending[sensor]:
                yield sensor, Pair(st, log_ns, pending[sensor].pop(st), value)
            else:
                raise UserError(
                    bag,
                    conn.topic,
                    st,
                    "published sample has no truth sample with "
                    "the same header.stamp (expected one per capture)",
                )
    finally:
        reader.close()
    for sensor, left in pending.items():
        for st in sorted(left):
            yield sensor, Unpaired(st, left[st])

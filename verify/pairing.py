"""Read a run's bag and pair each published sample with its truth by (sensor, capture stamp).

The bag is read once in log-time order. A truth message is always logged at its capture time,
before the published copy (log time = capture + latency), so pending truths are held by stamp
until their published copy arrives; those never matched are the dropped samples. A truth is
held for the sensor's largest latency and HOLD_SLACK_NS more, then given up as dropped (so a
camera's dropped frames are not held to the end of the run); a published copy later than that
is an error that says so.

Where the bag has gaps (verify/integrity.py: damaged chunks, the part after a killed run's last
complete chunk) a sample is left out, not judged: a published copy whose truth lies in a gap,
a pair whose stamp does, and a truth whose published copy may have been logged in one (stamp to
stamp + the sensor's largest latency); `BagSummary.excluded` counts them per sensor.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from simconform.bag.messages import stamp_ns
from simconform.bag.reader import SourceBag
from simconform.errors import UserError

HOLD_SLACK_NS = 10_000_000_000  # a truth waits this long past the largest latency
HOLD_CHECK_NS = 1_000_000_000  # how often (log time) a sensor's old truths are looked for


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
    excluded: dict[str, int] = field(default_factory=dict)


def stream_pairs(
    src: SourceBag,
    topics: dict[str, tuple[str, str]],
    decode: dict[str, Callable[[object], object]],
    summary: BagSummary,
    in_gap: Callable[[int, int], bool] | None = None,
    max_latency_ns: dict[str, int] | None = None,
    on_damage: Callable[[str, int, str], None] | None = None,
    ahead: int = 0,
    defer: frozenset[str] = frozenset(),
) -> Iterator[tuple[str, Pair | Unpaired]]:
    """Yield (sensor, Pair) as matches arrive, then (sensor, Unpaired) for every leftover truth.

    topics maps sensor name -> (published topic, truth topic). `decode` turns a deserialized
    message into the compact form the sensor's accumulator wants. `in_gap(lo, hi)`: whether a
    gap of the bag overlaps [lo, hi] (log time); `max_latency_ns`: per sensor, the largest
    delay its spec allows between capture and publish. A message that does not deserialize
    (a bag without checksums can hold damaged bytes) goes to `on_damage(topic, log_ns, why)`,
    which makes its log time a gap, instead of raising. `ahead` > 0: a thread reads and
    deserializes up to that many messages ahead of the decoding and pairing (`_ahead`).
    `defer`: topics whose large messages may come with their data not yet decompressed
    (SourceBag.messages).
    """
    role = {}
    for sensor, (pub, truth_topic) in topics.items():
        role[pub] = (sensor, False)
        role[truth_topic] = (sensor, True)
    wanted = set(role)
    pending: dict[str, dict[int, object]] = {s: {} for s in topics}
    checked: dict[str, int] = {}
    gap = in_gap or (lambda _lo, _hi: False)
    late = max_latency_ns or {}
    summary.excluded = dict.fromkeys(topics, 0)
    present = {c.topic for c in src.connections}
    missing = sorted(wanted - present)
    if missing:
        raise UserError(
            src.path,
            "topics",
            missing[0],
            f"expected the topic in the bag (has: {', '.join(sorted(present))})",
        )
    read = _deserialized(src, wanted, defer)
    # closed on leaving (an error, or the caller closing this generator: verify/reading.py),
    # not when the error is freed: the read-ahead thread stops before the bag is closed
    with contextlib.closing(_ahead(read, ahead) if ahead else read) as stream:
        for topic, log_ns, msg, damage in stream:
            summary.messages += 1
            summary.readable_until_ns = log_ns
            sensor, truth = role[topic]
            if damage is None:
                try:
                    st = stamp_ns(msg.header)
                    value = decode[sensor](msg)
                except Exception as exc:  # rosbags and numpy raise many types for damaged bytes
                    damage = exc
            if damage is not None:
                if on_damage is None:
                    raise damage
                on_damage(topic, log_ns, f"{type(damage).__name__}: {damage}")
                continue
            if truth:
                pending[sensor][st] = value
                if log_ns - checked.get(sensor, 0) > HOLD_CHECK_NS:
                    checked[sensor] = log_ns
                    yield from _release_old(sensor, pending, log_ns, late, gap, summary)
            elif st in pending[sensor]:
                item = Pair(st, log_ns, pending[sensor].pop(st), value)
                if gap(st, st):
                    summary.excluded[sensor] += 1
                else:
                    yield sensor, item
            elif gap(st, st):  # its truth was lost with a damaged chunk
                summary.excluded[sensor] += 1
            elif st < log_ns - late.get(sensor, 0) - HOLD_SLACK_NS:  # its truth given up
                raise UserError(
                    src.path,
                    topic,
                    st,
                    f"published {(log_ns - st) / 1e9:.3g} s after its capture: more than "
                    f"{HOLD_SLACK_NS / 1e9:g} s beyond the spec's largest latency, the longest a "
                    "truth sample is held for its published copy",
                )
            else:
                raise UserError(
                    src.path,
                    topic,
                    st,
                    "published sample has no truth sample with "
                    "the same header.stamp (expected one per capture)",
                )
    summary.truncated = src.stop_reason
    for sensor, left in pending.items():
        for st in sorted(left):
            if gap(st, st + late.get(sensor, 0)):  # its published copy may lie in a gap
                summary.excluded[sensor] += 1
            else:
                yield sensor, Unpaired(st, left[st])


def _release_old(
    sensor: str,
    pending: dict[str, dict[int, object]],
    log_ns: int,
    late: dict[str, int],
    gap: Callable[[int, int], bool],
    summary: BagSummary,
) -> Iterator[tuple[str, Unpaired]]:
    """Truths whose published copy can no longer come (logged at most the sensor's largest
    latency after its stamp; HOLD_SLACK_NS more allowed) are yielded as dropped now, not at
    the end: a camera's dropped frames are not held for the whole run."""
    limit = log_ns - late.get(sensor, 0) - HOLD_SLACK_NS
    old = sorted(st for st in pending[sensor] if st < limit)
    for st in old:
        value = pending[sensor].pop(st)
        if gap(st, st + late.get(sensor, 0)):
            summary.excluded[sensor] += 1
        else:
            yield sensor, Unpaired(st, value)


def _deserialized(
    src: SourceBag, wanted: set[str], defer: frozenset[str] = frozenset()
) -> Generator[tuple, None, None]:
    """(topic, log_ns, message, None) for each message of `wanted`, or (topic, log_ns, None,
    the exception) for one that does not deserialize."""
    for topic, msgtype, log_ns, raw in src.messages(wanted, defer):
        try:
            yield topic, log_ns, src.deserialize(raw, msgtype), None
        except Exception as exc:  # rosbags raises many types for damaged bytes
            yield topic, log_ns, None, exc


def _ahead(items: Generator, depth: int) -> Iterator:
    """`items` in order, produced by a thread up to `depth` items ahead of the caller.

    For a camera's reader: zstd's decompression and libjpeg-turbo's decode release the GIL,
    so the thread reads (decompresses) the next frames while the caller decodes and
    accumulates one (whose compiled sums release it too): the demo camera's reader took 3.7-4.3
    s instead of 5.8-6.8 s with a core to itself (2026-12-06). An exception of `items` is
    raised here, in order; a caller that stops early (an error, Ctrl-C) stops the thread, which
    closes `items`, before returning, so the bag is not read after its reader closes it."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as exc:  # raised again in the caller's thread
            put((False, exc))
        finally:
            items.close()

    thread = threading.Thread(target=produce, name="simconform-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            more, item = q.get()
            if more:
                yield item
            elif item is None:
                return
            else:
                raise item
    finally:
        stop.set()
        thread.join()

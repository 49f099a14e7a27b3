"""Read a run's bag into the verifier's accumulators: the integrity check, then every sample
paired with its truth and accumulated per sensor (verify/verifier.py makes the report).

A finished run's MCAP bag is read once, checked as it is read; any doubt sends it through the
checked reading (docs/integrity.md, "One pass").
"""

from __future__ import annotations

from pathlib import Path

from simconform.bag.reader import SourceBag
from simconform.errors import UserError
from simconform.progress import progress_bar
from simconform.spec import Spec
from simconform.verify import tolerances as tl
from simconform.verify.integrity import check_run, run_state
from simconform.verify.metrics import make_accumulator
from simconform.verify.pairing import BagSummary, stream_pairs
from simconform.world import Origin

READ_AHEAD = 4  # messages a camera's reader reads ahead of its decoding (verify/pairing.py _ahead)


def read_run(
    run_dir: Path,
    manifest: dict,
    spec: Spec,
    origin: Origin,
    level: float,
    progress,
    sensors: tuple[str, ...] | None = None,
    files: bool = True,
):
    """(integrity, accumulators, bag summary) of the run's bag. A finished run's MCAP bag is
    read once, its checks made while it is read (bag/reader.py `one_pass`); only where that
    reading finds damage, or stops on an error that damage may explain, is the bag read
    again the checked way, which locates the damage before any sample is paired. `sensors`:
    judge only these (verify/parallel.py), every sensor for None. `files`: check the run's
    files against run.json's SHA-256 (verify/parallel.py's worker leaves it to the main
    process)."""
    src = open_run_bag(run_dir, manifest, run_state(manifest) == "finished")
    try:
        found, accs, summary = _judge(
            run_dir, manifest, spec, origin, level, progress, src, sensors, files
        )
    except UserError:
        if not src.one_pass:
            raise
        found = None  # read again below: the checked reading raises it if it stands
    finally:
        src.close()
    if not src.one_pass:
        return found, accs, summary
    bag_ok = found is not None and all(
        v == "ok" for k, v in found.files.items() if k.startswith("bag/")
    )
    if found is not None and bag_ok and src.one_pass_clean:
        found.chunks = src.chunks
        return found, accs, summary
    src = open_run_bag(run_dir, manifest)
    try:
        return _judge(run_dir, manifest, spec, origin, level, progress, src, sensors, files)
    finally:
        src.close()


def _judge(run_dir: Path, manifest: dict, spec: Spec, origin: Origin, level: float, progress,
           src: SourceBag, sensors: tuple[str, ...] | None, files: bool = True):  # fmt: skip
    """Check the run (verify/integrity.py) and pair and accumulate every sample of `src` of
    `sensors` (all for None)."""
    found = check_run(run_dir, manifest, src, files)
    start = int(manifest["start_ns"])
    end = found.span_end_ns if found.span_end_ns is not None else int(manifest["end_ns"])
    duration_s = max(end - start, 0) / 1e9
    chosen = {n: s for n, s in spec.sensors.items() if sensors is None or n in sensors}
    accs = {n: make_accumulator(n, s, level, duration_s, origin) for n, s in chosen.items()}
    for acc in accs.values():
        acc.gaps = found.gaps
    topics = {n: spec.data_topics(n) for n in chosen}
    decode = {n: type(a).decode for n, a in accs.items()}
    late = {n: round(tl.latency_max_ms(s.latency) * 1e6) for n, s in chosen.items()}
    summary = BagSummary()
    ahead = READ_AHEAD if any(s.type == "camera" for s in chosen.values()) else 0
    # a JPEG camera compares a sample of its frames with their truth: the others' truth images
    # are read only as far as their headers (bag/deferred.py)
    defer = frozenset(
        topics[n][1] for n, s in chosen.items() if s.type == "camera" and s.encoding == "jpeg"
    )
    pairs = stream_pairs(
        src, topics, decode, summary, found.excluded_at, late, found.undecodable, ahead, defer
    )
    total = sum(v for n, v in (manifest.get("captures") or {}).items() if n in chosen) or 1
    bar = progress_bar(total, progress, "verifying")
    try:
        for i, (sensor, item) in enumerate(() if found.nothing_judged else pairs):
            if bar is not None and i % 50 == 0:
                bar.update(min(i, total))
            try:
                accs[sensor].add(item)
            except ValueError as exc:
                raise UserError(
                    run_dir / "bag",
                    spec.data_topics(sensor)[0],
                    getattr(item, "stamp_ns", None),
                    str(exc),
                ) from None
        if bar is not None:  # every sample read (the updates above come every 50th)
            bar.update(total)
    finally:
        pairs.close()  # now, not when an error is freed: its read-ahead thread stops first
        if bar is not None:
            bar.close()
    return found, accs, summary


def open_run_bag(run_dir: Path, manifest: dict, one_pass: bool = False) -> SourceBag:
    """The run's bag, checked (or, `one_pass`, to be checked as it is read: bag/reader.py);
    a killed run whose bag holds nothing readable says so."""
    try:
        return SourceBag(run_dir / "bag", one_pass)
    except UserError as exc:
        if run_state(manifest) != "recording":
            raise
        raise UserError(
            run_dir / "bag",
            "bag",
            exc.value,
            "the run was killed before its bag held a complete chunk (or a full disk stopped "
            "it then; run.json still says it is recording): there is nothing to verify",
        ) from None

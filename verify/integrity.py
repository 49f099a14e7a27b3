"""What verify may trust in a run folder, checked before any metric is computed.

- Files: run.json's `outputs` (written when the run ends, simconform/run.py) holds the SHA-256
  and size of every file in bag/ and gt/; each is compared. A run written before checksums
  existed, or killed before it ended, has none: "not recorded".
- The bag: SourceBag checks an MCAP bag chunk by chunk (bag/salvage/mcap.py: CRC of every
  chunk, of the data section and of the summary) and skips a damaged chunk; each skipped chunk
  becomes a `Gap`, the log-time span of the messages it held. Where a bag file differs from
  its SHA-256 and its damage cannot be located (sqlite3 storage has no per-message checksum;
  an MCAP chunk without a CRC, written before CRCs), the whole bag is one gap: no metric is
  computed from it.
- A replay's source: run.json's `data_gaps` (adapters/replay/write.py) lists the source bag's
  damaged chunks and, for a file cut off, what follows its last message; they are gaps too.
- The span: a run that ended early (a signal, an engine error: run.json's state interrupted
  or failed) is judged over the span it recorded (run.json's recorded_end_ns), not the
  planned one; a run killed outright (state still "recording", no end written) is judged over
  what its bag holds up to the last complete chunk, and everything after it is a gap.

A sample is left out (not judged, counted in `excluded`) when its capture stamp lies in a gap,
or when its published copy may have been logged in one (stamp to stamp + the spec's largest
latency): a published copy lost in a damaged chunk is not a dropout. The verdict of such a
run covers only the intact, recorded part (`scope`), and `simconform verify` exits 4 unless
that part fails outright (cli/__init__.py).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from simconform.bag.reader import SourceBag
from simconform.provenance import sha256


@dataclass
class Gap:
    """Log-time span [start_ns, end_ns] whose messages are lost or not trusted (None: open)."""

    start_ns: int | None
    end_ns: int | None
    reason: str
    kind: str = "damaged"  # or "not recorded": after a killed run's last complete chunk

    def overlaps(self, lo: int, hi: int) -> bool:
        return (self.start_ns is None or self.start_ns <= hi) and (
            self.end_ns is None or lo <= self.end_ns
        )

    def as_dict(self) -> dict:
        sec = [None if t is None else t / 1e9 for t in (self.start_ns, self.end_ns)]
        return {"start_s": sec[0], "end_s": sec[1], "kind": self.kind, "reason": self.reason}


@dataclass
class RunIntegrity:
    """What the checks found; `scope` says what the verdict covers."""

    files: dict[str, str] = field(default_factory=dict)  # path -> ok | changed | missing
    outputs_recorded: bool = False
    gaps: list[Gap] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chunks: dict | None = None
    read_with: str = "rosbags"
    state: str = "finished"
    interrupted: str | None = None  # "interrupted at t = ... s (why)"
    span_end_ns: int | None = None  # end of the span judged (None: the planned end)
    excluded: dict[str, int] = field(default_factory=dict)

    @property
    def damaged(self) -> bool:
        return any(v != "ok" for v in self.files.values()) or any(
            g.kind == "damaged" for g in self.gaps
        )

    @property
    def scope(self) -> str:
        if self.damaged:
            return "intact part only"
        if self.interrupted is not None:
            return "recorded part only"
        return "whole run"

    def excluded_at(self, lo: int, hi: int) -> bool:
        return any(g.overlaps(lo, hi) for g in self.gaps)

    @property
    def nothing_judged(self) -> bool:
        return any(g.start_ns is None and g.end_ns is None for g in self.gaps)

    def undecodable(self, topic: str, log_ns: int, why: str) -> None:
        """A message that does not deserialize: its log time becomes a gap."""
        self.gaps.append(
            Gap(log_ns, log_ns, f"message on {topic} logged {log_ns / 1e9:.9g} s: {why}")
        )

    def as_dict(self) -> dict:
        changed = sorted(k for k, v in self.files.items() if v == "changed")
        missing = sorted(k for k, v in self.files.items() if v == "missing")
        if not self.outputs_recorded:
            status = "not recorded" if not self.damaged else "damaged"
        else:
            status = "damaged" if self.damaged else "intact"
        return {
            "status": status,
            "scope": self.scope,
            "outputs_checked": len(self.files),
            "outputs_changed": changed,
            "outputs_missing": missing,
            "read_with": self.read_with,
            "chunks": self.chunks,
            "gaps": [g.as_dict() for g in self.gaps],
            "excluded_samples": dict(self.excluded),
            "notes": list(self.notes),
            "findings": self.lines(),
        }

    def lines(self) -> list[str]:
        """One line per finding, for the terminal and report.md."""
        out = []
        if self.interrupted:
            out.append(self.interrupted)
        for path, v in sorted(self.files.items()):
            if v == "missing":
                out.append(f"{path}: missing (run.json lists it)")
            elif v == "changed":
                out.append(f"{path}: differs from the SHA-256 run.json recorded")
        out += [f"damaged: {g.reason}" for g in self.gaps if g.kind == "damaged"]
        out += self.notes
        if self.excluded:
            left = ", ".join(f"{n} {s}" for s, n in sorted(self.excluded.items()) if n)
            if left:
                out.append(f"samples left out (truth or published copy may be in a gap): {left}")
        return out


def check_outputs(run_dir: Path, manifest: dict, found: RunIntegrity) -> None:
    """Compare every file run.json lists under `outputs` with its SHA-256 and size."""
    outputs = manifest.get("outputs")
    if not isinstance(outputs, dict):
        return
    found.outputs_recorded = True
    for rel, want in sorted(outputs.items()):
        path = run_dir / rel
        if not path.is_file():
            found.files[rel] = "missing"
            continue
        same = path.stat().st_size == want.get("bytes") and sha256(path) == want.get("sha256")
        found.files[rel] = "ok" if same else "changed"


def run_state(manifest: dict) -> str:
    """finished | interrupted | failed | recording (killed, or still running); runs written
    before run.json had a state: from `complete` and `stopped_by`."""
    state = manifest.get("state")
    if state in ("finished", "interrupted", "failed", "recording"):
        return state
    if manifest.get("complete"):
        return "finished"
    return "interrupted" if manifest.get("stopped_by") else "failed"


def check_run(run_dir: Path, manifest: dict, src: SourceBag, files: bool = True) -> RunIntegrity:
    """The files (unless not `files`: verify/parallel.py's second reader, whose findings are
    compared with the first's), the bag (already opened: its chunks were checked) and the
    recorded span."""
    found = RunIntegrity(read_with=src.read_with, chunks=src.chunks, state=run_state(manifest))
    if files:
        check_outputs(run_dir, manifest, found)
    found.notes += src.notes
    start = int(manifest["start_ns"])
    found.gaps += [Gap(d.start_ns, d.end_ns, d.text(start)) for d in src.damaged]
    for g in manifest.get("data_gaps") or []:  # a replay's source: damaged or cut off
        found.gaps.append(Gap(g.get("start_ns"), g.get("end_ns"), g["reason"], g["kind"]))
        if g["kind"] == "not recorded":
            found.interrupted = f"source incomplete: {g['reason']}"
    bag_files = {k: v for k, v in found.files.items() if k.startswith("bag/")}
    data_changed = [
        k for k, v in bag_files.items() if v != "ok" and not k.endswith("metadata.yaml")
    ]
    chunks = src.chunks or {"total": 0, "with_crc": 0}
    all_crc = chunks["total"] > 0 and chunks["total"] == chunks["with_crc"]
    if data_changed and not all_crc:  # the damage cannot be located: the whole bag is a gap
        why = (
            "sqlite3 storage has no per-message checksum"
            if src.chunks is None
            else "its chunks carry no CRC"
        )
        found.gaps = [
            Gap(
                None,
                None,
                f"{', '.join(data_changed)} differs from its SHA-256 and {why}: the damage "
                "cannot be located, so nothing in the bag is judged",
            )
        ]
    elif data_changed and not src.damaged and not src.notes:
        found.notes.append(
            f"{', '.join(data_changed)} differs from its SHA-256 outside the message data; "
            "every chunk matches its CRC"
        )
    cut = src.ends_early
    if found.state != "recording" and cut is not None:
        # the writer closed this bag (run.json says so), so a file that ends early was cut
        # afterwards: damage, and nothing after its last complete message is judged (the span
        # would read as dropped samples)
        last = src.last_log_ns
        found.gaps.append(
            Gap(last if last is not None else start, None, f"the bag ends early ({cut})")
        )
    if found.state in ("interrupted", "failed"):
        end = manifest.get("recorded_end_ns")
        why = manifest.get("stopped_by") or manifest.get("error") or "the run failed"
        if end is not None:
            found.span_end_ns = int(end)
            found.interrupted = f"interrupted at t = {_t(int(end) - start)} s ({why})"
        else:  # runs written before recorded_end_ns: the span ends with the last capture
            found.interrupted = f"interrupted ({why}); run.json does not say when"
    elif found.state == "recording":
        last = src.last_log_ns
        end = last if last is not None else start
        found.span_end_ns = end
        found.gaps.append(Gap(end, None, "after the last complete chunk", "not recorded"))
        alive = _alive(manifest)
        found.interrupted = (
            f"recorded up to t = {_t(end - start)} s so far: run.json says it is "
            f"recording and process {alive} on this machine is alive; this is a snapshot of a "
            "run in progress"
            if alive is not None
            else f"interrupted at t = {_t(end - start)} s: the run was killed, or a "
            "full disk kept it from marking run.json (which still says it is recording); its "
            "bag was read up to its last complete record"
        )
    return found


def _alive(manifest: dict) -> int | None:
    """The recording process's pid when it is still alive on this machine."""
    pid, host = manifest.get("pid"), manifest.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except PermissionError:
        return pid  # it exists, under another user
    except OSError:
        return None
    return pid


def _t(ns: int) -> str:
    """Seconds into the run, to the ns: 1.62, not 1.62000000; 0.000000001, not 1e-09 (a run
    stopped after its first instant)."""
    return f"{ns / 1e9:.9g}" if ns >= 100_000 or ns <= 0 else f"{ns / 1e9:.9f}".rstrip("0")

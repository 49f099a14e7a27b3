"""Open any bag for reading: our runs' bags and foreign ones, through rosbags' AnyReader.

`open_bag` is the one way to open a bag (a rosbag2 folder with MCAP or sqlite3 storage, an
.mcap file or a ROS 1 .bag file) with one UserError for a bag rosbags cannot open. A recorded
bag may be cut off mid-write; `SourceBag` then falls back to the salvage scans of
simconform.bag.salvage, which read it up to the last complete message.

`SourceBag` checks an MCAP bag first (bag.salvage.mcap.McapScan: every chunk's CRC, the data
and summary CRCs): a bag with a damaged chunk is read by that scan, which skips the damaged
chunks and lists them in `damaged` (rosbags would stop for good at the first one), as is a bag
whose data or summary CRC fails (rosbags finds chunks through the summary); an intact bag is
read by rosbags, as any other. `SourceBag(path, one_pass=True)` (verify, for a finished run)
reads a closed MCAP bag once with the checked scan, the checks made as it reads; the caller
reads again the checked way unless `one_pass_clean` (docs/integrity.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.msg import normalize_msgtype
from rosbags.typesys.store import Typestore

from simconform.bag.deferred import IMAGE, Deferred, deferred_image
from simconform.bag.messages import TYPESTORE
from simconform.bag.salvage import Damage, McapScan, NotABag, Salvage, salvage_for
from simconform.bag.storage import OWN_CHUNK
from simconform.errors import UserError

BAG_KINDS = "expected a rosbag2 folder (MCAP or sqlite3), an .mcap file or a ROS 1 .bag file"


class UnreadableBag(UserError):
    """rosbags cannot open the bag; `reason` is its exception as "Type: message"."""

    def __init__(self, path: Path, exc: Exception) -> None:
        self.reason = f"{type(exc).__name__}: {exc}"
        super().__init__(path, "bag", str(path), f"expected a readable rosbag2 directory ({exc})")


def open_bag(path: Path, typestore: Typestore | None = None) -> AnyReader:
    """An open AnyReader on the bag at `path`; `typestore` deserializes the types the bag does
    not define itself (default: ours, ROS 1 Noetic's for a .bag file). Close it when done."""
    try:
        reader = AnyReader(
            [path], default_typestore=_default_store(path) if typestore is None else typestore
        )
        reader.open()
    except Exception as exc:  # rosbags raises many types for unreadable bags
        raise UnreadableBag(path, exc) from None
    return reader


def _default_store(path: Path) -> Typestore:
    return get_typestore(Stores.ROS1_NOETIC) if path.suffix == ".bag" else TYPESTORE


def _format_of(path: Path) -> str:
    if path.suffix == ".bag":
        return "rosbag1"
    if path.suffix == ".mcap" or any(path.glob("*.mcap")):
        return "rosbag2 (mcap)"
    return "rosbag2 (sqlite3)"


@dataclass
class SourceConnection:
    """One (topic, message type) pair of a source bag, however it was opened."""

    topic: str
    msgtype: str


class SourceBag:
    """A source bag opened with rosbags, or read by a sequential scan when rosbags cannot open
    it or when a chunk of its MCAP file is damaged. `messages` yields (topic, msgtype, log_ns,
    raw) in log order (scan: file order) and, when the read stops early, sets `stop_reason`
    instead of raising. `damaged`: the skipped stretches (Damage); `notes`: checks that failed
    outside the messages (data or summary CRC); `chunks`: MCAP chunks seen and how many carry a
    CRC (None for other storage). `raw` is bytes, or a read-only buffer for a message of
    OWN_CHUNK bytes or more read by the scan."""

    def __init__(self, path: Path, one_pass: bool = False) -> None:
        self.path = path
        self.one_pass = False  # read by the checked scan, its checks done while reading
        self.stop_reason: str | None = None
        self.open_error: str | None = None
        self.damaged: list[Damage] = []
        self.notes: list[str] = []
        self.chunks: dict[str, int] | None = None
        self._reader: AnyReader | None = None
        self._salvage: Salvage | None = None
        self._last: int | None = None
        if not path.exists():
            raise UserError(path, "bag", str(path), BAG_KINDS)
        if one_pass and self._open_one_pass(path):
            return
        checked = self._check_mcap(path)
        if checked is not None and (checked.damaged or checked.notes) and checked.clean_end:
            # rosbags would stop at the first damaged chunk, and it reads chunks through the
            # summary's index, which a failed data or summary CRC leaves in doubt
            self._use_scan(checked, "checked scan (damaged chunks skipped)")
            return
        try:
            reader = open_bag(path)
        except UnreadableBag as exc:
            self.open_error = exc.reason
            try:
                scan = checked if checked is not None else salvage_for(path)
            except NotABag as why:
                raise UserError(
                    path, "bag", str(path), f"{BAG_KINDS}; not readable ({self.open_error}; {why})"
                ) from None
            self._use_scan(scan, "salvage scan")
            return
        if checked is not None and (checked.damaged or checked.notes):
            reader.close()
            self._use_scan(checked, "checked scan (damaged chunks skipped)")
            return
        if checked is not None:
            checked.close()
        self._reader = reader
        self.format = _format_of(path)
        self.read_with = "rosbags"
        self.connections = [
            SourceConnection(c.topic, normalize_msgtype(c.msgtype)) for c in reader.connections
        ]

    def _check_mcap(self, path: Path) -> McapScan | None:
        """The checked scan of an MCAP bag (None for other storage or an unreadable file)."""
        files = [path] if path.suffix == ".mcap" else sorted(path.glob("*.mcap"))
        if not files or not all(f.is_file() for f in files):
            return None
        try:
            scan = McapScan(files)
        except NotABag:
            return None
        self.damaged, self.notes, self.chunks = scan.damaged, scan.notes, dict(scan.chunks)
        return scan

    def _open_one_pass(self, path: Path) -> bool:
        """A closed MCAP bag with an intact summary, read once by the checked scan: every check
        of `_check_mcap` is made as its messages are read, and `damaged`, `notes` and `chunks`
        are known when `messages` ends (`one_pass_clean` then says whether a checked reading
        would have gone the same way). Saves the separate checking pass (3.4 s of the demo's
        verification). False where the bag is not such a bag."""
        files = [path] if path.suffix == ".mcap" else sorted(path.glob("*.mcap"))
        if not files or not all(f.is_file() for f in files):
            return False
        try:
            scan = McapScan(files, prescan=False)
        except NotABag:
            return False
        if scan.notes:  # the summary failed its CRC: leave it to the checked reading
            scan.close()
            return False
        self.one_pass, self._order_ok = True, True
        self._use_scan(scan, "checked scan (one pass)")
        return True

    @property
    def one_pass_clean(self) -> bool:
        """After a one-pass `messages`: nothing damaged, every check passed, the whole data
        section read in log-time order (as rosbags reads an intact bag)."""
        s = self._salvage
        return (
            self.one_pass
            and s is not None
            and s.clean_end
            and self._order_ok
            and not self.damaged
            and not self.notes
        )

    def _use_scan(self, scan: Salvage, how: str) -> None:
        self._salvage = scan
        self.format = scan.format
        self.read_with = how
        self.connections = [SourceConnection(t, m) for t, m, _f, _d in scan.conns.values()]

    @property
    def ends_early(self) -> str | None:
        """Why the checked scan stopped before the file's regular end (a file cut off), known
        when the bag is opened; None where it ends regularly, or is read by rosbags or in one
        pass (whose `stop_reason` says so once `messages` ends)."""
        s = self._salvage
        if s is None or s.clean_end or self.one_pass:
            return None
        return s.stop_reason or "the scan stopped early"

    @property
    def last_log_ns(self) -> int | None:
        """Log time of the last message read: by the scan (any topic), or by `messages`."""
        return self._last if self._salvage is None else self._salvage.last_log_ns

    def types(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for c in self.connections:
            out.setdefault(c.topic, set()).add(c.msgtype)
        return out

    def messages(
        self, topics: set[str], defer: frozenset[str] = frozenset()
    ) -> Iterator[tuple[str, str, int, bytes]]:
        """(topic, msgtype, log ns, raw) of `topics`' messages. `defer`: topics whose messages
        alone in their chunks a one-pass reading yields as bag.deferred.Deferred (decompressed
        when their data is asked for; `deserialize` takes them)."""
        self.stop_reason = None
        if self._reader is not None:
            conns = [c for c in self._reader.connections if c.topic in topics]
            if not conns:
                return
            it = self._reader.messages(connections=conns)
            while True:
                try:
                    conn, log_ns, raw = next(it)
                except StopIteration:
                    return
                except Exception as exc:  # a damaged chunk inside a bag rosbags could open
                    self.stop_reason = f"read stopped: {type(exc).__name__}: {exc}"
                    return
                self._last = log_ns
                yield conn.topic, normalize_msgtype(conn.msgtype), log_ns, bytes(raw)
        else:
            assert self._salvage is not None
            s = self._salvage
            last = None
            assert isinstance(s, McapScan) or not self.one_pass
            for cid, log_ns, raw in s.scan(topics, defer) if self.one_pass else s.scan():
                topic, msgtype, _f, _d = s.conns[cid]
                if topic not in topics:
                    continue
                if self.one_pass:
                    if last is not None and log_ns < last:
                        self._order_ok = False  # rosbags would have sorted it: not one pass
                        break
                    last = log_ns
                # a view into its chunk, copied unless the message is about a chunk's size
                # (bag/storage.py OWN_CHUNK): a small view would hold its whole chunk alive,
                # while copying a truth image cost 0.22 ms of the 2026-12-06 host (0.45 s of
                # the demo's camera verification)
                big = isinstance(raw, Deferred) or len(raw) >= OWN_CHUNK
                yield topic, msgtype, log_ns, raw if big else bytes(raw)
            if not s.clean_end and not self.one_pass:
                self.stop_reason = f"{self.open_error}; {s.stop_reason}"
            self.damaged = s.damaged
            if self.one_pass:
                self.notes, self.chunks = s.notes, dict(s.chunks)

    def deserialize(self, raw: bytes | Deferred, msgtype: str) -> Any:
        """A message of `messages`; a Deferred Image as a DeferredImage where its header reads
        (bag/deferred.py), its pixels decompressed when asked for."""
        if isinstance(raw, Deferred):
            image = deferred_image(raw) if msgtype == IMAGE else None
            return image if image is not None else self.deserialize(raw.data(), msgtype)
        if self._reader is not None:
            return self._reader.deserialize(raw, msgtype)
        assert self._salvage is not None
        return self._salvage.deserialize(raw, msgtype)

    def close(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):
                self._reader.close()
        if self._salvage is not None:
            self._salvage.close()

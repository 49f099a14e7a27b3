"""Salvage readers for bags that no library opens: files cut off mid-write.

A recorder killed mid-write leaves an MCAP file without its summary, a sqlite3 database
without its b-tree interior pages or a ROS 1 bag without its index; rosbags then cannot open
the bag. `salvage_for` picks the scan for the bag's format, which reads the file's records in
order up to the last complete message (simconform.bag.reader.SourceBag falls back to it).

- base: the `Salvage` base class (file mapping, connections, typestore), `decompress`
- mcap: `McapScan`;  ros1: `Ros1Scan`;  sqlite: `SqliteScan` (and the SQLite page reader)
"""

from __future__ import annotations

from pathlib import Path

from simconform.bag.salvage.base import Damage, NotABag, Salvage
from simconform.bag.salvage.mcap import McapScan
from simconform.bag.salvage.ros1 import Ros1Scan
from simconform.bag.salvage.sqlite import SqliteScan


def salvage_for(path: Path) -> Salvage:
    """The scan for the bag at `path` (a rosbag2 folder, an .mcap, .db3, .bag or .bag.active
    file), already run once; NotABag where the file has no structure to salvage."""
    if path.is_dir():
        files = sorted(path.glob("*.mcap")) or sorted(path.glob("*.db3"))
        if not files:
            raise NotABag("no .mcap or .db3 file in the folder")
    else:
        files = [path]
    kind = ".bag" if files[0].name.endswith(".bag.active") else files[0].suffix
    if kind == ".mcap":
        return McapScan(files)
    if kind == ".db3":
        return SqliteScan(files)
    if kind == ".bag":
        return Ros1Scan(files)
    raise NotABag(f"unknown file kind {kind!r}")


__all__ = ["Damage", "McapScan", "NotABag", "Ros1Scan", "Salvage", "SqliteScan", "salvage_for"]

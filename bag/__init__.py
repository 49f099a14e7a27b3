"""Bags: the messages simconform writes and reads, writing them, and reading any bag.

- codec: zstd, from the standard library or its backport
- messages: our type store and the message builders and decoders
- writer: BagRecorder (rosbag2 MCAP/sqlite3 in log-time order), TumWriter
- storage: rosbags' writers with MCAP CRCs (chunks, data, summary) and sqlite3 committed as it
  goes, so a killed run keeps what it wrote
- reader: `open_bag` (rosbags' AnyReader, one UserError), SourceBag (any bag: MCAP checked
  chunk by chunk, salvaged if cut, damaged chunks skipped and listed)
- salvage/: sequential scans of MCAP, ROS 1 and sqlite3 files cut off mid-write; the MCAP scan
  checks every chunk's CRC and goes on past a damaged one
"""

"""Bags: the messages simconform writes and reads, writing them, and reading any bag.

- messages: our type store and the message builders and decoders
- writer: BagRecorder (rosbag2 MCAP/sqlite3 in log-time order), TumWriter
- reader: `open_bag` (rosbags' AnyReader, one UserError), SourceBag (any bag, salvaged if cut)
- salvage/: sequential scans of MCAP, ROS 1 and sqlite3 files cut off mid-write
"""

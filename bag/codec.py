"""zstd, imported once and as rosbags imports it: the standard library's `compression.zstd`
from Python 3.14, else the `backports.zstd` that rosbags depends on. At module level because a
failed import is not cached: trying `compression` in every call cost 71 us a chunk on Python
3.11 (0.3 s a demo reader)."""

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd  # type: ignore[import-not-found,no-redef]

__all__ = ["zstd"]

"""Integer-nanosecond stamps written as text.

Apart from simconform/trajectory.py, which needs scipy.interpolate (and through it
scipy.optimize, 13.5 MB), so that the bag's readers and writers, which only format stamps, do
not load it into `simconform verify` (issue 17's memory bound).
"""

from __future__ import annotations


def format_seconds(t_ns: int) -> str:
    """Exact decimal seconds of an integer-nanosecond stamp (TUM and evo read it)."""
    sign = "-" if t_ns < 0 else ""
    s, ns = divmod(abs(t_ns), 1_000_000_000)
    return f"{sign}{s}.{ns:09d}"

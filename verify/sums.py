"""The verifier's compiled accumulation passes (numba): a histogram's counts, per-group sums,
and a camera frame's integer error sums.

They sit apart from the classes that hold their state (verify/robust.py, lidar_edges.py,
camera.py), and those import them where they first add data, so that a process that only
reports never loads numba and LLVM: verify's main process while its workers read the bag
(verify/parallel.py), 34 MB of memory and 65-100 MB of the library's pages
(docs/verification.md#three-processes-for-a-camera-run). verify/lidar_sweep.py, the lidar's
compiled pass, is imported the same way.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def hist_add(x, g, centre, width, bins, counts, outside, below, outside_sq) -> None:
    """Histogram.add in one compiled pass, with the counts and sums numpy's floor, masks and
    bincounts gave: the bin is floor((x - centre) / width + bins / 2), and what falls outside
    is summed per call from 0 in input order, then added, as bincount's weights are. About
    15 against 50 us a demo lidar sweep, whose three histograms were a third of the
    verifier's lidar time."""
    groups = len(outside)
    part = np.zeros(groups)
    half = bins / 2
    for i in range(len(x)):  # checked first: a refused call changes nothing
        if g[i] < 0 or g[i] >= groups:
            raise ValueError("histogram group out of range")
    for i in range(len(x)):
        gi = g[i]
        k = np.floor((x[i] - centre) / width + half)
        if k >= 0 and k < bins:
            counts[gi, int(k)] += 1
        else:
            d = x[i] - centre
            outside[gi] += 1
            below[gi] += d < 0
            part[gi] += d * d
    for j in range(groups):
        outside_sq[j] += part[j]


@njit(cache=True, nogil=True)
def group_sums(g, e, shift, lat, sums) -> None:
    """sums[:, group] += (n, sum y, sum y^2, sum lat^2), y = e - shift: per call from 0 in
    input order, then added, the bits of the four np.bincount calls it replaces (10-13
    against 57-64 us a demo sweep's rings)."""
    groups = sums.shape[1]
    part = np.zeros((4, groups))
    for i in range(len(e)):
        gi = g[i]
        if gi < 0 or gi >= groups:
            raise ValueError("group out of range")
        y = e[i] - shift
        part[0, gi] += 1.0
        part[1, gi] += y
        part[2, gi] += y * y
        part[3, gi] += lat[i] * lat[i]
    for k in range(4):
        for j in range(groups):
            sums[k, j] += part[k, j]


@njit(cache=True, nogil=True)
def error_sums(a, b) -> tuple[int, int]:
    s = 0
    s2 = 0
    for i in range(a.size):
        e = np.int64(a[i]) - np.int64(b[i])
        s += e
        s2 += e * e
    return s, s2

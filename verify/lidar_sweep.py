"""One lidar sweep's paired errors in one compiled pass: the masks, the range error and lateral
misplacement of every paired point (metrics.range_and_lateral) and its edge-ray flag
(lidar_edges.edge_rays).

The numpy functions stay the definitions (and the tests' oracle: tests/test_lidar_sweep.py);
this pass gives the same bits. It exists because a demo sweep (16 x 360) is small enough that
numpy's per-call cost dominated: some 30 array passes and their temporaries took 0.87 ms a
demo sweep against 0.11-0.16 ms here (400 sweeps of a demo run), and the lidar was the
largest share of the verifier's main process (2,000 captures in the demo).

Same bits means the same arithmetic in the same order and precision: a float32 cloud's ranges
are float32 (as np.linalg.norm of a float32 array), the range error and lateral part float64
from the float64 copies; the edge threshold is float64 or float32 as numpy's promotion makes it
(`jump_f64`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from simconform.verify.lidar_edges import EDGE_K, edge_rel


class Sweep(NamedTuple):
    """A sweep's paired points (row-major order, as `both` indexes them) and its counts."""

    e: np.ndarray  # range error along the true ray (m), float64
    lateral: np.ndarray  # misplacement across it (m, >= 0)
    ring: np.ndarray  # int64
    col: np.ndarray  # int64
    edge: np.ndarray  # bool: an edge ray (lidar_edges.edge_rays)
    finite_truth: int  # rays with a finite true x
    lost: int  # ... and no published one
    spurious: int  # published where truth has none


def sweep(truth: np.ndarray, pub: np.ndarray, nominal: np.ndarray, scale: float) -> Sweep:
    """The paired errors of one sweep: truth and pub (R, C, 3), nominal (R, C, 3) unit rays."""
    rel = edge_rel(truth.shape[1])
    cloud = truth.dtype.type  # the threshold in the cloud's precision, where numpy makes it so
    out = _sweep(
        np.ascontiguousarray(truth),
        np.ascontiguousarray(pub),
        np.ascontiguousarray(nominal, dtype=np.float64),
        float(EDGE_K * scale),
        float(rel),
        cloud(EDGE_K * scale),
        cloud(rel),
        isinstance(rel, np.floating),
    )
    e, lat, ring, col, edge, counts = out
    return Sweep(e, lat, ring, col, edge, int(counts[0]), int(counts[1]), int(counts[2]))


@njit(cache=True, nogil=True)
def _sweep(truth, pub, nominal, k_scale, rel, k_scale_c, rel_c, jump_f64):
    rows, cols = truth.shape[0], truth.shape[1]
    r = np.empty((rows, cols), dtype=truth.dtype)
    n = 0
    counts = np.zeros(3, dtype=np.int64)
    for i in range(rows):
        for j in range(cols):
            x, y, z = truth[i, j, 0], truth[i, j, 1], truth[i, j, 2]
            r[i, j] = np.sqrt((x * x + y * y) + z * z)  # in the cloud's precision, as norm
            tf, pf = np.isfinite(x), np.isfinite(pub[i, j, 0])
            counts[0] += tf
            counts[1] += tf and not pf
            counts[2] += pf and not tf
            n += tf and pf
    e = np.empty(n)
    lat = np.empty(n)
    ring = np.empty(n, dtype=np.int64)
    col = np.empty(n, dtype=np.int64)
    edge = np.empty(n, dtype=np.bool_)
    k = 0
    for i in range(rows):
        for j in range(cols):
            if not (np.isfinite(truth[i, j, 0]) and np.isfinite(pub[i, j, 0])):
                continue
            ring[k], col[k] = i, j
            edge[k] = _is_edge(r, i, j, k_scale, rel, k_scale_c, rel_c, jump_f64)
            t0, t1, t2 = (
                np.float64(truth[i, j, 0]),
                np.float64(truth[i, j, 1]),
                np.float64(truth[i, j, 2]),
            )
            d0 = np.float64(pub[i, j, 0]) - t0
            d1 = np.float64(pub[i, j, 1]) - t1
            d2 = np.float64(pub[i, j, 2]) - t2
            rr = np.sqrt((t0 * t0 + t1 * t1) + t2 * t2)
            if rr > 0:
                u0, u1, u2 = t0 / rr, t1 / rr, t2 / rr
            else:
                u0, u1, u2 = nominal[i, j, 0], nominal[i, j, 1], nominal[i, j, 2]
            ek = (d0 * u0 + d2 * u2) + d1 * u1  # range_and_lateral's order
            a0, a1, a2 = d0 - ek * u0, d1 - ek * u1, d2 - ek * u2
            e[k] = ek
            lat[k] = np.sqrt((a0 * a0 + a1 * a1) + a2 * a2)
            k += 1
    return e, lat, ring, col, edge, counts


@njit(cache=True, nogil=True, inline="always")
def _is_edge(r, i, j, k_scale, rel, k_scale_c, rel_c, jump_f64) -> bool:
    """lidar_edges.edge_rays at ray (i, j): a true return whose azimuth neighbour (wrapping)
    has none or a range beyond the jump, or whose ring neighbour has no true return."""
    rows, cols = r.shape
    ri = r[i, j]
    if not np.isfinite(ri):
        return False
    for nb in (r[i, j - 1 if j > 0 else cols - 1], r[i, j + 1 if j < cols - 1 else 0]):
        if not np.isfinite(nb):
            return True
        diff = abs(nb - ri)  # in the cloud's precision, as numpy
        if jump_f64:
            if np.float64(diff) > max(k_scale, rel * np.float64(ri)):
                return True
        elif diff > max(k_scale_c, rel_c * ri):
            return True
    return (i > 0 and not np.isfinite(r[i - 1, j])) or (
        i < rows - 1 and not np.isfinite(r[i + 1, j])
    )

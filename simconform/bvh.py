"""A bounding volume hierarchy over axis-aligned boxes, built once per `Scene`.

The exact caster (simconform/bvhcast.py) needs each ray to meet only the few primitives near
it, instead of the bounding-sphere test of every object against every ray that cost
O(objects x rays) time and memory. The tree is built by binned SAH (surface area heuristic,
16 bins on the longest centroid axis), falling back to the middle of the centroids' extent
where SAH finds no cheaper split, into flat arrays that compiled traversal reads directly:

- lo, hi (M, 3): node bounds; left, right (M,): children (-1 at leaves);
- start, count (M,): a leaf's primitives are order[start : start + count].

Compiled with numba (`cache=True`), so each process loads machine code instead of rebuilding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

_BINS = 16
_LEAF = 2  # at most this many primitives per leaf (more only when all centroids coincide)


@dataclass
class Tree:
    """Flat BVH arrays; `order` maps leaf slots to primitive indices."""

    lo: np.ndarray
    hi: np.ndarray
    left: np.ndarray
    right: np.ndarray
    start: np.ndarray
    count: np.ndarray
    order: np.ndarray


@njit(cache=True, nogil=True)
def _area(lo, hi) -> float:
    dx, dy, dz = hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]
    return dx * dy + dy * dz + dz * dx


@njit(cache=True, nogil=True)
def _build(box_lo, box_hi):
    n = len(box_lo)
    cen = 0.5 * (box_lo + box_hi)
    order = np.arange(n)
    cap = max(1, 2 * n)
    lo = np.empty((cap, 3))
    hi = np.empty((cap, 3))
    left = np.full(cap, -1, dtype=np.int64)
    right = np.full(cap, -1, dtype=np.int64)
    start = np.zeros(cap, dtype=np.int64)
    count = np.zeros(cap, dtype=np.int64)
    start[0], count[0] = 0, n
    m = 1
    stack = np.empty(cap + 1, dtype=np.int64)
    stack[0] = 0
    sp = 1
    bin_lo = np.empty((_BINS, 3))
    bin_hi = np.empty((_BINS, 3))
    bin_n = np.empty(_BINS, dtype=np.int64)
    acc_lo = np.empty(3)
    acc_hi = np.empty(3)
    right_cost = np.empty(_BINS)
    clo = np.empty(3)
    chi = np.empty(3)
    while sp > 0:
        sp -= 1
        node = stack[sp]
        s, c = start[node], count[node]
        for k in range(3):
            lo[node, k] = np.inf
            hi[node, k] = -np.inf
            clo[k] = np.inf
            chi[k] = -np.inf
        for i in order[s : s + c]:
            for k in range(3):
                lo[node, k] = min(lo[node, k], box_lo[i, k])
                hi[node, k] = max(hi[node, k], box_hi[i, k])
                clo[k] = min(clo[k], cen[i, k])
                chi[k] = max(chi[k], cen[i, k])
        if c <= _LEAF:
            continue
        axis = 0
        for k in range(1, 3):
            if chi[k] - clo[k] > chi[axis] - clo[axis]:
                axis = k
        ext = chi[axis] - clo[axis]
        if ext <= 0:
            continue  # all centroids coincide: no split separates them
        # Binned SAH along the longest centroid axis.
        bin_n[:] = 0
        bin_lo[:] = np.inf
        bin_hi[:] = -np.inf
        scale = _BINS * (1 - 1e-9) / ext
        for i in order[s : s + c]:
            b = min(_BINS - 1, int((cen[i, axis] - clo[axis]) * scale))
            bin_n[b] += 1
            for k in range(3):
                bin_lo[b, k] = min(bin_lo[b, k], box_lo[i, k])
                bin_hi[b, k] = max(bin_hi[b, k], box_hi[i, k])
        acc_lo[:] = np.inf
        acc_hi[:] = -np.inf
        cnt = 0
        for b in range(_BINS - 1, 0, -1):
            cnt += bin_n[b]
            for k in range(3):
                acc_lo[k] = min(acc_lo[k], bin_lo[b, k])
                acc_hi[k] = max(acc_hi[k], bin_hi[b, k])
            right_cost[b] = cnt * _area(acc_lo, acc_hi) if cnt else 0.0
        acc_lo[:] = np.inf
        acc_hi[:] = -np.inf
        cnt = 0
        best, split = np.inf, -1
        for b in range(_BINS - 1):
            cnt += bin_n[b]
            for k in range(3):
                acc_lo[k] = min(acc_lo[k], bin_lo[b, k])
                acc_hi[k] = max(acc_hi[k], bin_hi[b, k])
            if cnt == 0 or cnt == c:
                continue
            cost = cnt * _area(acc_lo, acc_hi) + right_cost[b + 1]
            if cost < best:
                best, split = cost, b
        if split < 0 or best >= c * _area(lo[node], hi[node]):
            split = _BINS // 2 - 1  # the middle of the centroid bounds: both sides non-empty
        # Partition order[s : s + c] in place: bins <= split first.
        i, j = s, s + c - 1
        while i <= j:
            if min(_BINS - 1, int((cen[order[i], axis] - clo[axis]) * scale)) <= split:
                i += 1
            else:
                order[i], order[j] = order[j], order[i]
                j -= 1
        nl = i - s
        a, b2 = m, m + 1
        m += 2
        left[node], right[node] = a, b2
        start[a], count[a] = s, nl
        start[b2], count[b2] = s + nl, c - nl
        count[node] = 0
        stack[sp] = a
        stack[sp + 1] = b2
        sp += 2
    return lo[:m], hi[:m], left[:m], right[:m], start[:m], count[:m], order


def build(box_lo: np.ndarray, box_hi: np.ndarray) -> Tree:
    """BVH over primitives with bounds box_lo, box_hi (P, 3); P may be 0 (an empty tree)."""
    box_lo = np.ascontiguousarray(box_lo, dtype=np.float64).reshape(-1, 3)
    box_hi = np.ascontiguousarray(box_hi, dtype=np.float64).reshape(-1, 3)
    return Tree(*_build(box_lo, box_hi))

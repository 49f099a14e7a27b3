"""The slab test of an axis-aligned box, shared by the box primitive (simconform/raycast.py)
and the meshes' bounding-box pre-test (simconform/meshcast.py), and the margin by which the
BVH grows its boxes so that the test's rounding never drops a hit."""

from __future__ import annotations

import numpy as np


def box_pad(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per box (rows of lo, hi (N, 3)): 1e-9 (1 + its largest |coordinate|). The BVH grows
    every leaf's box by it (simconform/bvhworld.py); a triangle's hit counts only within half
    of it (bvhcast._on_box, which computes it in compiled code, and meshcast.BruteMesh)."""
    return 1e-9 * (1.0 + np.maximum(np.abs(lo), np.abs(hi)).max(axis=1, initial=0.0))


def slab(o: np.ndarray, d: np.ndarray, h: np.ndarray | float):
    """Entry and exit parameters of the slab |o + t d| <= h, elementwise.

    A ray parallel to the slab gets (-inf, inf) when inside and (inf, -inf) when outside, so
    no division by zero ever happens.
    """
    par = np.abs(d) < 1e-300  # parallel for any distance that matters (t would exceed 1e300)
    inv = 1.0 / np.where(par, 1.0, d)
    with np.errstate(over="ignore"):  # a huge t is simply beyond t_max
        t1 = (-h - o) * inv
        t2 = (h - o) * inv
    inside = np.abs(o) <= h
    lo = np.where(par, np.where(inside, -np.inf, np.inf), np.minimum(t1, t2))
    hi = np.where(par, np.where(inside, np.inf, -np.inf), np.maximum(t1, t2))
    return lo, hi

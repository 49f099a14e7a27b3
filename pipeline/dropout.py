"""Dropout stage: whole samples not published, and (lidar) single returns lost.

A dropped sample's truth is still recorded, so the verifier can count what was lost. Both draws
happen for every capture so that the streams stay aligned by capture index.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from simconform.adapters.base import LidarTruth
from simconform.spec import Dropout


class DropoutStage:
    def __init__(self, dropout: Dropout, rng: np.random.Generator) -> None:
        self.sample_p = dropout.sample
        self.point_p = dropout.point
        self.rng = rng

    def apply(self, s):
        """The sample with lost points set to NaN, or None when the whole sample is dropped."""
        keep = self.rng.random() >= self.sample_p
        if isinstance(s, LidarTruth):
            lost = self.rng.random(s.ranges.shape) < self.point_p
            if lost.any():
                points = s.points.copy()
                points[lost] = np.nan
                ranges = np.where(lost, np.nan, s.ranges)
                s = dataclasses.replace(s, points=points, ranges=ranges)
        return s if keep else None

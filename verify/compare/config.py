"""What a comparison is asked: the two runs, the output folder and the thresholds (the CLI's
options), their defaults and their validation."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from simconform.errors import UserError

HIT_AGREEMENT_MIN = 0.995
RANGE_TOLERANCE = 0.01  # m
PSNR_MIN = 30.0  # dB
BOOTSTRAP = 2000


@dataclass
class CompareConfig:
    run_a: Path
    run_b: Path
    out: Path | None = None
    confidence: float = 0.95
    range_tolerance: float = RANGE_TOLERANCE
    psnr_min: float = PSNR_MIN
    hit_agreement_min: float = HIT_AGREEMENT_MIN
    force: bool = False
    objects: bool = True  # per-object lidar breakdown (needs the world and trajectory files)
    bootstrap: int = BOOTSTRAP
    progress: bool | None = False  # simconform/progress.py: None a bar or lines, False silent


def validate_config(cfg: CompareConfig) -> None:
    if not 0.5 < cfg.confidence < 1:
        raise UserError(None, "--confidence", cfg.confidence, "expected a level in (0.5, 1)")
    if not (cfg.range_tolerance > 0 and math.isfinite(cfg.range_tolerance)):
        raise UserError(None, "--range-tolerance", cfg.range_tolerance, "expected metres > 0")
    if not (math.isfinite(cfg.psnr_min) and cfg.psnr_min > 0):  # 8-bit PSNR is never below 0
        raise UserError(None, "--psnr-min", cfg.psnr_min, "expected a finite number of dB > 0")
    if not 0 <= cfg.hit_agreement_min <= 1:
        raise UserError(None, "hit_agreement_min", cfg.hit_agreement_min, "expected [0, 1]")

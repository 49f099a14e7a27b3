"""`simconform compare RUN_A RUN_B`: the same spec, world, trajectory and seed on two backends.

Two questions, answered separately:

1. Do the engines agree? Engine truth of A against engine truth of B, capture by capture
   (paired by sensor and header.stamp of the /truth topics): lidar per-ray range difference and
   hit agreement, camera PSNR/SSIM and depth, IMU/GNSS/odometry differences. These are computed
   over every ray, pixel and sample recorded, not estimated from a sample, so a verdict compares
   the value itself with its threshold (lidar hit agreement, range bias and p99, camera PSNR);
   the other differences are informational.
2. Does the pipeline behave the same on both engines? Each run's published-minus-own-truth
   errors (the verifier's accumulators, so decoding and error definitions are the verifier's)
   are compared with two-sample tests (KS, Anderson-Darling k-sample; informational) and with an
   equivalence test (TOST) per metric against the spec's tolerances: the (1 - 2 alpha) interval
   of the difference B - A, from a bootstrap that resamples whole captures and applies the same
   resample to both runs (so the strong correlation that a shared seed creates is used, not
   ignored), must lie inside +-tolerance to pass; wholly outside fails; otherwise inconclusive.

With one seed both runs draw identical noise (every capture consumes the same draws whatever it
hits), so published errors differ only where engine truth does; where it does not, part 2
passes trivially and part 1 is the informative one.

Where things are, in the order a comparison runs:

- `config`: CompareConfig, the default thresholds and their validation;
- `identity`: which runs may be compared (check_comparable), each run's summary, a safe --out;
- `streams`: both runs' truth read from their bags and paired capture by capture;
- `truth` (part 1) with one module per metric family: `lidar` (LidarTruthDiff, ObjectLabels),
  `camera` (CameraTruthDiff, psnr, ssim, depth), `vector` (IMU, GNSS, odometry);
- `published` (part 2): the verifier's accumulators per run as Series, compare_published;
  `stats`: Series, the paired bootstrap and the two-sample tests;
- `verdicts`: the shape of a metric entry (informational, gated, skipped), TOST, overall;
- `runner`: compare_runs, which computes a Comparison; `writer`: compare, which also writes it;
- `report` (compare.md, junit.xml, the terminal table's rows) and `plots` (the PNGs);
- `explain/`: Gazebo's lidar and camera models, which explain a gazebo run's difference.

scipy.stats, the verifier and rosbags' type store are imported where they are used, so that
registering the command does not slow down every `simconform` start.
"""

import importlib

_EXPORTS = {
    "CameraTruthDiff": "camera",
    "psnr": "camera",
    "ssim": "camera",
    "PSNR_MIN": "config",
    "RANGE_TOLERANCE": "config",
    "CompareConfig": "config",
    "check_comparable": "identity",
    "LidarTruthDiff": "lidar",
    "console_rows": "report",
    "Comparison": "runner",
    "compare_runs": "runner",
    "Series": "stats",
    "paired_bootstrap": "stats",
    "tost_level": "verdicts",
    "tost_verdict": "verdicts",
    "compare": "writer",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """The package's names, each imported from its module at first use (PEP 562): the CLI
    registers `compare` on every `simconform` start, and the comparison's modules (109 of
    scipy's among them) cost 0.15 s and 8 MB there."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

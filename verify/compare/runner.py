"""One comparison, computed: validate, refuse incomparable runs, then engine truth (truth.py) and
published errors (published.py), assembled into compare.json's report (writer.py writes it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from simconform.progress import step
from simconform.verify.compare.config import CompareConfig, validate_config
from simconform.verify.compare.identity import (
    check_comparable,
    check_out,
    replay_side,
    run_info,
    spec_and_origin,
)
from simconform.verify.compare.published import compare_published, published_series
from simconform.verify.compare.truth import compare_truth
from simconform.verify.compare.verdicts import overall, tost_level


@dataclass
class Comparison:
    report: dict
    truth_diffs: dict = field(default_factory=dict)
    # sensor -> field -> (values a, values b, unit, {sigma, bias, ...} of the spec)
    samples: dict = field(default_factory=dict)


def compare_runs(cfg: CompareConfig) -> Comparison:
    """Everything but writing: validate, refuse incomparable runs, compute both parts."""
    from simconform.verify.verifier import load_manifest

    validate_config(cfg)
    dir_a, dir_b = Path(cfg.run_a), Path(cfg.run_b)
    ma, mb = load_manifest(dir_a), load_manifest(dir_b)
    check_comparable(dir_a, ma, dir_b, mb)
    if cfg.out is not None:
        check_out(Path(cfg.out), cfg.force, (dir_a, dir_b))
    side = replay_side(ma, mb)  # a replay run holds only its mapped sensors: use its spec
    spec, origin = spec_and_origin(*((dir_b, mb) if side == 1 else (dir_a, ma)))
    notes: list[str] = []
    same_dir = dir_a.resolve() == dir_b.resolve()
    if same_dir:
        notes.append("RUN_A and RUN_B are the same folder: every difference is zero by design")
    if side is None:
        notes.append(
            "Both runs use the same seed, so they drew identical noise streams (every capture "
            "consumes the same draws whatever it hits): published errors differ only where "
            "engine truth differs, and where it does not the two-sample tests and equivalence "
            "checks pass trivially. The truth-vs-truth section is the informative one."
        )
    else:
        other = ma if side == 1 else mb
        both = ma.get("backend") == mb.get("backend") == "replay"
        notes.append(
            ("Both runs are replayed bags" if both else f"Run {'AB'[side]} is a replayed bag")
            + ": published errors are what a source recorded, not draws of one seed, so the "
            "published comparison sets independent noise streams side by side, and a replay's "
            "truth is its own (recorded or recomputed from its pose stream)."
        )
        left = sorted(set(other["spec_content"]["sensors"]) - set(spec.sensors))
        if left:
            notes.append(
                f"Not compared: {', '.join(left)} of run {'BA'[side]}, which the replay map "
                "does not map (run.json's replay.sensors_not_mapped)"
            )
    noise = (ma.get("noise", "pipeline"), mb.get("noise", "pipeline"))
    if noise[0] != noise[1]:
        notes.append(
            f"run A's noise came from the {noise[0]}, run B's from the {noise[1]} "
            "(`--noise`): engine truth is noiseless in both and compares as usual, but the "
            "published errors compare two different noise generators, not one pipeline on two "
            "engines"
        )
    for side, m in (("A", ma), ("B", mb)):
        if not m.get("complete", False):
            notes.append(f"run {side} is incomplete; compared over the captures both recorded")
    truth, captures, breakdown, diffs, objects = compare_truth(cfg, spec, origin, (ma, mb), notes)
    span = mb if side == 1 else ma
    duration_s = (span["end_ns"] - span["start_ns"]) / 1e9
    level = tost_level(cfg.confidence)
    step("compare: published errors of run A", cfg.progress)
    series_a = published_series(dir_a, spec, origin, duration_s, level)
    if not same_dir:
        step("compare: published errors of run B", cfg.progress)
    series_b = series_a if same_dir else published_series(dir_b, spec, origin, duration_s, level)
    published = compare_published(spec, series_a, series_b, cfg.confidence, cfg.bootstrap)
    samples = {
        n: {
            f: (
                series_a[n][f][0].values,
                series_b[n][f][0].values,
                series_a[n][f][1]["unit"],
                series_a[n][f][1],
            )
            for f in series_a[n]
            if f in series_b[n] and series_a[n][f][0].kind == "moments"
        }
        for n in spec.sensors
    }
    report = {
        "runs": {"a": run_info(dir_a, ma), "b": run_info(dir_b, mb)},
        "confidence": cfg.confidence,
        "tost_level": level,
        "thresholds": {
            "range_tolerance_m": cfg.range_tolerance,
            "hit_agreement_min": cfg.hit_agreement_min,
            "psnr_min_db": cfg.psnr_min,
        },
        "captures": captures,
        "truth": truth,
        "published": published,
        "breakdown": breakdown,
        "objects": objects,
        "explained": {n: d.explained for n, d in diffs.items() if hasattr(d, "explained")},
        "notes": notes,
        "verdict": overall([truth, published]),
    }
    return Comparison(report, diffs, samples)

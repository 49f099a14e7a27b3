"""The seed campaign file the statistical benches run: one spec on the demo world and trajectory,
the reference backend, N seeds of one length (bench/false_fail.py, bench/planning.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def write_campaign(
    folder: Path, name: str, spec: Path, seeds: int, start: int, duration: float
) -> Path:
    """FOLDER/NAME.yaml: `seeds` seeds from `start`, each run `duration` s, confidence 0.95."""
    folder.mkdir(parents=True, exist_ok=True)
    campaign = {
        "name": name,
        "spec": str(spec.resolve()),
        "backends": ["reference"],
        "seeds": {"start": start, "count": seeds},
        "worlds": [
            {
                "world": str(ROOT / "worlds" / "demo.yaml"),
                "trajectory": str(ROOT / "worlds" / "demo.tum"),
            }
        ],
        "duration": duration,
        "confidence": 0.95,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(campaign, sort_keys=False))
    return path

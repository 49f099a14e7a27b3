"""What a report says before its tables, so it stands on its own when handed over: the reason for
each verdict, counts per sensor, what was not checked and why, and where the result came from.

verify_run calls `complete_report` last, after every verdict is final (family-wise step,
engine noise, localization). The keys it adds are documented in docs/report-schema.md and
checked by verify/report.schema.json; `SCHEMA_VERSION` changes with them.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from simconform import __version__
from simconform.provenance import command_line, git_commit, machine

# major: a key removed or its meaning changed; minor: keys added. 1.x was the report before
# `schema_version` existed (run, confidence, family, sensors, verdict).
SCHEMA_VERSION = "2.0"
VERDICTS = ("pass", "fail", "inconclusive", "not_applicable")


def _num(v) -> str:
    from simconform.verify.report import fmt

    return fmt(v)


def verdict_reason(m: dict) -> str:
    """One sentence saying why a metric got its verdict, from its own interval and band."""
    v = m["verdict"]
    if v == "not_applicable":
        return m.get("reason", "not applicable")
    if "p_value" in m:
        op = "<" if v == "fail" else ">="
        return f"p = {_num(m['p_value'])} {op} {_num(m['alpha'])}" + (
            ": the errors are not normal" if v == "fail" else ": no evidence against normality"
        )
    ci, tol = m.get("ci"), m.get("tolerance")
    if not ci or not tol or None in ci:
        return f"{v}: the interval has an open end (too few samples)"
    lo, hi = ci
    tlo, thi = (
        (-float("inf") if tol[0] is None else tol[0]),
        (float("inf") if tol[1] is None else tol[1]),
    )
    band = f"tolerance [{_num(tlo)}, {_num(thi)}]"
    interval = f"CI [{_num(lo)}, {_num(hi)}]"
    if v == "pass":
        return f"{interval} lies inside the {band}"
    if v == "fail":
        side = "above" if lo > thi else "below"
        return f"{interval} lies wholly {side} the {band}"
    if m.get("family") and (lo > thi or hi < tlo):  # outside at the raw level, not at Holm's
        return (
            f"{interval} is outside the {band} at the raw level only; at the Holm-adjusted "
            "level it reaches the band, so it is not a FAIL"
        )
    bounds = [f"{name} bound {_num(b)}" for name, b in (("lower", tlo), ("upper", thi))]
    crossed = [b for b, inside in zip(bounds, (lo < tlo <= hi, lo <= thi < hi)) if inside]
    return f"{interval} straddles the {' and the '.join(crossed) or 'band'}: more data needed"


def counts(report: dict) -> dict:
    per = {}
    for name, s in report["sensors"].items():
        c = dict.fromkeys(VERDICTS, 0)
        for m in s["metrics"].values():
            c[m["verdict"]] += 1
        per[name] = c
    total = {v: sum(c[v] for c in per.values()) for v in VERDICTS}
    return {"total": total, "per_sensor": per}


def sensor_verdict(per_sensor: dict) -> str:
    """A sensor's verdict from its counts: its worst judged metric, else not_applicable."""
    return next(
        (v for v in ("fail", "inconclusive", "pass") if per_sensor.get(v)), "not_applicable"
    )


def not_checked(report: dict, manifest: dict | None = None) -> list[dict]:
    """What the verdict does not cover: spec sensors a replay map leaves out, sensors with
    nothing judged, metrics not applicable, camera frames judged on a sample, samples left out
    by the integrity checks."""
    out = [
        {
            "sensor": name,
            "what": "every metric",
            "why": "in the spec but not in the replay map: nothing of it was read from the bag",
        }
        for name in ((manifest or {}).get("replay") or {}).get("sensors_not_mapped") or []
    ]
    for name, s in report["sensors"].items():
        ms = s["metrics"]
        if ms and all(m["verdict"] == "not_applicable" for m in ms.values()):
            why = "; ".join(sorted({m.get("reason", "") for m in ms.values()}))
            out.append({"sensor": name, "what": "every metric", "why": why})
            continue
        for mname, m in ms.items():
            if m["verdict"] == "not_applicable":
                out.append({"sensor": name, "what": mname, "why": m.get("reason", "")})
        sampled = s.get("frames_judged")
        if sampled is not None and sampled < s.get("frames_paired", sampled):
            out.append(
                {
                    "sensor": name,
                    "what": "intensity metrics on part of the frames",
                    "why": f"judged on {sampled:,} of {s['frames_paired']:,} frames (one in "
                    f"every {s['judged_every']}: each needs the JPEG chain simulated on its "
                    "truth)",
                }
            )
        if s.get("excluded"):  # a count of samples in a damaged span (verify/integrity.py)
            out.append(
                {
                    "sensor": name,
                    "what": f"{s['excluded']:,} samples",
                    "why": "left out by the integrity checks: they lie in a damaged or "
                    "unrecorded span",
                }
            )
    if (report.get("run") or {}).get("integrity", {}).get("scope", "whole run") != "whole run":
        scope = report["run"]["integrity"]["scope"]
        out.append({"sensor": "*", "what": "part of the run", "why": f"the verdict covers {scope}"})
    return out


def bag_digest(outputs: dict) -> dict | None:
    """One SHA-256 for the run's bag folder: of its files' sorted "path sha256" lines (as
    provenance.path_digest hashes a folder), from run.json's `outputs`."""
    files = {k: v for k, v in sorted((outputs or {}).items()) if k.startswith("bag/")}
    if not files:
        return None
    lines = "".join(f"{k.removeprefix('bag/')} {v['sha256']}\n" for k, v in files.items())
    return {
        "path": "bag/",
        "sha256": hashlib.sha256(lines.encode()).hexdigest(),
        "bytes": sum(v["bytes"] for v in files.values()),
        "files": {k: v["sha256"] for k, v in files.items()},
    }


def provenance(manifest: dict, wall_s: float) -> dict:
    """Who recorded the run and who verified it, with what, from which inputs."""
    src = (manifest.get("replay") or {}).get("provenance") or {}
    inputs = {}
    for key in ("spec", "world", "trajectory"):
        if manifest.get(key):
            inputs[key] = {"path": manifest[key], "sha256": manifest.get(f"{key}_sha256")}
    if src.get("bag"):  # replay: the source bag, not our re-recording of it
        inputs["source_bag"] = {k: src["bag"].get(k) for k in ("path", "sha256")}
    bag = bag_digest(manifest.get("outputs"))
    if bag:
        inputs["bag"] = bag
    return {
        "recorded": {
            "simconform": manifest.get("simconform"),
            "git_commit": manifest.get("git_commit"),
            "command_line": manifest.get("command_line"),
            "created": manifest.get("created"),
            "wall_s": manifest.get("wall_s"),
            "machine": manifest.get("machine") or {"host": manifest.get("host")},
        },
        "verified": {
            "simconform": __version__,
            "git_commit": git_commit(),
            "command_line": command_line(),
            "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(wall_s, 3),
            "machine": machine(),
        },
        "backend": manifest.get("backend"),
        "engine_version": manifest.get("engine_version"),
        "emulate": manifest.get("emulate"),
        "noise": manifest.get("noise", "pipeline"),
        "seed": manifest.get("seed"),
        "inputs": inputs,
    }


def complete_report(report: dict, manifest: dict, wall_s: float) -> dict:
    """Add `why` to every metric, and `schema_version`, `summary`, `provenance` (in that order
    first in the JSON, so a reader sees the verdict before the details)."""
    for s in report["sensors"].values():
        for m in s["metrics"].values():
            m["why"] = verdict_reason(m)
    head = {
        "schema_version": SCHEMA_VERSION,
        "verdict": report["verdict"],
        "summary": {"counts": counts(report), "not_checked": not_checked(report, manifest)},
        "provenance": provenance(manifest, wall_s),
    }
    rest = {k: v for k, v in report.items() if k not in head}
    report.clear()
    report.update(head)
    report.update(rest)
    return report

"""The content of a run's report as sections, once, so report.md and report.html say the same.

Order: the verdict, counts per sensor and what was not checked (the first screen); the run and
how verdicts are reached; one table per sensor with each metric's interval, tolerance and the
reason for its verdict; diagnosis, localization, per-ring breakdown; provenance last. Text may
hold `code` and **bold** spans: Markdown keeps them, the HTML writer turns them into tags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simconform.verify.report import SYMBOL, fmt, rows
from simconform.verify.summary import sensor_verdict

VERDICT_COLUMN = "verdict"


@dataclass
class Section:
    title: str
    paras: list[str] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    after: list[str] = field(default_factory=list)  # paragraphs below the table


def scope_note(report: dict) -> str:
    """' (of the intact part only)' where the verdict covers only part of the run."""
    scope = (report["run"].get("integrity") or {}).get("scope", "whole run")
    return "" if scope == "whole run" else f" (of the {scope})"


def title(report: dict) -> str:
    return f"simconform report: {SYMBOL[report['verdict']]}{scope_note(report)}"


def summary(report: dict) -> list[Section]:
    s = report.get("summary") or {}
    c = (s.get("counts") or {}).get("total", {})
    r = report["run"]
    lead = (
        f"**{SYMBOL[report['verdict']]}**: {c.get('pass', 0)} PASS, {c.get('fail', 0)} FAIL, "
        f"{c.get('inconclusive', 0)} INCONCLUSIVE of "
        f"{sum(c.get(v, 0) for v in ('pass', 'fail', 'inconclusive'))} judged metrics "
        f"({c.get('not_applicable', 0)} not applicable); backend `{r['backend']}`, seed "
        f"{r['seed']}, {r['duration_s']:g} s, confidence {report['confidence']:g}."
    )
    rule = (
        "PASS: the whole confidence interval lies inside the tolerance; FAIL: it lies wholly "
        "outside (at the Holm-adjusted level); INCONCLUSIVE: it reaches a bound, more data "
        "is needed. The run's verdict is the worst of its metrics."
    )
    counts = Section(
        "Summary",
        paras=[lead, rule],
        columns=["sensor", "type", "PASS", "FAIL", "INCONCLUSIVE", "n/a", VERDICT_COLUMN],
    )
    for name, per in (s.get("counts") or {}).get("per_sensor", {}).items():
        kind = report["sensors"][name]["type"]
        counts.rows.append(
            [name, kind, *(str(per[v]) for v in SYMBOL), SYMBOL[sensor_verdict(per)]]
        )
    gaps = s.get("not_checked") or []
    unchecked = Section(
        "Not checked",
        bullets=[f"**{g['sensor']}**: {g['what']}: {g['why']}" for g in gaps],
        paras=[] if gaps else ["Every metric of every sensor in the spec was judged."],
    )
    return [counts, unchecked]


def run_section(report: dict) -> Section:
    r = report["run"]
    lines = [
        f"backend `{r['backend']}`, seed {r['seed']}, {r['duration_s']:g} s simulated, "
        f"confidence {report['confidence']:g}",
        f"spec `{r['spec']}`, world `{r['world']}`, trajectory `{r['trajectory']}`",
    ]
    lines += source_lines(r.get("provenance"))
    integ = r.get("integrity") or {}
    scope = integ.get("scope", "whole run")
    if not r["complete"] and scope == "whole run":
        why = (
            r.get("stopped_by")
            or r.get("incomplete_reason")
            or r.get("bag_truncated")
            or "not finished"
        )
        lines.append(f"**Incomplete run** ({why}): verified up to the last recorded message.")
    elif scope != "whole run":
        lines.append(
            f"**Incomplete run: the verdict covers the {scope.replace(' only', '')} only**, "
            f"{r['duration_s']:g} s of {r.get('planned_duration_s', r['duration_s']):g} s planned"
        )
        lines += integ.get("findings", [])
    lines += engine_noise_lines(report)
    fam = report.get("family")
    if fam:
        lines.append(
            f"Family-wise control: Holm over the {fam['size']} judged metrics at alpha "
            f"{fmt(fam['alpha'])}: a metric FAILs only where its interval at its Holm-adjusted "
            "level lies wholly outside the tolerance (each row's note gives both levels); a "
            f"FAIL at the raw level only is reported INCONCLUSIVE. FAILs: {fam['fails']}."
        )
    return Section("Run", bullets=lines)


def source_lines(prov: dict | None) -> list[str]:
    """Replay: the source bag, map, spec, world and truth the verdict comes from, with hashes."""
    if not prov:
        return []
    b, t = prov["bag"], prov["truth"]
    span = f", {b['duration_s']:g} s of log time" if b.get("duration_s") is not None else ""
    lines = [
        f"source bag `{b['path']}` ({b['format']}, {b['bytes']} bytes{span}), SHA-256 {b['sha256']}"
    ]
    lines += [
        f"{k} `{prov[k]['path']}`, SHA-256 {prov[k]['sha256']}" for k in ("map", "spec", "world")
    ]
    lines.append(f"truth: {t['mode']}: {t['what']}, SHA-256 {t['sha256']}")
    return lines


def engine_noise_lines(report: dict) -> list[str]:
    """--noise engine: where the noise came from and what simconform still applied."""
    if report["run"].get("noise") != "engine":
        return []
    lines = [
        "noise source: Gazebo's <noise> (--noise engine); truth: each sensor's noiseless twin; "
        "a FAIL on a noise metric is Gazebo deviating from its own declared noise"
    ]
    for name, sensor in report["sensors"].items():
        plan = sensor.get("engine_noise")
        if plan is None:
            continue
        missing = ", ".join(plan["not_expressible"]) or "nothing"
        lines.append(
            f"{name}: declared by the spec but not expressible in SDF (applied by simconform "
            f"where it can): {missing}"
        )
        lines += [f"{name}: {n}" for n in plan.get("notes", [])]
    return lines


def sensor_sections(report: dict) -> list[Section]:
    by_sensor: dict[str, list[list[str]]] = {}
    for s, m, c, me, ci, tol, v, unit, note in rows(report):
        why = report["sensors"][s]["metrics"][m].get("why", "")
        by_sensor.setdefault(s, []).append([m, c, me, ci, tol, unit, SYMBOL[v], why, note])
    out = []
    for name, table in by_sensor.items():
        sensor = report["sensors"][name]
        per = ((report.get("summary") or {}).get("counts") or {}).get("per_sensor", {})
        verdict = SYMBOL[sensor_verdict(per[name])] if name in per else ""
        head = (
            f"{sensor['type']} on `{sensor['topic']}`: {sensor['captures']} captures, "
            f"{sensor['published']} published"
        )
        if sensor.get("frames_judged") is not None:
            head += (
                f"; intensity judged on {sensor['frames_judged']:,} of "
                f"{sensor['frames_paired']:,} frames"
            )
        out.append(
            Section(
                f"{name}: {verdict}",
                paras=[head],
                columns=[
                    "metric",
                    "configured",
                    "measured",
                    "CI",
                    "tolerance",
                    "unit",
                    VERDICT_COLUMN,
                    "why",
                    "note",
                ],
                rows=table,
            )
        )
    return out


def diagnosis(report: dict) -> list[Section]:
    items = [
        f"**{name}: {d['cause']}**: {d['evidence']} (test: {d['test']})"
        for name, sensor in report["sensors"].items()
        for d in sensor.get("diagnosis", [])
    ]
    return [Section("Diagnosis", bullets=items)] if items else []


def localization(report: dict) -> list[Section]:
    """`simconform localize`'s summary (RUN/localization/), when it ran."""
    loc = report.get("localization")
    if not loc:
        return []
    rpe = loc.get("rpe_trans_pct")
    rpe_txt = "n/a" if rpe is None else f"{rpe:.3g} % per {loc.get('rpe_segment_m') or 0:.3g} m"
    return [
        Section(
            "Localization",
            paras=[
                f"Localization: {loc['odometry']} on {loc['topic']}: APE RMSE "
                f"{loc['ape_rmse_m']:.3g} m over {loc['path_length_m']:.1f} m "
                f"({loc['drift_pct']:.3g} %), RPE {rpe_txt}; verdict "
                f"{SYMBOL.get(loc['verdict'], loc['verdict'])} "
                "(../localization/localization.md)"
            ],
        )
    ]


def breakdown(report: dict) -> list[Section]:
    """Per-ring and per-sector tables of each lidar's range error."""
    out = []
    for name, sensor in report["sensors"].items():
        b = sensor.get("breakdown")
        if not b:
            continue
        sec = Section(
            f"{name}: range error per ring and azimuth sector",
            paras=[
                f"outliers: beyond {fmt(b['k_outlier'])} robust sigmas of the global median "
                f"(resolution {fmt(b['outlier_resolution'])} m)"
            ],
            columns=["group", "angle (deg)", "n", "bias", "std", "lateral RMS", "outliers"],
        )
        for key, label in (("per_ring", "ring"), ("per_sector", "sector")):
            for r in b[key]:
                ang = r.get("elevation_deg", r.get("azimuth_deg"))
                ang = f"{ang[0]:g}-{ang[1]:g}" if isinstance(ang, list) else fmt(ang)
                frac = r.get("outlier_fraction")
                sec.rows.append(
                    [
                        f"{label} {r['index']}",
                        ang,
                        str(r["n"]),
                        fmt(r.get("bias")),
                        fmt(r.get("std")),
                        fmt(r.get("lateral_rms")),
                        "-" if frac is None else f"{100 * frac:.3g} %",
                    ]
                )
        out.append(sec)
    return out


def provenance(report: dict) -> list[Section]:
    p = report.get("provenance")
    if not p:
        return []
    sec = Section("Provenance", columns=["item", "value"])
    rec, ver = p["recorded"], p["verified"]

    def machine(m: dict | None) -> str:
        m = m or {}
        parts = [m.get("host"), m.get("system"), m.get("machine")]
        cpus = f"{m['cpus']} CPUs" if m.get("cpus") else None
        py = f"Python {m['python']}" if m.get("python") else None
        return ", ".join(x for x in (*parts, cpus, py) if x) or "-"

    def wall(x) -> str:
        return "-" if x is None else f"{x:.1f} s"

    def cells(d: dict) -> list[tuple[str, str]]:
        return [
            ("simconform", d.get("simconform") or "?"),
            ("git commit", d.get("git_commit") or "not in a git checkout"),
            ("command line", f"`{d['command_line']}`" if d.get("command_line") else "-"),
            ("at", d.get("created") or d.get("at") or "-"),
            ("wall time", wall(d.get("wall_s"))),
            ("machine", machine(d.get("machine"))),
        ]

    # one row where recording and verification agree (`run` does both), two where they differ
    for (key, r), (_, v) in zip(cells(rec), cells(ver)):
        if r == v and key not in ("at", "wall time"):
            sec.rows.append([key, r])
        else:
            sec.rows += [[f"{key} (recorded)", r], [f"{key} (verified)", v]]
    sec.rows += [
        [
            "backend",
            f"`{p.get('backend')}`" + (f" (emulating {p['emulate']})" if p.get("emulate") else ""),
        ],
        ["engine", p.get("engine_version") or "-"],
        ["noise applied by", p.get("noise") or "pipeline"],
        ["seed", str(p.get("seed"))],
    ]
    for key, d in p.get("inputs", {}).items():
        sec.rows.append([f"{key} SHA-256", f"{d.get('sha256')} (`{d.get('path')}`)"])
    return [sec]


def sections(report: dict) -> list[Section]:
    return [
        *summary(report),
        run_section(report),
        *sensor_sections(report),
        *diagnosis(report),
        *localization(report),
        *breakdown(report),
        *provenance(report),
    ]

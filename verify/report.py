"""Report writers: report.md, report.json, report.html and junit.xml (one test case per metric)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from xml.etree import ElementTree as ET

SYMBOL = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "not_applicable": "n/a"}


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        a = abs(v)
        return f"{v:.4g}" if 1e-3 <= a < 1e5 else f"{v:.3e}"
    return str(v)


def rows(report: dict):
    """(sensor, metric, configured, measured, ci, tolerance, verdict, unit, note) per metric."""
    for sname, sensor in report["sensors"].items():
        for mname, m in sensor["metrics"].items():
            if m["verdict"] == "not_applicable":
                yield sname, mname, "-", "-", "-", "-", m["verdict"], m.get("unit", ""), m["reason"]
                continue
            if "p_value" in m:
                note = f"p = {fmt(m['p_value'])} (fails below {fmt(m['alpha'])})"
                if m.get("note"):
                    note += f"; {m['note']}"
                yield sname, mname, "normal", fmt(m["measured"]), "-", "-", m["verdict"], "A2", note
                continue
            ci = f"[{fmt(m['ci'][0])}, {fmt(m['ci'][1])}]"
            tol = f"[{fmt(m['tolerance'][0])}, {fmt(m['tolerance'][1])}]"
            note = f"n = {m['n']}"
            note += robust_note(m.get("robust"))
            note += family_note(m.get("family"))
            if "predicted" in m:
                note += f"; predicted after clamp/round/encode {fmt(m['predicted'])}"
            if m.get("note"):
                note += f"; {m['note']}"
            if m.get("encoding_only_rmse") is not None:
                note += (
                    f"; encoding alone: rmse {fmt(m['encoding_only_rmse'])}, "
                    f"{100 * m['encoding_share_of_mse']:.0f} % of the error"
                )
            yield (
                sname,
                mname,
                fmt(m["configured"])
                + (f" (predicted {fmt(m['predicted'])})" if "predicted" in m else ""),
                fmt(m["measured"]),
                ci,
                tol,
                m["verdict"],
                m["unit"],
                note,
            )


def robust_note(rob: dict | None) -> str:
    """Median, robust sigma, trimmed sigma and outliers beside a std (verify/robust.py)."""
    if not rob or rob.get("median") is None:
        return ""
    out = f"; median {fmt(rob['median'])}, robust sigma {fmt(rob.get('robust_sigma'))}"
    if rob.get("trimmed_sigma") is not None:
        out += f", {100 * rob['trim']:g} %-trimmed sigma {fmt(rob['trimmed_sigma'])}"
    if rob.get("outlier_fraction") is not None:
        out += (
            f", {100 * rob['outlier_fraction']:.3g} % beyond {rob['k_outlier']:g} robust "
            f"sigma ({100 * (rob.get('outlier_share_of_sq') or 0):.0f} % of the squared error)"
        )
    return out


def family_note(fam: dict | None) -> str:
    """The levels a FAIL was judged at (verify/family.py), where they differ from the raw."""
    if not fam:
        return ""
    out = f"; level {fmt(fam['raw_level'])} raw, {fmt(fam['adjusted_level'])} Holm"
    if fam.get("ci_at_adjusted_level"):
        lo, hi = fam["ci_at_adjusted_level"]
        out += f" (CI there [{fmt(lo)}, {fmt(hi)}])"
    return out


def family_lines(report: dict) -> list[str]:
    fam = report.get("family")
    if not fam:
        return []
    return [
        f"Family-wise control: Holm over the {fam['size']} judged metrics of this report at "
        f"alpha {fmt(fam['alpha'])}: a metric FAILs only where its interval at its "
        "Holm-adjusted level lies wholly outside the tolerance (each row's note gives the raw "
        "and adjusted level); a FAIL at the raw level only is reported INCONCLUSIVE. "
        f"FAILs: {fam['fails']}."
    ]


def diagnosis_lines(report: dict) -> list[str]:
    out = []
    for name, sensor in report["sensors"].items():
        for d in sensor.get("diagnosis", []):
            out.append(f"- **{name}: {d['cause']}**: {d['evidence']} (test: {d['test']})")
    return (["## Diagnosis", "", *out, ""]) if out else []


def diagnosis_html(report: dict) -> list[str]:
    return [
        f"diagnosis, {name}: {d['cause']}: {d['evidence']}"
        for name, sensor in report["sensors"].items()
        for d in sensor.get("diagnosis", [])
    ]


def breakdown_lines(report: dict) -> list[str]:
    """Per-ring and per-sector tables of each lidar's range error."""
    out = []
    for name, sensor in report["sensors"].items():
        b = sensor.get("breakdown")
        if not b:
            continue
        out += [
            f"## {name}: range error per ring and azimuth sector",
            "",
            f"outliers: beyond {fmt(b['k_outlier'])} robust sigmas of the global median "
            f"(resolution {fmt(b['outlier_resolution'])} m)",
            "",
            "| group | angle (deg) | n | bias | std | lateral RMS | outliers |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, label in (("per_ring", "ring"), ("per_sector", "sector")):
            for r in b[key]:
                ang = r.get("elevation_deg", r.get("azimuth_deg"))
                ang = f"{ang[0]:g}-{ang[1]:g}" if isinstance(ang, list) else fmt(ang)
                frac = r.get("outlier_fraction")
                out.append(
                    f"| {label} {r['index']} | {ang} | {r['n']} | {fmt(r.get('bias'))} | "
                    f"{fmt(r.get('std'))} | {fmt(r.get('lateral_rms'))} | "
                    f"{'-' if frac is None else f'{100 * frac:.3g} %'} |"
                )
        out.append("")
    return out


def scope_note(report: dict) -> str:
    """' (of the intact part only)' where the verdict covers only part of the run."""
    scope = (report["run"].get("integrity") or {}).get("scope", "whole run")
    return "" if scope == "whole run" else f" (of the {scope})"


def header_lines(report: dict) -> list[str]:
    r = report["run"]
    lines = [
        f"backend `{r['backend']}`, seed {r['seed']}, {r['duration_s']:g} s simulated, "
        f"confidence {report['confidence']:g}",
        f"spec `{r['spec']}`, world `{r['world']}`, trajectory `{r['trajectory']}`",
    ]
    lines += provenance_lines(r.get("provenance"))
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
    return lines


def provenance_lines(prov: dict | None) -> list[str]:
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


def localization_lines(report: dict) -> list[str]:
    """`simconform localize`'s summary (RUN/localization/), when it ran."""
    loc = report.get("localization")
    if not loc:
        return []
    rpe = loc.get("rpe_trans_pct")
    rpe_txt = "n/a" if rpe is None else f"{rpe:.3g} % per {loc.get('rpe_segment_m') or 0:.3g} m"
    return [
        "## Localization",
        "",
        f"Localization: {loc['odometry']} on {loc['topic']}: APE RMSE {loc['ape_rmse_m']:.3g} m "
        f"over {loc['path_length_m']:.1f} m ({loc['drift_pct']:.3g} %), RPE {rpe_txt}; "
        f"verdict {loc['verdict']} (../localization/localization.md)",
        "",
    ]


def markdown(report: dict, plots: list[str]) -> str:
    out = [f"# simconform report: {SYMBOL[report['verdict']]}{scope_note(report)}", ""]
    out += [f"- {line}" for line in header_lines(report)]
    out += [
        "",
        "pass: the whole confidence interval lies inside the tolerance; fail: it lies "
        "wholly outside; inconclusive: it straddles a bound (more data needed).",
        *family_lines(report),
        "",
    ]
    out.append(
        "| sensor | metric | configured | measured | CI | tolerance | unit | verdict | note |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for s, m, c, me, ci, tol, v, unit, note in rows(report):
        out.append(f"| {s} | {m} | {c} | {me} | {ci} | {tol} | {unit} | {SYMBOL[v]} | {note} |")
    out.append("")
    out += diagnosis_lines(report)
    out += localization_lines(report)
    out += breakdown_lines(report)
    for p in plots:
        out.append(f"![{p}]({p})")
    return "\n".join(out) + "\n"


def html_page(report: dict, plots: list[str]) -> str:
    colour = {
        "pass": "#1a7f37",
        "fail": "#cf222e",
        "inconclusive": "#9a6700",
        "not_applicable": "#57606a",
    }
    cells = []
    for s, m, c, me, ci, tol, v, unit, note in rows(report):
        vals = "".join(f"<td>{html.escape(str(x))}</td>" for x in (s, m, c, me, ci, tol, unit))
        cells.append(
            f"<tr>{vals}<td style='color:{colour[v]};font-weight:bold'>{SYMBOL[v]}</td>"
            f"<td>{html.escape(note)}</td></tr>"
        )
    head = "".join(
        f"<li>{html.escape(x)}</li>"
        for x in header_lines(report) + family_lines(report) + diagnosis_html(report)
    )
    head += "".join(f"<li>{html.escape(x)}</li>" for x in localization_lines(report)[2:])
    imgs = "".join(
        f"<figure><img src='{html.escape(p)}' style='max-width:100%'></figure>" for p in plots
    )
    v = report["verdict"]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>simconform report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #d0d7de;padding:3px 8px;font-size:14px}}
th{{background:#f6f8fa}}</style></head><body>
<h1>simconform report: <span style="color:{colour[v]}">{SYMBOL[v]}</span>{scope_note(report)}</h1>
<ul>{head}</ul>
<table><tr><th>sensor</th><th>metric</th><th>configured</th><th>measured</th><th>CI</th>
<th>tolerance</th><th>unit</th><th>verdict</th><th>note</th></tr>{"".join(cells)}</table>
{imgs}
</body></html>
"""


def junit(report: dict) -> str:
    suites = ET.Element("testsuites", name="simconform")
    for sname, sensor in report["sensors"].items():
        cases = sensor["metrics"]
        failures = sum(m["verdict"] in ("fail", "inconclusive") for m in cases.values())
        skipped = sum(m["verdict"] == "not_applicable" for m in cases.values())
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"simconform.{sname}",
            tests=str(len(cases)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
        )
        for mname, m in cases.items():
            case = ET.SubElement(suite, "testcase", classname=f"simconform.{sname}", name=mname)
            if m["verdict"] == "not_applicable":
                ET.SubElement(case, "skipped", message=m["reason"])
            elif m["verdict"] in ("fail", "inconclusive"):
                msg = f"{m['verdict']}: measured {fmt(m.get('measured'))}" + (
                    f", ci {m['ci']}, tolerance {m['tolerance']}"
                    if "ci" in m
                    else f", p = {fmt(m.get('p_value'))}"
                )
                ET.SubElement(case, "failure", message=msg, type=m["verdict"])
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_reports(out: Path, report: dict, samples: dict) -> list[Path]:
    from simconform.verify.plots import write_plots

    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out, report, samples)
    names = [p.name for p in plots]
    files = {
        "report.json": json.dumps(report, indent=2) + "\n",
        "report.md": markdown(report, names),
        "report.html": html_page(report, names),
        "junit.xml": junit(report),
    }
    for name, text in files.items():
        (out / name).write_text(text)
    return [out / n for n in files] + plots

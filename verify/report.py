"""The report's shared formatting (numbers, the metric rows) and junit.xml, one test case per
metric; the sections of report.md/html are in report_sections.py, the files in report_render.py."""

from __future__ import annotations

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
                note = m.get("note") or ""  # p and the level it fails below: in `why`
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

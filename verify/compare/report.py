"""compare.md and junit.xml, and the rows of the terminal table, in the style of the run report
(verify/report.py); the plots are in plots.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from xml.etree import ElementTree as ET

from simconform.verify.compare.explain.report import explained_markdown
from simconform.verify.report import SYMBOL, fmt


def _band(tol: list | None) -> str:
    """A tolerance as people read it: +-0.01, >= 0.995, <= 0.01 or [lo, hi]."""
    if not tol:
        return "-"
    lo, hi = tol
    if hi is None or (lo is not None and lo > 0 and hi == 1.0):
        return f">= {fmt(lo)}"
    if lo is not None and hi is not None and lo == -hi:
        return f"±{fmt(hi)}"
    if lo == 0:
        return f"<= {fmt(hi)}"
    return f"[{fmt(lo)}, {fmt(hi)}]"


def _value(m: dict) -> str:
    if m.get("measured") is None and m.get("identical_frames"):
        return "inf"
    return fmt(m.get("measured"))


def summary_rows(report: dict) -> Iterator[dict]:
    """One row per compared metric, truth first: the table printed, written and tested."""
    for sensor, metrics in report["truth"].items():
        for name, m in metrics.items():
            note = m.get("reason", "") if m["verdict"] == "not_applicable" else ""
            if m.get("identical_frames"):
                note = (note + "; " if note else "") + f"{m['identical_frames']} identical frames"
            yield {
                "part": "truth",
                "sensor": sensor,
                "metric": name,
                "a": "-",
                "b": "-",
                "value": _value(m) if "measured" in m else "-",
                "ci": "-",
                "tolerance": _band(m.get("tolerance")),
                "verdict": m["verdict"],
                "unit": m.get("unit", ""),
                "n": m.get("n"),
                "note": note,
            }
    for sensor, metrics in report["published"].items():
        for name, m in metrics.items():
            if "difference" not in m:
                yield {
                    "part": "published",
                    "sensor": sensor,
                    "metric": name,
                    "a": "-",
                    "b": "-",
                    "value": "-",
                    "ci": "-",
                    "tolerance": "-",
                    "verdict": m["verdict"],
                    "unit": m.get("unit", ""),
                    "n": None,
                    "note": m.get("reason", ""),
                }
                continue
            tests = []
            if m.get("ks_p") is not None:
                tests.append(f"KS p {fmt(m['ks_p'])}")
            if m.get("ad_p") is not None:
                tests.append(f"AD p {fmt(m['ad_p'])}")
            yield {
                "part": "published",
                "sensor": sensor,
                "metric": name,
                "a": fmt(m["measured_a"]),
                "b": fmt(m["measured_b"]),
                "value": fmt(m["difference"]),
                "ci": f"[{fmt(m['ci'][0])}, {fmt(m['ci'][1])}]",
                "tolerance": _band(m["tolerance"]),
                "verdict": m["verdict"],
                "unit": m.get("unit", ""),
                "n": m["n_a"],
                "note": ", ".join(tests),
            }


_AXIS = re.compile(r"^(?P<base>.+_diff_(?:mean|std|maxabs))_(?P<axis>x|y|z|e|n|u|yaw)$")


def console_rows(report: dict) -> list[dict]:
    """summary_rows with the informational per-axis truth rows folded into one row per
    quantity and statistic, so the terminal table stays readable."""
    out: list[dict] = []
    groups: dict[tuple[str, str], dict] = {}
    for r in summary_rows(report):
        m = _AXIS.match(r["metric"]) if r["part"] == "truth" else None
        if m is None or r["verdict"] != "not_applicable":
            out.append(r)
            continue
        key = (r["sensor"], m["base"])
        if key not in groups:
            groups[key] = dict(r, axes=[], values=[])
            out.append(groups[key])
        groups[key]["axes"].append(m["axis"])
        groups[key]["values"].append(r["value"])
    for (_, base), g in groups.items():
        g["metric"] = f"{base}_{{{','.join(g.pop('axes'))}}}"
        g["value"] = " ".join(g.pop("values"))
    return out


def _seeds(a: dict, b: dict) -> str:
    """The seed line; a replayed bag has none of ours."""
    if a["seed"] == b["seed"]:
        return "no seed (replayed bags)" if a["seed"] is None else f"seed {a['seed']}"
    name = {None: "none (a replayed bag)"}
    return f"seed {name.get(a['seed'], a['seed'])} (A), {name.get(b['seed'], b['seed'])} (B)"


def markdown(report: dict, plots: list[str]) -> str:
    a, b = report["runs"]["a"], report["runs"]["b"]
    th = report["thresholds"]
    pct = f"{100 * report['tost_level']:g} %"
    out = [f"# simconform compare: {SYMBOL[report['verdict']]}", ""]
    for side, r in (("A", a), ("B", b)):
        state = "" if r["complete"] else " (**incomplete**)"
        out.append(f"- run {side}: `{r['path']}`, backend `{r['backend']}`{state}")
    out += [
        f"- {_seeds(a, b)}, {a['duration_s']:g} s simulated; spec `{a['spec']}`, "
        f"world `{a['world']}`, trajectory `{a['trajectory']}`",
        f"- confidence {report['confidence']:g}: equivalence from {pct} intervals (TOST); "
        f"lidar range tolerance {fmt(th['range_tolerance_m'])} m, hit agreement >= "
        f"{fmt(th['hit_agreement_min'])}, PSNR >= {fmt(th['psnr_min_db'])} dB",
        "",
        "## Engine truth: B against A",
        "",
        "Every ray, pixel and sample of the captures both runs recorded, paired by sensor and "
        "header.stamp; exact values, so a verdict compares the value with its threshold. "
        "Lidar range differences are |p_B - p_A| signed by the nominal ray direction, on rays "
        "where both engines return.",
        "",
        "| sensor | metric | value | threshold | unit | verdict | n | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = list(summary_rows(report))
    for r in rows:
        if r["part"] == "truth":
            out.append(
                f"| {r['sensor']} | {r['metric']} | {r['value']} | {r['tolerance']} | "
                f"{r['unit']} | {SYMBOL[r['verdict']]} | {fmt(r['n'])} | {r['note']} |"
            )
    out += [
        "",
        "## Published errors: the pipeline on each engine",
        "",
        "Each run's published-minus-own-truth errors (the verifier's definitions). B - A with "
        f"its {pct} interval from a paired bootstrap over captures; pass: the interval lies "
        "inside ± the spec's tolerance (equivalent), fail: wholly outside, inconclusive: it "
        "straddles a bound. KS and Anderson-Darling (k-sample, p capped to [0.001, 0.25]) "
        "p-values compare the two error distributions; informational.",
        "",
        f"| sensor | metric | A | B | B - A | {pct} CI | equivalence | unit | verdict | tests |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["part"] == "published":
            out.append(
                f"| {r['sensor']} | {r['metric']} | {r['a']} | {r['b']} | {r['value']} | "
                f"{r['ci']} | {r['tolerance']} | {r['unit']} | {SYMBOL[r['verdict']]} | "
                f"{r['note']} |"
            )
    for sensor, objs in report.get("breakdown", {}).items():
        out += [
            "",
            f"## {sensor}: disagreement by object",
            "",
            "Object each beam's exact ray hits (reference geometry); worst first.",
            "",
            "| object | rays | hit disagreement | beyond tolerance | mean range diff (m) |",
            "|---|---|---|---|---|",
        ]
        order = sorted(objs.items(), key=lambda kv: -(kv[1]["hit_disagreement"] or 0))
        for name, o in order:
            out.append(
                f"| {name} | {o['rays']} | {fmt(o['hit_disagreement'])} | "
                f"{fmt(o['range_beyond_tolerance'])} | {fmt(o['range_diff_mean'])} |"
            )
    for sensor, objs in report.get("objects", {}).items():
        out += [
            "",
            f"## {sensor}: ground-truth objects (/truth/objects)",
            "",
            "Lidar points each engine put on each labelled object, summed over the paired "
            "sweeps, and the largest offset between the two engines' boxes; with Gazebo, also "
            "what its engine model predicts for Gazebo's side.",
            "",
            "| object | sweeps | points A | points B | engine model | sweeps with counts apart "
            "| box offset (m) |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, o in sorted(objs.items(), key=lambda kv: -kv[1]["count_disagreements"]):
            out.append(
                f"| {name} | {o['sweeps']} | {o['points_a']} | {o['points_b']} | "
                f"{o.get('points_model', '-')} | {o['count_disagreements']} | "
                f"{fmt(o['box_offset_max_m'])} |"
            )
    for sensor, ex in report.get("explained", {}).items():
        out += explained_markdown(sensor, ex)
    if report["notes"]:
        out += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    out.append("")
    for p in plots:
        out.append(f"![{p}]({p})")
    return "\n".join(out) + "\n"


def junit(report: dict) -> str:
    suites = ET.Element("testsuites", name="simconform.compare")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in summary_rows(report):
        groups.setdefault((r["part"], r["sensor"]), []).append(r)
    section = {"truth": report["truth"], "published": report["published"]}
    for (part, sensor), rows in groups.items():
        cls = f"simconform.compare.{part}.{sensor}"
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=cls,
            tests=str(len(rows)),
            failures=str(sum(r["verdict"] in ("fail", "inconclusive") for r in rows)),
            errors="0",
            skipped=str(sum(r["verdict"] == "not_applicable" for r in rows)),
        )
        for r in rows:
            case = ET.SubElement(suite, "testcase", classname=cls, name=r["metric"])
            m = section[part][sensor][r["metric"]]
            if r["verdict"] == "not_applicable":
                ET.SubElement(case, "skipped", message=m.get("reason", ""))
            elif r["verdict"] in ("fail", "inconclusive"):
                msg = f"{r['verdict']}: {r['value']}" + (
                    f", ci {r['ci']}" if r["ci"] != "-" else ""
                )
                msg += f", tolerance {r['tolerance']}"
                if m.get("reason"):
                    msg += f" ({m['reason']})"
                ET.SubElement(case, "failure", message=msg, type=r["verdict"])
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"

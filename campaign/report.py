"""Campaign report: campaign.json, campaign.md, junit.xml and plots/ from the cells' reports.

The numbers come from simconform.campaign.summary, the figures from simconform.campaign.plots.
junit.xml has one testsuite per cell and one testcase per sensor metric (the same cases as the
cell's own junit.xml), plus one errored "run" case for a cell that crashed, raised or was not
run.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

import simconform.campaign.localization as localization
from simconform.campaign.plots import write_plots
from simconform.campaign.summary import NOT_RAN, VERDICTS, cell_reports, summarize


def _fmt(v) -> str:
    from simconform.verify.report import fmt

    if isinstance(v, list):
        return "varies"
    return fmt(v)


def markdown(report: dict, plots: list[str]) -> str:
    c, t = report["campaign"], report["totals"]
    seeds = c["seeds"]
    seed_txt = f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]})" if len(seeds) > 3 else str(seeds)
    dur = f"{c['duration_s']:g} s" if c["duration_s"] else "whole trajectory"
    if c.get("duration_auto_s"):
        dur = "auto (" + ", ".join(f"{k}: {t:g} s" for k, t in c["duration_auto_s"].items()) + ")"
    out = [
        f"# simconform campaign `{c['name']}`: {report['verdict'].upper()}",
        "",
        f"- {t['cells']} cells ({t['resumed']} resumed from an earlier run), executor "
        f"`{c['executor']}` with {c['jobs'] or 'cluster-wide'} jobs, {c['wall_s']:.1f} s wall",
        f"- spec `{c['spec']}`; backends {', '.join(c['backends'])}; {seed_txt}; "
        f"duration {dur}; confidence {c['confidence']:g}",
        "- variants: "
        + "; ".join(
            f"`{n}` {json.dumps(o) if o else '(base spec)'}" for n, o in c["variants"].items()
        ),
        "- worlds: "
        + "; ".join(f"`{n}` {w['world']} + {w['trajectory']}" for n, w in c["worlds"].items()),
        f"- cells: {', '.join(f'{s} {t[s]}' for s in (*VERDICTS, *NOT_RAN) if t[s])}",
    ]
    if c.get("interrupted"):
        out.append("- **Interrupted**: cells marked not_run were not run; rerun to resume.")
    out += ["", "## Groups", "", "| backend | variant | world | cells | status | coverage flags |"]
    out.append("|---|---|---|---|---|---|")
    for g in report["groups"]:
        st = ", ".join(f"{k} {v}" for k, v in sorted(g["counts"].items()))
        out.append(
            f"| {g['backend']} | {g['variant']} | {g['scene']} | {g['cells']} | {st} | "
            f"{g['coverage_flags']} |"
        )
    out += [
        "",
        "## Sensor metrics over seeds",
        "",
        "Pass rate over the cells where the metric applies; measured mean ± seed-to-seed "
        "standard deviation. Coverage: seeds whose CI covers the configured value, k/n, with the "
        "Clopper-Pearson interval of the share, against the range Bin(n, level) allows at the "
        f"family-wise level {1 - c['confidence']:g} over {t['coverage_checks']} checks "
        "(exact: every CI has zero width and equals the configured value).",
        "",
        "| backend | variant | world | sensor | metric | pass rate | configured | measured "
        "| coverage | share CI | expected k | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["metrics"]:
        pr = "-" if r["pass_rate"] is None else f"{100 * r['pass_rate']:.0f}%"
        m = r["measured"]
        meas = "-" if m["mean"] is None else _fmt(m["mean"])
        if m["std"] is not None:
            meas += f" ± {_fmt(m['std'])}"
        cov = r["coverage"]
        if cov["n"]:
            k = f"{cov['covered']}/{cov['n']}"
            share = f"[{cov['ci'][0]:.3f}, {cov['ci'][1]:.3f}]"
            expect = f"[{cov['expected'][0]}, {cov['expected'][1]}]"
        else:
            k = share = expect = "-"
        unit = f" [{r['unit']}]" if r["unit"] and r["unit"] != "1" else ""
        out.append(
            f"| {r['backend']} | {r['variant']} | {r['scene']} | {r['sensor']} | "
            f"{r['metric']}{unit} | {pr} | {_fmt(r['configured'])} | {meas} | {k} | {share} | "
            f"{expect} | {cov['status']} |"
        )
    out += localization.markdown(report.get("localization", []), c["confidence"])
    out += ["", "## Cells", "", "| cell | status | attempts | resumed | wall | note |"]
    out.append("|---|---|---|---|---|---|")
    for r in report["cells"]:
        wall = f"{r['wall_s']:.1f} s" if r.get("wall_s") else "-"
        link = f"[{r['id']}]({r['path']}/report/report.md)" if r["status"] in VERDICTS else r["id"]
        out.append(
            f"| {link} | {r['status']} | {r['attempts']} | {'yes' if r.get('resumed') else ''} | "
            f"{wall} | {r.get('error') or ''} |"
        )
    out.append("")
    out += [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def junit(report: dict) -> str:
    suites = ET.Element("testsuites", name=f"simconform.campaign.{report['campaign']['name']}")
    for cell in report["cells"]:
        cid = cell["id"]
        suite = ET.SubElement(suites, "testsuite", name=f"simconform.campaign.{cid}")
        counts = Counter()
        if cell["status"] in NOT_RAN:
            case = ET.SubElement(suite, "testcase", classname=f"campaign.{cid}", name="run")
            ET.SubElement(case, "error", type=cell["status"], message=cell.get("error") or "")
            counts["errors"] += 1
            counts["tests"] += 1
        for r in report["metrics"]:
            if (r["backend"], r["variant"], r["scene"]) != (
                cell["backend"],
                cell["variant"],
                cell["scene"],
            ):
                continue
            m = next((m for m in r["per_seed"] if m["seed"] == cell["seed"]), None)
            if m is None:
                continue
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase", classname=f"campaign.{cid}.{r['sensor']}", name=r["metric"]
            )
            if m["verdict"] == "not_applicable":
                ET.SubElement(case, "skipped", message="not applicable")
                counts["skipped"] += 1
            elif m["verdict"] in ("fail", "inconclusive"):
                msg = f"{m['verdict']}: measured {_fmt(m.get('measured'))}"
                if m.get("ci"):
                    msg += f", ci {m['ci']}, tolerance {m['tolerance']}"
                ET.SubElement(case, "failure", type=m["verdict"], message=msg)
                counts["failures"] += 1
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(counts[k]))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def write_campaign_report(out: Path, meta: dict, records: list[dict]) -> dict:
    """Summarize the cells, write campaign.json, campaign.md, junit.xml and plots/; return it."""
    reports = cell_reports(out, records)
    report = summarize(meta, records, reports)
    report["localization"] = localization.localization_rows(out, meta, records)
    made = write_plots(out / "plots", report)
    made.append(localization.plot(out / "plots" / "localization.png", report["localization"]))
    plots = [p.relative_to(out).as_posix() for p in made if p is not None]
    report["plots"] = plots
    (out / "campaign.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "campaign.md").write_text(markdown(report, plots))
    (out / "junit.xml").write_text(junit(report))
    return report

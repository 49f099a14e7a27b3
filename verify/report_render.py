"""A run's report files: report.json (the versioned schema, docs/report-schema.md), report.md and
report.html from the same sections (report_sections.py), junit.xml, and the plots.

The HTML is one self-contained file (styles inline, plots embedded as data URIs): it can be
mailed or attached to a review as it is.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from simconform.verify.report import SYMBOL, junit
from simconform.verify.report_sections import VERDICT_COLUMN, Section, sections, title

OVERVIEW = "overview.png"
COLOUR = {
    "PASS": "#1a7f37",
    "FAIL": "#cf222e",
    "INCONCLUSIVE": "#9a6700",
    "n/a": "#57606a",
}


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: dict, plots: list[str]) -> str:
    out = [f"# {title(report)}", ""]
    secs = sections(report)
    for i, sec in enumerate(secs):
        out += [f"## {sec.title}", ""]
        for p in sec.paras:
            out += [p, ""]
        if sec.bullets:
            out += [f"- {b}" for b in sec.bullets] + [""]
        if sec.columns:
            out.append("| " + " | ".join(sec.columns) + " |")
            out.append("|" + "---|" * len(sec.columns))
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in sec.rows]
            out.append("")
        for p in sec.after:
            out += [p, ""]
        for figs, heading in _figures(secs, i, plots):
            out += [f"## {heading}", ""] + [f"![{p}]({p})" for p in figs] + [""]
    return "\n".join(out)


def _figures(secs: list[Section], i: int, plots: list[str]):
    """Which figures follow section i: the overview after the run's section (the third), the
    rest before provenance (or at the end)."""
    over = [p for p in plots if p == OVERVIEW]
    rest = [p for p in plots if p != OVERVIEW]
    if i == 2 and over:
        yield over, "Overview"
    last = len(secs) - 2 if secs[-1].title == "Provenance" else len(secs) - 1
    if i == last and rest:
        yield rest, "Figures"


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")


def inline(text: str) -> str:
    """Escape, then turn `code` and **bold** into tags: no literal backticks in the page."""
    out = html.escape(str(text))
    out = _CODE.sub(r"<code>\1</code>", out)
    return _BOLD.sub(r"<strong>\1</strong>", out)


def _table(sec: Section) -> str:
    vcol = sec.columns.index(VERDICT_COLUMN) if VERDICT_COLUMN in sec.columns else -1
    head = "".join(f"<th>{html.escape(c)}</th>" for c in sec.columns)
    body = []
    for row in sec.rows:
        cells = []
        for j, c in enumerate(row):
            if j == vcol:
                colour = COLOUR.get(c, "#24292f")
                cells.append(f"<td class='v' style='color:{colour}'>{html.escape(c)}</td>")
            else:
                cells.append(f"<td>{inline(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _section(sec: Section, idx: int) -> str:
    parts = [f"<section id='s{idx}'><h2>{inline(sec.title)}</h2>"]
    parts += [f"<p>{inline(p)}</p>" for p in sec.paras]
    if sec.bullets:
        parts.append("<ul>" + "".join(f"<li>{inline(b)}</li>" for b in sec.bullets) + "</ul>")
    if sec.columns:
        parts.append(_table(sec))
    parts += [f"<p>{inline(p)}</p>" for p in sec.after]
    parts.append("</section>")
    return "".join(parts)


def _img(folder: Path, name: str) -> str:
    data = base64.b64encode((folder / name).read_bytes()).decode()
    return (
        f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>"
        f"<figcaption>{html.escape(name)}</figcaption></figure>"
    )


CSS = """body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;
max-width:1280px;padding:0 1em;color:#24292f}
h1{font-size:1.7em;margin:.2em 0}h2{font-size:1.25em;border-bottom:1px solid #d0d7de;
padding-bottom:.2em;margin-top:1.6em}
.badge{display:inline-block;color:#fff;border-radius:6px;padding:.05em .5em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #d0d7de;padding:3px 8px;font-size:13px;vertical-align:top;text-align:left}
th{background:#f6f8fa}td.v{font-weight:bold;white-space:nowrap}
code{background:#f6f8fa;border-radius:4px;padding:0 .25em;font-size:90%;word-break:break-all}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{font-size:12px;color:#57606a}"""


def html_page(report: dict, plots: list[str], folder: Path | None = None) -> str:
    """The page; with `folder`, each plot is read from it and embedded."""
    verdict = SYMBOL[report["verdict"]]
    secs = sections(report)
    body = []
    for i, sec in enumerate(secs):
        body.append(_section(sec, i))
        for figs, heading in _figures(secs, i, plots):
            imgs = "".join(
                _img(folder, p) if folder is not None else f"<img alt='{p}' src='{p}'>"
                for p in figs
            )
            body.append(f"<section><h2>{heading}</h2>{imgs}</section>")
    head = title(report).replace(verdict, "", 1).rstrip(": ")
    badge = f"<span class='badge' style='background:{COLOUR[verdict]}'>{verdict}</span>"
    rest = title(report).split(verdict, 1)[1]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title(report))}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style></head><body>
<h1 id="verdict">{html.escape(head)}: {badge}{html.escape(rest)}</h1>
{"".join(body)}
</body></html>
"""


def write_reports(out: Path, report: dict, samples: dict, fork: bool | None = None) -> list[Path]:
    """report.json, .md, .html, junit.xml and the figures into `out`; `fork` as in
    verify.figures.draw."""
    from simconform.verify.figures import draw
    from simconform.verify.plots import _plt, conformance, figures, triptych
    from simconform.verify.plots_overview import overview

    out.mkdir(parents=True, exist_ok=True)
    _plt()  # imported before a fork: the child need not import it again
    figs = [(overview, (out / OVERVIEW, report, samples), 1.4), *figures(out, report, samples)]
    # The two figures that allocate most are drawn first: the conformance chart (a canvas as
    # tall as the report has metrics) and a camera's frames (imshow's float copies of its
    # images, about 25 MB for 640 x 480). What they free then goes to the later figures. Drawn
    # last, they came on top of what the figures before had left in the heap: a verification
    # in one process (`--jobs 0`, the default spec's 1,000 s run, 2026-12-07) peaked at
    # 294,656 and 295,120 kB, against 285,964 and 285,796 first.
    early = {conformance: 0, triptych: 1}
    order = sorted(range(len(figs)), key=lambda i: early.get(figs[i][0], 2))
    made = dict(zip(order, draw([figs[i] for i in order], fork)))
    plots = [made[i] for i in range(len(figs)) if made[i] is not None]
    names = [p.name for p in plots]
    files = {
        "report.json": json.dumps(report, indent=2) + "\n",
        "report.md": markdown(report, names),
        "report.html": html_page(report, names, out),
        "junit.xml": junit(report),
    }
    for name, text in files.items():
        (out / name).write_text(text)
    return [out / n for n in files] + plots

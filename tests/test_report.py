"""The run report stands on its own: summary first, what was not checked, per-sensor tables with
the reason for each verdict, provenance, the same content in Markdown, HTML and a JSON that
validates against its documented schema; the HTML rendered in a real headless Chromium; the
plots overlay the distribution the verdict judges against."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from conftest import REPO
from simconform.provenance import sha256
from simconform.verify.summary import SCHEMA_VERSION, verdict_reason

SCHEMA = REPO / "docs" / "report.schema.json"


def _report(run: Path) -> dict:
    return json.loads((run / "report" / "report.json").read_text())


def test_json_validates_against_the_documented_schema(short_run: Path) -> None:
    report = _report(short_run)
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert report["schema_version"] == SCHEMA_VERSION
    assert list(report)[:3] == ["schema_version", "verdict", "summary"]
    assert f"schema {SCHEMA_VERSION}" in (REPO / "docs" / "report-schema.md").read_text()


def test_counts_add_up_and_the_verdict_is_the_worst(short_run: Path) -> None:
    report = _report(short_run)
    per = report["summary"]["counts"]["per_sensor"]
    for name, sensor in report["sensors"].items():
        verdicts = [m["verdict"] for m in sensor["metrics"].values()]
        assert per[name] == {v: verdicts.count(v) for v in per[name]}
    total = report["summary"]["counts"]["total"]
    assert sum(total.values()) == sum(len(s["metrics"]) for s in report["sensors"].values())
    worst = next(v for v in ("fail", "inconclusive", "pass") if total[v])
    assert report["verdict"] == worst


def test_not_checked_names_every_metric_not_applicable(short_run: Path) -> None:
    report = _report(short_run)
    skipped = {
        (s, m)
        for s, sensor in report["sensors"].items()
        for m, v in sensor["metrics"].items()
        if v["verdict"] == "not_applicable"
    }
    listed = {(g["sensor"], g["what"]) for g in report["summary"]["not_checked"]}
    assert skipped and skipped <= listed  # the camera's normality, at least
    cam = report["sensors"]["camera"]
    assert cam["frames_judged"] <= cam["frames_paired"] == cam["published"]


def test_provenance_hashes_are_the_inputs_hashes(short_run: Path) -> None:
    report = _report(short_run)
    prov = report["provenance"]
    manifest = json.loads((short_run / "run.json").read_text())
    for key in ("spec", "world", "trajectory"):
        assert prov["inputs"][key]["sha256"] == sha256(Path(manifest[key]))
    bag = prov["inputs"]["bag"]
    files = sorted(p for p in (short_run / "bag").rglob("*") if p.is_file())
    assert bag["files"] == {f"bag/{p.relative_to(short_run / 'bag')}": sha256(p) for p in files}
    assert prov["backend"] == "reference" and "exact ray casting" in prov["engine_version"]
    assert prov["seed"] == 1234
    assert prov["recorded"]["wall_s"] > 0 and prov["verified"]["wall_s"] > 0
    assert prov["recorded"]["machine"]["cpus"] == os.cpu_count()
    assert prov["verified"]["simconform"] and "command_line" in prov["recorded"]


def test_every_verdict_has_its_reason() -> None:
    band = {"tolerance": [0.018, 0.022], "unit": "m"}
    assert "inside" in verdict_reason({"verdict": "pass", "ci": [0.019, 0.021], **band})
    assert "wholly above" in verdict_reason({"verdict": "fail", "ci": [0.023, 0.03], **band})
    assert "straddles the upper bound 0.022" in verdict_reason(
        {"verdict": "inconclusive", "ci": [0.02, 0.025], **band}
    )
    held = {"verdict": "inconclusive", "ci": [0.023, 0.025], "family": {}, **band}
    assert "raw level only" in verdict_reason({**held, "family": {"raw_level": 0.05}})
    assert verdict_reason({"verdict": "not_applicable", "reason": "why not", "unit": ""}) == (
        "why not"
    )
    open_band = {"verdict": "inconclusive", "ci": [0.5, 2.0], "tolerance": [1.0, None]}
    assert "straddles the lower bound 1" in verdict_reason(open_band)
    assert "open end" in verdict_reason({**open_band, "ci": [0.5, None]})


def test_markdown_and_html_say_the_same_in_order(short_run: Path) -> None:
    md = (short_run / "report" / "report.md").read_text()
    page = (short_run / "report" / "report.html").read_text()
    order = ["## Summary", "## Not checked", "## Run", "## lidar:", "## camera:", "## Provenance"]
    at = [md.index(h) for h in order]
    assert at == sorted(at)
    assert md.index("overview.png") < md.index("## lidar:")
    for text in ("Not checked", "Provenance", "SHA-256", "straddles", "lies inside"):
        assert text in md and text in page
    report = _report(short_run)
    for name in report["sensors"]["imu"]["metrics"]:
        assert f"| {name} |" in md
    assert "`" not in page  # inline code became <code>
    # self-contained: every image is embedded, nothing is fetched
    srcs = re.findall(r"src='([^']*)'", page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert len(srcs) == len(list((short_run / "report").glob("*.png")))
    assert "http://" not in page and "https://" not in page


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI must render the report: chromium is not installed (.ci/run)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return exe


def test_html_renders_in_a_headless_browser(short_run: Path, tmp_path: Path) -> None:
    """The page as Chromium lays it out: the verdict and the per-sensor tables are in the DOM,
    the first screen is not blank and shows the verdict badge in its colour."""
    exe = _chromium()
    url = (short_run / "report" / "report.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    env = {**os.environ, "HOME": str(tmp_path)}  # its profile, not the user's
    dom = subprocess.run(
        [exe, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, env=env
    ).stdout
    report = _report(short_run)
    verdict = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}[report["verdict"]]
    assert 'class="badge"' in dom
    assert re.search(rf"<h1[^>]*>.*{verdict}.*</h1>", dom, re.S)
    assert dom.count("<table") >= 2 + len(report["sensors"])  # summary, provenance, sensors
    assert "<td>range_std</td>" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [exe, *flags, "--window-size=1280,900", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
        env=env,
        check=True,
    )
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    assert img.shape[:2] == (900, 1280)
    assert img.std() > 20  # text, tables and figures, not a blank page
    colour = {
        "PASS": (0x1A, 0x7F, 0x37),
        "FAIL": (0xCF, 0x22, 0x2E),
        "INCONCLUSIVE": (0x9A, 0x67, 0),
    }
    badge = np.all(np.abs(img[:120] - np.array(colour[verdict])) <= 8, axis=2)
    assert badge.sum() > 500  # the verdict badge, on the first screen


def test_histograms_overlay_what_the_verdict_judges_against(tmp_path: Path) -> None:
    """The camera's overlay is the predicted-after-encoding sigma, the configured one drawn only
    for comparison; axes carry units; one outlier does not squash the axes."""
    from simconform.verify.plots import _plt, hist_axis

    plt = _plt()
    rng = np.random.default_rng(1)
    e = np.rint(rng.normal(0, 3.3, 20_000))
    e[0] = 250.0  # one wild pixel
    f = {
        "errors": e,
        "sigma": 5.0,
        "bias": 0.0,
        "unit": "levels",
        "predicted_sigma": 3.3,
        "predicted_bias": 0.0,
        "predicted_from": "after clamp, round, JPEG",
    }
    fig, ax = plt.subplots()
    hist_axis(ax, "intensity", f, "camera")
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0].startswith("predicted after clamp, round, JPEG: N(0, 3.3²)")
    peak = max(ax.get_lines()[0].get_ydata())
    assert peak == pytest.approx(1 / (3.3 * np.sqrt(2 * np.pi)), rel=1e-3)
    assert "not judged" in labels[1]
    lo, hi = ax.get_xlim()
    assert -20 < lo < -13 and 13 < hi < 20  # robust limits: the 250 is off the axes
    assert ax.get_xlabel() == "intensity error (levels); 1 beyond the axes"
    assert ax.get_ylabel() == "probability density (1/levels)"
    plt.close(fig)


def test_run_writes_the_overview_and_camera_overlay(short_run: Path) -> None:
    from PIL import Image

    over = Image.open(short_run / "report" / "overview.png")
    assert over.size[0] > 1000 and np.asarray(over.convert("L")).std() > 20
    cam = _report(short_run)["sensors"]["camera"]["metrics"]["intensity_std"]
    assert cam["predicted"] < cam["configured"]  # JPEG smooths: the overlay must not be 5


def test_foxglove_layout_shows_topics_and_fields_the_demo_run_writes(short_run: Path) -> None:
    """examples/foxglove_layout.json: every topic it opens is in the demo's bag with a type its
    panel draws, every plotted field resolves on a real message, every pane is configured."""
    from rosbags.highlevel import AnyReader

    layout = json.loads((REPO / "examples" / "foxglove_layout.json").read_text())
    cfg = layout["configById"]

    def leaves(node):
        if isinstance(node, str):
            yield node
        else:
            yield from leaves(node["first"])
            yield from leaves(node["second"])

    assert sorted(leaves(layout["layout"])) == sorted(cfg)
    drawn = {
        "3D": {
            "sensor_msgs/msg/PointCloud2",
            "sensor_msgs/msg/CameraInfo",
            "nav_msgs/msg/Odometry",
        },
        "Image": {"sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"},
        "map": {"sensor_msgs/msg/NavSatFix"},
    }
    with AnyReader([short_run / "bag"]) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        first = {}
        for conn, _, raw in reader.messages():
            first.setdefault(conn.topic, reader.deserialize(raw, conn.msgtype))
    for pid, c in cfg.items():
        kind = pid.split("!")[0]
        if kind == "3D":
            topics = list(c["topics"])
        elif kind == "Image":
            topics = [c["imageMode"]["imageTopic"]]
            assert types[c["imageMode"]["calibrationTopic"]] == "sensor_msgs/msg/CameraInfo"
        elif kind == "map":
            topics = [c["followTopic"], *c["topicColors"]]
        else:
            assert kind == "Plot" and c["paths"]
            for p in c["paths"]:
                topic, *fields = p["value"].split(".")
                value = first[topic]
                for f in fields:
                    value = getattr(value, f)
                assert isinstance(value, float) and p["enabled"], p
            continue
        for t in topics:
            assert types[t] in drawn[kind], (pid, t)


def test_figures_drawn_in_two_processes_are_the_ones_one_process_draws(
    short_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify draws the figures in a forked child and this process where two CPUs are usable
    (verify/figures.py): every PNG is byte-identical to the one-process drawing."""
    from simconform.verify import figures
    from simconform.verify.verifier import verify_run

    forks: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    # a thread an earlier test left in this process (Ray's, say) would keep verify from forking
    monkeypatch.setattr(figures.threading, "active_count", lambda: 1)
    pngs = {}
    for cpus in (2, 1):
        run = tmp_path / f"cpus{cpus}"
        shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
        monkeypatch.setattr(figures, "usable_cpus", lambda n=cpus: n)
        verify_run(run)
        pngs[cpus] = {p.name: p.read_bytes() for p in (run / "report").glob("*.png")}
        assert len(forks) == 1  # forked with two CPUs, not with one
    assert len(pngs[2]) >= 6 and "overview.png" in pngs[2]
    assert pngs[2] == pngs[1]


def test_the_largest_figures_are_drawn_first_and_listed_in_the_reports_order(
    short_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conformance chart and the camera's frames are drawn first (what they free is then
    reused by the others: a lower peak for a verification in one process), and the report
    still lists every figure in its own order: overview, each sensor's, conformance last."""
    from simconform.verify import figures
    from simconform.verify.verifier import verify_run

    drawn: list[str] = []
    draw = figures.draw

    def recording(figs, fork=None):
        drawn.extend(args[0].name for _f, args, _w in figs)
        return draw(figs, fork)

    monkeypatch.setattr(figures, "draw", recording)
    run = tmp_path / "run"
    shutil.copytree(short_run, run, ignore=shutil.ignore_patterns("report"))
    verify_run(run, jobs=0)
    assert drawn[:2] == ["conformance.png", "camera_frame.png"]
    listed = re.findall(r"!\[([a-z_]+\.png)\]", (run / "report" / "report.md").read_text())
    assert sorted(listed) == sorted(drawn) and len(listed) >= 7
    assert listed[0] == "overview.png" and listed[-1] == "conformance.png"
    assert listed.index("camera_errors.png") + 1 == listed.index("camera_frame.png")
    page = (run / "report" / "report.html").read_text()
    assert re.findall(r"alt='([a-z_]+\.png)'", page) == listed


def test_a_process_with_other_threads_draws_its_figures_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fork beside another thread (it may hold a lock the child would wait for)."""
    import threading

    from simconform.verify import figures

    monkeypatch.setattr(figures, "usable_cpus", lambda: 2)

    def pid(_i: int) -> int:
        return os.getpid()

    figs = [(pid, (i,), 1.0) for i in range(4)]
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert set(figures.draw(figs)) == {os.getpid()}
    finally:
        stop.set()
        other.join()


def test_a_failed_figure_child_leaves_its_share_to_the_parent(tmp_path: Path) -> None:
    """Both processes draw (two pids in the results); a child that fails has its figures drawn
    by the parent, so the caller gets every figure, or the parent's own error."""
    from simconform.verify.figures import draw

    parent = os.getpid()

    def fig(path: Path, text: str, fail_in_child: bool) -> tuple[int, Path]:
        if fail_in_child and os.getpid() != parent:
            raise RuntimeError("the child fails")
        path.write_text(text)
        return os.getpid(), path

    for fail in (False, True):
        figs = [(fig, (tmp_path / f"{i}.txt", f"figure {i}", fail), 1.0 + i) for i in range(5)]
        got = draw(figs, fork=True)
        assert [p for _pid, p in got] == [tmp_path / f"{i}.txt" for i in range(5)]
        assert all((tmp_path / f"{i}.txt").read_text() == f"figure {i}" for i in range(5))
        pids = {pid for pid, _p in got}
        assert parent in pids and len(pids) == (1 if fail else 2)


def test_histogram_of_a_bias_without_noise() -> None:
    """Errors that are one value up to round-off (a bias without noise: 0.05 +- a few ulps) had
    no histogram: numpy could not split their spread into bins, and no report was written."""
    import numpy as np

    from simconform.verify.plots import axis_limits, bin_edges

    e = 0.05 + np.array([0.0, 1e-17, -1e-17, 2e-17] * 50)
    lo, hi = axis_limits(e, 0.05, 0.0)
    edges = bin_edges(e, lo, hi)
    assert lo < 0.05 < hi and np.all(np.diff(edges) > 0)
    assert np.histogram(e, edges)[0].sum() == len(e)

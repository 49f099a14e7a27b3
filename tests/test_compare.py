"""`simconform compare`: refusals, exact truth differences on re-runs and on a bag perturbed in a
known way, PSNR/SSIM closed forms, the TOST rule and the paired bootstrap, reference vs MuJoCo."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import yaml
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer
from typer.testing import CliRunner

from conftest import cli, demo_spec, write_yaml
from simconform.bag.cloud import dtype_of
from simconform.bag.messages import TYPESTORE, serialize
from simconform.cli import app
from simconform.errors import UserError
from simconform.run import RunConfig, run
from simconform.spec import Spec
from simconform.verify.compare import (
    CompareConfig,
    Series,
    compare,
    compare_runs,
    paired_bootstrap,
    psnr,
    ssim,
    tost_level,
    tost_verdict,
)
from simconform.verify.compare.camera import SSIM_K1
from simconform.verify.compare.report import markdown

DURATION = 1.0
OFFSET = 0.005  # m along every truth ray
FLIP_EVERY = 40  # every 40th ray (counted over the sweep) that hits loses its return


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The demo for 1 s with a 160 x 120 camera, on the reference backend, twice."""
    root = tmp_path_factory.mktemp("compare")
    data = demo_spec()
    data["sensors"]["camera"].update(width=160, height=120)
    spec = write_yaml(root / "small.yaml", data)
    out = {"spec": spec}
    for name in ("a", "a2"):
        cfg = RunConfig(out=root / name, spec=spec, duration=DURATION, jobs=0)
        out[name] = run(cfg, progress=False).out
    return out


def _edit_manifest(src: Path, dst: Path, edit) -> Path:
    """A copy of a run's run.json only (refusal happens before any bag is read)."""
    dst.mkdir()
    data = json.loads((src / "run.json").read_text())
    edit(data)
    (dst / "run.json").write_text(json.dumps(data))
    return dst


def test_rerun_compares_exactly_equal_and_passes(runs, tmp_path) -> None:
    out = tmp_path / "cmp"
    res = cli("compare", str(runs["a"]), str(runs["a2"]), "--out", str(out))
    # stderr holds compare's own progress lines (not a terminal) and no library warnings
    # (scipy's KS fallback was one)
    lines = res.stderr.splitlines()
    assert lines and all(line.startswith("simconform: compar") for line in lines), res.stderr
    assert "simconform: comparing engine truth 100 % (done in" in res.stderr
    assert "simconform: compare: published errors of run B" in lines
    res = CliRunner().invoke(
        app, ["compare", str(runs["a"]), str(runs["a2"]), "--out", str(out), "--force"]
    )
    assert res.exit_code == 0, res.output
    assert "verdict: PASS" in res.output
    report = json.loads((out / "compare.json").read_text())
    assert set(report) >= {"runs", "confidence", "truth", "published", "verdict"}
    assert report["verdict"] == "pass"
    assert report["runs"]["a"]["backend"] == report["runs"]["b"]["backend"] == "reference"
    t = report["truth"]
    assert t["lidar"]["hit_agreement"]["measured"] == 1.0
    for m in ("range_diff_bias", "range_diff_std", "range_diff_p99", "range_diff_max"):
        assert t["lidar"][m]["measured"] == 0.0
    for sensor in ("imu", "gnss", "odom"):
        assert all(m["measured"] == 0.0 for m in t[sensor].values()), sensor
    cam = t["camera"]
    assert cam["psnr_mean"]["measured"] is None  # inf: identical frames
    assert cam["psnr_mean"]["identical_frames"] == cam["psnr_mean"]["frames"] == 10
    assert cam["psnr_mean"]["verdict"] == "pass"
    assert cam["ssim_min"]["measured"] == 1.0
    assert cam["depth_diff_maxabs"]["measured"] == 0.0
    for sensor, metrics in report["published"].items():
        for name, m in metrics.items():
            assert m["difference"] == 0.0 and m["ci"] == [0.0, 0.0], (sensor, name)
            assert m["verdict"] == "pass"
    ks = report["published"]["lidar"]["range_std"]
    assert ks["ks_p"] == 1.0 and ks["ad_p"] >= 0.25  # identical samples (scipy caps at 0.25)
    for f in ("compare.md", "junit.xml", "lidar_disagreement.png", "camera_worst_frame.png"):
        assert (out / f).is_file(), f
    # full agreement draws as white paper, not as a black field that reads as a broken plot
    from PIL import Image

    img = np.asarray(Image.open(out / "lidar_disagreement.png").convert("L"), dtype=float)
    assert img[:, : img.shape[1] // 2].mean() > 200
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    n_metrics = sum(len(s) for part in ("truth", "published") for s in report[part].values())
    assert len(list(cases)) == n_metrics
    # an existing comparison is replaced only with --force
    with pytest.raises(UserError, match="--force"):
        compare(CompareConfig(runs["a"], runs["a2"], out=out))


def test_an_interrupted_compare_force_keeps_the_old_comparison(runs, tmp_path, monkeypatch) -> None:
    """`compare --force` deleted the old comparison before drawing the new one, so a Ctrl-C
    while it drew left half of each; the new one is now drawn in DIR/.simconform/ first."""
    from simconform.verify.compare import writer

    out = tmp_path / "cmp"
    compare(CompareConfig(runs["a"], runs["a2"], out=out))
    old = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert "compare.json" in old and "equivalence.png" in old

    def drawn_then_interrupted(folder: Path, res):
        (folder / "equivalence.png").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "write_plots", drawn_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        compare(CompareConfig(runs["a"], runs["a2"], out=out, force=True))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == old
    assert not list((out / ".simconform").glob("building-*"))
    monkeypatch.undo()
    (out / "lidar_stale.png").write_bytes(b"x")  # a user's file: --force is refused over it
    with pytest.raises(UserError, match=r"lidar_stale\.png"):
        compare(CompareConfig(runs["a"], runs["a2"], out=out, force=True))
    (out / "lidar_stale.png").unlink()
    compare(CompareConfig(runs["a"], runs["a2"], out=out, force=True))
    assert json.loads((out / "compare.json").read_text())["verdict"] == "pass"
    owned = json.loads((out / ".simconform" / "outputs.json").read_text())["paths"]
    assert sorted(owned) == sorted(p.name for p in out.iterdir() if p.is_file())


def test_run_compared_with_itself_is_allowed(runs) -> None:
    cfg = CompareConfig(runs["a"], runs["a"], objects=False, bootstrap=200)
    report = compare(cfg, write=False)
    assert report["verdict"] == "pass"
    assert any("same folder" in n for n in report["notes"])


def test_different_seed_is_refused_with_exit_2(runs, tmp_path) -> None:
    other = _edit_manifest(runs["a"], tmp_path / "seed7", lambda d: d.update(seed=7))
    out = tmp_path / "never"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "simconform.cli",
            "compare",
            str(runs["a"]),
            str(other),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simconform: error:")
    assert "seed: got 7; expected 1234" in lines[0] and "Traceback" not in res.stderr
    assert not out.exists()


def _sigma(d: dict) -> None:
    d["spec_content"]["sensors"]["lidar"]["noise"]["range"]["sigma"] = 0.03


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_sigma, "spec_content.sensors.lidar.noise.range.sigma"),
        (lambda d: d["world_content"]["origin"].update(lat=1.0), "world_content.origin.lat"),
        (lambda d: d.update(trajectory_sha256="0" * 64), "trajectory_sha256"),
        (lambda d: d.update(interpolation="linear"), "interpolation"),
        (lambda d: d.pop("interpolation"), "interpolation"),  # older runs: linear
        (lambda d: d.update(end_ns=d["end_ns"] - 1), "end_ns"),
    ],
)
def test_different_inputs_are_refused(runs, tmp_path, edit, field) -> None:
    other = _edit_manifest(runs["a"], tmp_path / "b", edit)
    with pytest.raises(UserError) as err:
        compare(CompareConfig(runs["a"], other, out=tmp_path / "never"))
    msg = str(err.value)
    assert f"{field}: got" in msg and "only the backend may differ" in msg
    assert not (tmp_path / "never").exists()


def perturb(src: Path, dst: Path, spec: Spec) -> tuple[int, int]:
    """Copy a run and rewrite its bag: every truth lidar point moves OFFSET along its nominal
    ray; every FLIP_EVERY-th hit becomes no return. Returns (rays flipped, rays in total)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("bag", "report"))
    nominal = spec.sensors["lidar"].directions()
    flipped = total = 0
    writer = Writer(dst / "bag", version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    with AnyReader([src / "bag"], default_typestore=TYPESTORE) as reader:
        conns = {
            c.id: writer.add_connection(c.topic, c.msgtype, typestore=TYPESTORE)
            for c in reader.connections
        }
        for conn, log_ns, raw in reader.messages():
            if conn.topic == "/truth/lidar/points":
                msg = reader.deserialize(raw, conn.msgtype)
                arr = np.frombuffer(bytes(msg.data), dtype=dtype_of("velodyne")).copy()
                arr = arr.reshape(msg.height, msg.width)
                hit = np.isfinite(arr["x"])
                for k, axis in enumerate("xyz"):
                    arr[axis] = arr[axis] + OFFSET * nominal[..., k]
                order = np.cumsum(hit.ravel()).reshape(hit.shape)
                flip = hit & (order % FLIP_EVERY == 0)
                for f in ("x", "y", "z", "intensity"):
                    arr[f][flip] = np.nan
                flipped += int(flip.sum())
                total += hit.size
                msg.data = np.frombuffer(arr.tobytes(), dtype=np.uint8)
                raw = serialize(msg, conn.msgtype)
            writer.write(conns[conn.id], log_ns, raw)
    writer.close()
    return flipped, total


def test_perturbed_truth_is_recovered_exactly(runs, tmp_path) -> None:
    spec = Spec.model_validate(json.loads((runs["a"] / "run.json").read_text())["spec_content"])
    flipped, total = perturb(runs["a"], tmp_path / "b", spec)
    assert flipped > 0
    res = compare_runs(CompareConfig(runs["a"], tmp_path / "b", objects=False, bootstrap=500))
    lidar = res.report["truth"]["lidar"]
    assert lidar["range_diff_bias"]["measured"] == pytest.approx(OFFSET, abs=2e-6)
    assert lidar["range_diff_p99"]["measured"] == pytest.approx(OFFSET, abs=1e-5)
    assert lidar["range_diff_std"]["measured"] < 1e-5  # float32 rounding only
    assert lidar["hit_only_a"]["measured"] == flipped / total
    assert lidar["hit_only_b"]["measured"] == 0.0
    assert lidar["hit_agreement"]["measured"] == (total - flipped) / total
    assert lidar["ray_disagreement"]["measured"] == flipped / total  # 5 mm < 10 mm tolerance
    assert lidar["range_beyond_tolerance"]["measured"] == 0.0
    assert res.truth_diffs["lidar"].disagree.sum() == flipped
    assert lidar["range_diff_bias"]["verdict"] == lidar["range_diff_p99"]["verdict"] == "pass"
    assert lidar["hit_agreement"]["verdict"] == "fail"  # about 1 % of rays lost their return
    assert res.report["verdict"] == "fail"
    # B's published points are unchanged, so against B's shifted truth its range error moves
    # by -5 mm: far outside the 2 mm bias equivalence bound
    pub = res.report["published"]["lidar"]["range_bias"]
    assert pub["difference"] == pytest.approx(-OFFSET, abs=1e-4)
    assert pub["verdict"] == "fail" and pub["ks_p"] < 1e-6
    assert res.report["truth"]["imu"]["accel_diff_maxabs_x"]["measured"] == 0.0
    # a tighter tolerance than the shift: every ray both hit is now beyond it
    tight = compare_runs(
        CompareConfig(runs["a"], tmp_path / "b", range_tolerance=0.004, objects=False, bootstrap=50)
    )
    t = tight.report["truth"]["lidar"]
    assert t["range_beyond_tolerance"]["measured"] == 1.0
    assert t["range_diff_p99"]["verdict"] == t["range_diff_bias"]["verdict"] == "fail"


def test_psnr_and_ssim_closed_forms() -> None:
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, size=(40, 50, 3), dtype=np.uint8)
    assert psnr(img, img) == math.inf
    assert ssim(img, img) == 1.0
    a = np.full((32, 32, 3), 100, dtype=np.uint8)
    b = np.full((32, 32, 3), 110, dtype=np.uint8)
    assert psnr(a, b) == pytest.approx(10 * math.log10(255**2 / 100), rel=1e-12)
    c1 = (SSIM_K1 * 255) ** 2  # constant images: variances 0, only the luminance term is left
    assert ssim(a, b) == pytest.approx((2 * 100 * 110 + c1) / (100**2 + 110**2 + c1), rel=1e-12)
    noisy = np.clip(img.astype(int) + rng.integers(-20, 21, img.shape), 0, 255).astype(np.uint8)
    s = ssim(img, noisy)
    assert 0 < s < 1 and s == pytest.approx(ssim(noisy, img), rel=1e-12)
    assert ssim(img[..., 0], noisy[..., 0]) < 1  # single channel works too


def test_tost_verdicts() -> None:
    assert tost_level(0.95) == pytest.approx(0.90)
    assert tost_verdict((-0.5, 0.5), 1.0) == "pass"
    assert tost_verdict((0.0, 0.0), 1e-12) == "pass"
    assert tost_verdict((1.5, 2.0), 1.0) == "fail"
    assert tost_verdict((-3.0, -1.2), 1.0) == "fail"
    assert tost_verdict((0.5, 1.5), 1.0) == "inconclusive"
    assert tost_verdict((-2.0, 2.0), 1.0) == "inconclusive"
    assert tost_verdict((math.nan, math.nan), 1.0) == "inconclusive"


def _series(rng, captures: int, per: int, loc: float) -> Series:
    keys = np.arange(captures) * 100
    return Series.of_groups(keys, [rng.normal(loc, 1.0, per) for _ in keys], 0.0)


def test_paired_bootstrap_identical_and_shifted() -> None:
    rng = np.random.default_rng(11)
    a = _series(rng, 200, 20, 0.0)
    same = paired_bootstrap(a, a, ["mean", "std"], 0.9, 500, 1)
    assert same["mean"][2:] == (0.0, (0.0, 0.0)) and same["std"][3] == (0.0, 0.0)
    b = _series(rng, 200, 20, 0.3)  # independent draws, mean shifted by 0.3
    res = paired_bootstrap(a, b, ["mean", "std"], 0.9, 2000, 1)
    _, _, diff, (lo, hi) = res["mean"]
    assert lo < 0.3 < hi and lo > 0.15 and diff == pytest.approx(0.3, abs=0.08)
    half = 1.645 * math.sqrt(2 / 4000)  # the normal-theory half-width of a difference of means
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.2)
    assert tost_verdict((lo, hi), 0.1) == "fail" and tost_verdict((lo, hi), 1.0) == "pass"


def test_reference_vs_mujoco_lidar_agrees(runs, tmp_path) -> None:
    from simconform.registry import BACKENDS

    if "mujoco" not in BACKENDS:
        pytest.skip("no MuJoCo backend registered in simconform.registry.BACKENDS yet")
    pytest.importorskip("mujoco", reason="the mujoco package is not installed")
    cfg = RunConfig(out=tmp_path / "mj", spec=runs["spec"], duration=DURATION, backend="mujoco")
    try:
        mj = run(cfg, progress=False).out
    except Exception as exc:  # pragma: no cover - only without OpenGL
        if "OpenGL" in str(exc) or "GL" in type(exc).__name__:
            pytest.skip(f"no OpenGL context for MuJoCo's renderer here: {exc}")
        raise
    report = compare(CompareConfig(runs["a"], mj, out=tmp_path / "cmp", bootstrap=500))
    lidar = report["truth"]["lidar"]
    assert lidar["hit_agreement"]["measured"] >= 0.995
    assert abs(lidar["range_diff_bias"]["measured"]) < 1e-3
    assert report["runs"]["b"]["backend"] == "mujoco"
    assert (tmp_path / "cmp" / "compare.md").is_file()


def test_replay_run_compared_with_the_run_it_replays(tmp_path: Path, short_run: Path) -> None:
    """Issue 5: `compare` accepts a replay run against a run of the same world and spec."""
    from simconform.adapters.replay import ReplayConfig, replay
    from simconform.demo import DEMO_SPEC, DEMO_WORLD
    from simconform.run import RunConfig, run
    from simconform.verify.compare import CompareConfig, compare_runs

    spec = yaml.safe_load(DEMO_SPEC.read_text())
    spec["sensors"] = {k: spec["sensors"][k] for k in ("lidar", "imu", "gnss", "odom")}
    spec_path = tmp_path / "core.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    src = run(RunConfig(out=tmp_path / "src", duration=1.0, spec=spec_path), progress=False).out
    own = Path(__file__).resolve().parent.parent / "examples" / "replay" / "own_layout.yaml"
    rep = replay(
        ReplayConfig(
            bag=src / "bag", map=own, out=tmp_path / "rep", world=DEMO_WORLD, spec=spec_path
        )
    )
    result = compare_runs(CompareConfig(run_a=src, run_b=rep.out))
    report = result.report
    assert report["runs"]["b"]["backend"] == "replay"
    assert report["truth"]["lidar"]["hit_agreement"]["measured"] == 1.0
    assert report["verdict"] == "pass"
    # the notes say what a replay is: no "same seed, identical noise streams" claim
    assert any("Run B is a replayed bag" in n for n in report["notes"])
    assert not any("same seed" in n for n in report["notes"])
    assert "- seed 1234 (A), none (a replayed bag) (B)," in markdown(report, [])
    # the camera of a full demo run, which the map does not map, is named as not compared
    wide = compare_runs(CompareConfig(run_a=short_run, run_b=rep.out)).report
    assert any(n.startswith("Not compared: camera of run A") for n in wide["notes"]), wide["notes"]


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"psnr_min": -5.0}, "--psnr-min"),  # a PSNR of 8-bit images is never below 0 dB
        ({"psnr_min": math.inf}, "--psnr-min"),
        ({"range_tolerance": 0.0}, "--range-tolerance"),
        ({"confidence": 1.0}, "--confidence"),
    ],
)
def test_thresholds_that_judge_nothing_are_refused(runs, tmp_path, change, flag) -> None:
    with pytest.raises(UserError, match=flag):
        compare(CompareConfig(runs["a"], runs["a"], out=tmp_path / "never", **change))
    assert not (tmp_path / "never").exists()

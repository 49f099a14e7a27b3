"""`simconform localize`: KISS-ICP on a run's published lidar, judged against its truth with
evo, on a small street world where lidar odometry is well posed (the demo world is a few boxes
on a plane: KISS-ICP loses track there even on exact truth clouds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import cli, one_error_line, write_yaml

ROOT = Path(__file__).resolve().parents[1]


def street_world() -> dict:
    """A 70 m street: ground, façades at y = +-7 m with irregular recesses, poles and parked
    boxes at irregular spacing (so motion along the street is observable)."""
    rng = np.random.default_rng(7)
    objects: list[dict] = [
        {"type": "plane", "name": "ground", "point": [0, 0, -0.3], "normal": [0, 0, 1]}
    ]
    # the road: 2 m tiles a few cm high or low and tilted by up to 1.7 deg. A perfect plane
    # under a lidar whose rays keep their angles from sweep to sweep looks the same from
    # everywhere, and KISS-ICP takes that for standing still (docs/localization.md)
    for i, tx in enumerate(np.arange(-10, 62, 2.0)):
        for j, ty in enumerate(np.arange(-7, 7.01, 2.0)):
            objects.append(
                {
                    "type": "box",
                    "name": f"tile_{i}_{j}",
                    "center": [float(tx) + 1, float(ty), float(rng.uniform(-0.35, -0.25))],
                    "size": [2.0, 2.0, 0.6],
                    "rpy": [*map(float, rng.uniform(-0.03, 0.03, 2)), 0.0],
                }
            )
    x = -10.0
    k = 0
    while x < 60:
        length = float(rng.uniform(0.8, 1.6))
        for side in (-1, 1):
            depth = float(rng.uniform(0.3, 1.5))
            objects.append(
                {
                    "type": "box",
                    "name": f"facade_{k}_{side + 1}",
                    "center": [x + length / 2, side * (7 + depth / 2), 4.5],
                    "size": [length, depth, float(rng.uniform(3, 9))],
                }
            )
        x += length
        k += 1
    for i, px in enumerate(rng.uniform(-5, 55, 30)):
        side = 1 if i % 2 else -1
        objects.append(
            {
                "type": "cylinder",
                "name": f"pole_{i}",
                "center": [float(px), side * 4.8, 2.0],
                "radius": 0.25,
                "length": 4.0,
            }
        )
    for i, px in enumerate(rng.uniform(0, 50, 12)):
        objects.append(
            {
                "type": "box",
                "name": f"car_{i}",
                "center": [float(px), (-1) ** i * 3.6, 0.75],
                "size": [4.2, 1.8, 1.5],
                "rpy": [0, 0, float(rng.uniform(-0.1, 0.1))],
            }
        )
    return {"name": "street", "origin": {"lat": 48.262, "lon": 11.668, "alt": 480.0},
            "objects": objects}  # fmt: skip


@pytest.fixture(scope="module")
def street(tmp_path_factory) -> Path:
    """street.yaml, street.tum and lidar.yaml (the rover's lidar alone) in one folder."""
    d = tmp_path_factory.mktemp("street")
    world = write_yaml(d / "street.yaml", street_world())
    # from rest (as a drive starts; KISS-ICP's constant-velocity prediction starts at zero
    # speed) to 4 m/s in 3 s, then a gentle S
    t = np.arange(0, 13.01, 0.25)
    x = np.where(t < 3, 2.0 / 3.0 * t**2, 6.0 + 4.0 * (t - 3))
    path = np.stack([t, x, 1.2 * np.sin(x / 12.0)], axis=1)
    (d / "street.tum").write_text("".join(f"{a:.3f} {b:.4f} {c:.4f}\n" for a, b, c in path))
    spec = yaml.safe_load((ROOT / "sensors_spec" / "rover_core.yaml").read_text())
    spec["sensors"] = {"lidar": spec["sensors"]["lidar"]}
    write_yaml(d / "lidar.yaml", spec)
    assert world.exists()
    return d


@pytest.fixture(scope="module")
def street_run(street: Path) -> Path:
    d = street
    out = d / "run"
    res = cli(
        "run", "--spec", str(d / "lidar.yaml"), "--world", str(d / "street.yaml"), "--trajectory",
        str(d / "street.tum"), "--duration", "12", "--out", str(out),
    )  # fmt: skip
    assert res.returncode in (0, 1), res.stderr
    return out


def test_localize_on_a_street(street_run: Path, tmp_path: Path) -> None:
    """The command users run, default flags: KISS-ICP follows the street (measured 1.9 % of
    the path, docs/localization.md; < 1 % is issue 19's goal for worlds/urban.yaml; points
    deskewed twice gave 8 %), and every output is written."""
    out = tmp_path / "loc"
    res = cli("localize", str(street_run), "--out", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    r = json.loads((out / "localization.json").read_text())
    assert r["odometry"] == "kiss-icp" and r["sensor"] == "lidar" and r["seed"] == 1234
    assert r["sweeps"] >= 100 and r["sweeps_with_point_time"] == r["sweeps"]
    assert r["deskew"] is True and r["pose_instant"] == "each sweep's last point"
    assert 40 < r["path_length_m"] < 46
    assert r["ape_rmse_m"] / r["path_length_m"] < 0.05, r  # lost track: 30-50 %
    assert r["rpe_trans_pct"] is not None and r["rpe_segment_m"] > 15
    assert r["verdict"] == "not_applicable" and r["tolerances"] == {}  # verify's verdict set
    assert "APE RMSE" in (out / "localization.md").read_text()
    assert r["integrity"]["scope"] == "whole run" and r["integrity"]["status"] == "intact"
    for f in ("trajectory.png", "ape_over_time.png"):
        assert (out / f).stat().st_size > 10_000
    again = cli("localize", str(street_run), "--out", str(out))  # an existing result is kept
    assert again.returncode == 2 and "--force" in again.stderr


def test_declared_tolerance_gives_the_verdict() -> None:
    from simconform.downstream.evaluate import Evaluation
    from simconform.downstream.localize import LocalizeConfig, _report
    from simconform.spec import Spec

    spec = yaml.safe_load((ROOT / "sensors_spec" / "vlp16.yaml").read_text())
    ev = Evaluation(0.5, 0.9, np.zeros(3), 1.5, 0.2, 100.0, 50.0)
    for tol, verdict in (({"ape_rmse_m": 1.0}, "pass"), ({"ape_rmse_m": 0.4}, "fail"),
                         ({"ape_rmse_m": 1.0, "rpe_trans_pct": 1.0}, "fail")):  # fmt: skip
        s = Spec.model_validate({**spec, "localization": tol})
        r = _report(LocalizeConfig(Path("run")), s, "lidar", ev, 3, 3, {})
        assert r["verdict"] == verdict, (tol, r["tolerances"])
        assert r["drift_pct"] == 0.5


def test_rpe_pairs_come_from_the_reference_path() -> None:
    """KITTI's RPE: segments of `segment_m` of *true* path. A real Gazebo drive's truth against
    an estimate that under-tracks by half (every step half as long, headings exact): each
    reference pair's relative translation is off by half its chord, so RPE is half the mean
    chord per segment (about 50 %), and rotation RPE is 0. Pairs taken along the estimate's
    path instead find only the few spanning the whole drive, twice as long: about 100 %."""
    from simconform.downstream.evaluate import evaluate
    from simconform.downstream.sweeps import TruePoses
    from simconform.frames import Pose

    gt = TruePoses(ROOT / "tests/data/gazebo/run/gt/base_link.tum", Pose.identity())
    t = gt.t
    truth = gt.at(t)
    rel = truth[0].inverse().compose(truth)
    est = Pose(0.5 * rel.t, rel.rot)
    ev = evaluate(est, truth, t, segment_m=100.0)  # a 3.7 m drive: half its path per segment
    dist = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(truth.t, axis=0), axis=1))])
    seg = dist[-1] / 2
    assert ev.segment_m == pytest.approx(seg) and 3 < dist[-1] < 5
    chords = []
    for i in range(len(t) - 1):  # evo's all_pairs rule, on the reference's path length
        j = i + 1 + int(np.argmin(np.abs(dist[i + 1 :] - dist[i] - seg)))
        if abs(dist[j] - dist[i] - seg) <= 0.1 * seg:
            chords.append(np.linalg.norm(truth.t[j] - truth.t[i]))
    assert len(chords) > 40  # pairs found along the whole first half of the drive
    assert ev.rpe_trans_pct == pytest.approx(100 * 0.5 * np.mean(chords) / seg, rel=1e-6)
    assert 45 < ev.rpe_trans_pct < 51 and ev.rpe_rot_deg_per_100m == pytest.approx(0, abs=1e-4)


def test_bad_input_is_one_message(tmp_path: Path) -> None:
    res = cli("localize", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and res.stderr.startswith("simconform: error:")
    assert "Traceback" not in res.stderr and not (tmp_path / "o").exists()
    bad = Path(tmp_path / "spec.yaml")
    spec = yaml.safe_load((ROOT / "sensors_spec" / "vlp16.yaml").read_text())
    write_yaml(bad, {**spec, "localization": {"ape_rmse_m": -1}})
    res = cli("run", "--spec", str(bad), "--dry-run")
    assert res.returncode == 2 and "localization.ape_rmse_m" in res.stderr, res.stderr


def test_campaign_localizes_every_cell_and_plots_ape_against_the_variants(street: Path) -> None:
    """`localize: true`: each cell holds localization/, the campaign a row per variant with
    the APE across seeds (mean, Student-t CI) and plots/localization.png. Default --jobs."""
    campaign = write_yaml(
        street / "noise.yaml",
        {
            "spec": "lidar.yaml",
            "seeds": [1, 2],
            "variants": {"nominal": {}, "noise3x": {"noise_scale": 3.0}},
            "worlds": [{"world": "street.yaml", "trajectory": "street.tum"}],
            "duration": 6.0,
            "localize": True,
        },
    )
    out = street / "campaign"
    res = cli("campaign", str(campaign), "--out", str(out), timeout=900)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    report = json.loads((out / "campaign.json").read_text())
    rows = report["localization"]
    assert [r["variant"] for r in rows] == ["nominal", "noise3x"]
    assert [r["noise_scale"] for r in rows] == [1.0, 3.0]  # a noise sweep: plotted against it
    for r in rows:
        assert r["cells"] == 2 and len(r["per_seed"]) == 2
        lo, hi = r["ape_rmse_m"]["ci"]
        assert lo <= r["ape_rmse_m"]["mean"] <= hi
        ape = [c["ape_rmse_m"] for c in r["per_seed"]]
        assert r["ape_rmse_m"]["mean"] == pytest.approx(np.mean(ape))
    assert "## Localization over seeds" in (out / "campaign.md").read_text()
    assert (out / "plots" / "localization.png").stat().st_size > 5_000
    cell = out / "cells" / "reference-s1-noise3x-street"
    assert json.loads((cell / "localization" / "localization.json").read_text())["sweeps"] > 50


def test_localize_into_the_run_adds_a_section_to_its_report(street_run: Path) -> None:
    """Without --out the result lands in RUN/localization/ and the run's report shows it."""
    res = cli("localize", str(street_run))
    assert res.returncode == 0, res.stdout + res.stderr
    loc = json.loads((street_run / "localization" / "localization.json").read_text())
    report = json.loads((street_run / "report" / "report.json").read_text())
    assert report["localization"]["ape_rmse_m"] == loc["ape_rmse_m"]
    md = (street_run / "report" / "report.md").read_text()
    assert "## Localization" in md and "kiss-icp on /lidar/points" in md
    assert "Localization: kiss-icp" in (street_run / "report" / "report.html").read_text()
    again = cli("verify", str(street_run))  # a later verify keeps it
    assert (
        again.returncode in (0, 1)
        and "## Localization" in (street_run / "report" / "report.md").read_text()
    )


def test_localize_writes_only_into_its_own_files(street_run: Path, tmp_path: Path) -> None:
    """RUN/localization/ was written in place and through a symbolic link there; it is now
    drawn in RUN/.simconform/ and each file renamed in, and a link is refused."""
    run = tmp_path / "run"
    shutil.copytree(street_run, run, ignore=shutil.ignore_patterns("localization"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "localization").symlink_to(elsewhere)
    res = cli("localize", str(run))
    assert res.returncode == 2 and "localization as a symbolic link" in one_error_line(res.stderr)
    assert list(elsewhere.iterdir()) == []
    (run / "localization").unlink()
    assert cli("localize", str(run)).returncode == 0
    before = (run / "localization" / "localization.json").read_bytes()
    mine = tmp_path / "precious.md"
    mine.write_text("the user's")
    (run / "localization" / "localization.md").unlink()
    (run / "localization" / "localization.md").symlink_to(mine)
    res = cli("localize", str(run))
    assert res.returncode == 2 and "localization/localization.md is a symbolic link" in (
        one_error_line(res.stderr)
    )
    assert mine.read_text() == "the user's"
    assert (run / "localization" / "localization.json").read_bytes() == before
    assert not list((run / ".simconform").glob("building-*"))


def test_a_run_without_a_lidar_is_named_as_such() -> None:
    """localize and export of a camera-only run said `--sensor: got None`, as if an option
    were wrong; it is the run that has no lidar."""
    from simconform.downstream.localize import pick_lidar
    from simconform.errors import UserError
    from simconform.spec import Spec

    cam = {"type": "camera", "rate_hz": 10, "width": 8, "height": 6, "hfov_deg": 60.0}
    spec = Spec.model_validate({"name": "c", "sensors": {"front": cam}})
    with pytest.raises(UserError) as err:
        pick_lidar(spec, None, Path("run"))
    assert "sensors: got 'front'; expected a run with a lidar" in str(err.value)

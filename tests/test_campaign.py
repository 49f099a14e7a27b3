"""Campaigns: matrix expansion, the local pool and a real local Ray, resume, crashed workers,
the coverage of our own confidence intervals over 50 seeds, and campaign-file validation.

The crash cases use a backend registered at run time under the name "kill" whose open() kills
its own process with SIGKILL; campaigns ship backends to workers by registry entry, so the
workers import it from this module (spawned pool workers inherit sys.path, Ray workers get it
through PYTHONPATH).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import typer
import yaml
from scipy.stats import binom

from conftest import DEMO_TRAJECTORY, DEMO_WORLD, demo_spec, write_yaml
from simconform import campaign as cp
from simconform.adapters.reference import ReferenceBackend
from simconform.cli import app
from simconform.cli.campaign import campaign_command
from simconform.errors import UserError
from simconform.registry import BACKENDS

TESTS = Path(__file__).resolve().parent
KILL = "test_campaign:KillBackend"
SLOW = "test_campaign:SlowBackend"
LIDAR_METRICS = ("range_bias", "range_std", "range_rmse", "point_dropout")


def _campaign_dir(spec) -> Path:
    return Path(spec.source).parent.parent  # the spec a cell runs is DIR/specs/<variant>.yaml


class KillBackend(ReferenceBackend):
    """Dies like a segfaulting engine: the worker process is gone, no exception, no result.
    It leaves DIR/killed behind first, for SlowBackend."""

    name = "kill"

    def open(self, world, spec) -> None:
        (_campaign_dir(spec) / "killed").touch()
        os.kill(os.getpid(), signal.SIGKILL)


class SlowBackend(ReferenceBackend):
    """The reference backend, but its first batch waits (up to 20 s) until a KillBackend cell
    has died, unless one already did: mid-run when the pool breaks, it goes down with it, an
    innocent bystander whose retry then runs straight through."""

    name = "slow"

    def open(self, world, spec) -> None:
        super().open(world, spec)
        self._marker = _campaign_dir(spec) / "killed"
        self._wait = not self._marker.exists()

    def capture_batch(self, *args, **kwargs):
        if self._wait:
            self._wait = False
            deadline = time.monotonic() + 20
            while not self._marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # the pool notices the death and stops its other workers
        return super().capture_batch(*args, **kwargs)


def tiny_spec(path: Path) -> Path:
    """rover.yaml's lidar alone at 16 x 90, tolerances wide enough for 1 s runs to pass."""
    lidar = demo_spec()["sensors"]["lidar"]
    lidar.update(columns=90, rings={"count": 16, "fov_deg": [-15.0, 15.0]})
    lidar["tolerances"] = {"dropout_abs": 0.3}
    return write_yaml(path, {"name": "tiny", "sensors": {"lidar": lidar}})


def campaign_file(tmp: Path, **over) -> Path:
    tiny_spec(tmp / "tiny.yaml")
    data = {
        "name": "tiny",
        "spec": "tiny.yaml",
        "backends": ["reference"],
        "seeds": [1, 2],
        "variants": {"nominal": {}},
        "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}],
        "duration": 1.0,
    }
    data.update(over)
    return write_yaml(tmp / "campaign.yaml", data)


def stamps(out: Path) -> dict[str, int]:
    """mtime of every cell's run.json, bag and cell.json: unchanged means not run again."""
    files = [
        *out.glob("cells/*/run.json"),
        *out.glob("cells/*/bag/*"),
        *out.glob("cells/*/cell.json"),
    ]
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in files}


@pytest.fixture
def kill_backend(monkeypatch):
    monkeypatch.setitem(BACKENDS, "kill", KILL)
    monkeypatch.setitem(BACKENDS, "slow", SLOW)


def test_local_pool_report_cli_and_resume(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SIMCONFORM_PROGRESS_INTERVAL_S", "0")
    file = campaign_file(
        tmp_path,
        variants={
            "nominal": {},
            "sigma2x": {"noise_scale": 2.0, "sensors.lidar.dropout.point": 0.2},
        },
    )
    out = tmp_path / "out"
    args = ["campaign", str(file), "--out", str(out), "--jobs", "2"]
    assert app(args, standalone_mode=False) == 0
    # stderr is no terminal here: plain progress lines, as in a CI log
    assert "simconform: campaign 100 %" in capsys.readouterr().err

    report = json.loads((out / "campaign.json").read_text())
    ids = [c["id"] for c in report["cells"]]
    assert ids == [f"reference-s{s}-{v}-demo" for v in ("nominal", "sigma2x") for s in (1, 2)]
    assert report["verdict"] == "pass" and report["totals"]["pass"] == 4
    for cid in ids:  # each cell is an ordinary run folder plus cell.json
        d = out / "cells" / cid
        assert (d / "report" / "report.json").is_file() and (d / "bag").is_dir()
        run = json.loads((d / "run.json").read_text())
        assert run["complete"] and run["seed"] == int(cid.split("-s")[1].split("-")[0])
        meta = json.loads((d / "cell.json").read_text())
        assert meta["hash"] == next(c["hash"] for c in report["cells"] if c["id"] == cid)
    lidar = json.loads((out / "cells" / ids[2] / "run.json").read_text())["spec_content"]
    lidar = lidar["sensors"]["lidar"]
    assert lidar["noise"]["range"]["sigma"] == pytest.approx(0.04)
    assert lidar["dropout"]["point"] == 0.2
    assert report["cells"][0]["hash"] != report["cells"][2]["hash"]
    for name in ("campaign.md", "junit.xml", "plots/pass_rate.png", "plots/coverage.png"):
        assert (out / name).stat().st_size > 0
    assert {"plots/sweep_lidar.png", "plots/spread_lidar.png"} <= set(report["plots"])
    cases = ET.parse(out / "junit.xml").getroot().findall(".//testcase")
    n_metrics = len(
        json.loads((out / "cells" / ids[0] / "report" / "report.json").read_text())["sensors"][
            "lidar"
        ]["metrics"]
    )
    assert len(cases) == 4 * n_metrics

    before = stamps(out)
    again = cp.run_campaign(file, out, jobs=2)
    assert stamps(out) == before  # nothing ran again
    assert again["totals"]["resumed"] == 4

    (out / "cells" / ids[1] / "report" / "report.json").unlink()
    run_json = out / "cells" / ids[3] / "run.json"
    run_json.write_text(json.dumps({**json.loads(run_json.read_text()), "complete": False}))
    before = stamps(out)
    third = cp.run_campaign(file, out, jobs=2)
    after = stamps(out)
    changed = {k.split("/")[1] for k in before if before[k] != after[k]}
    assert changed == {ids[1], ids[3]}
    assert third["totals"]["resumed"] == 2 and third["verdict"] == "pass"


def test_killed_worker_is_retried_once_then_failed(tmp_path: Path, kill_backend) -> None:
    # two cells in flight together: the kill breaks the pool while the reference cell runs
    file = campaign_file(tmp_path, backends=["slow", "kill"], seeds=[1])
    with pytest.raises(typer.Exit) as exc:
        campaign_command(file, tmp_path / "out", 2, "local", None, False)
    assert exc.value.exit_code == 1
    report = json.loads((tmp_path / "out" / "campaign.json").read_text())
    ref, kill = report["cells"]
    assert kill["id"] == "kill-s1-nominal-demo"
    assert kill["status"] == "crashed" and kill["attempts"] == 2
    # the bystander was retried in its own process, over what its killed attempt left
    assert ref["id"] == "slow-s1-nominal-demo"
    assert ref["status"] == "pass" and ref["attempts"] == 2
    assert report["verdict"] == "fail" and report["totals"]["crashed"] == 1
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert junit.count('type="crashed"') == 1


def test_ray_executor_on_a_real_local_ray(tmp_path: Path, kill_backend, monkeypatch) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'simconform[ray]')")
    # Ray workers start from the raylet's environment: let them import KillBackend from here
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    file = campaign_file(tmp_path, backends=["reference", "kill"], seeds=[1])
    out = tmp_path / "ray"
    report = cp.run_campaign(file, out, jobs=2, executor="ray", address="local")
    import ray

    assert not ray.is_initialized()  # the executor started Ray (num_cpus=2) and shut it down
    ref, kill = report["cells"]
    assert ref["status"] == "pass" and ref["transfer"] == "shared" and ref["attempts"] == 1
    assert ref["worker"]["pid"] != os.getpid()
    assert kill["status"] == "crashed" and kill["attempts"] == 2  # WorkerCrashedError twice

    # A worker that cannot see the campaign folder (other token) runs in scratch space and
    # returns the run folder as a tar: the same bytes arrive as a shared-filesystem run made.
    plan = cp.load_campaign(file)
    other = tmp_path / "elsewhere"
    (other / "specs").mkdir(parents=True)
    (other / cp.TOKEN_FILE).write_text("someone-else\n")
    cell = next(c for c in plan.cells(other) if c.backend == "reference" and c.seed == 1)
    (Path(cell.spec)).write_text(plan.variants[0].text)
    res = cp.timed_cell(
        cell, "auto", "our-token", plan.variants[0].text, cp.scene_bundle(plan.scenes[0])
    )
    assert res["status"] == "ran" and res["transfer"] == "archive" and res["archive"]
    rec = cp.finish_cell(cell, res, 1)
    assert rec["status"] == "pass"
    got, ref = Path(cell.out) / "bag", out / "cells" / cell.id / "bag"
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in ref.iterdir())
    for p in ref.iterdir():
        assert (got / p.name).read_bytes() == p.read_bytes()
    assert cp.done_record(cell) is not None  # resumable like any cell


def test_ci_coverage_over_50_seeds_matches_the_nominal_level(tmp_path: Path) -> None:
    level = 0.95
    file = campaign_file(tmp_path, seeds={"start": 100, "count": 50}, confidence=level)
    report = cp.run_campaign(file, tmp_path / "out", jobs=2)
    assert report["totals"]["cells"] == 50
    rows = {r["metric"]: r for r in report["metrics"] if r["sensor"] == "lidar"}
    lo, hi = binom.ppf(0.5e-6, 50, level), binom.isf(0.5e-6, 50, level)
    for name in LIDAR_METRICS:
        cov = rows[name]["coverage"]
        assert cov["n"] == 50
        assert lo <= cov["covered"] <= hi, (name, cov)
        assert cov["status"] == "ok", (name, cov)
        assert cov["ci"][0] <= cov["rate"] <= cov["ci"][1]
    assert rows["latency_ms"]["coverage"]["status"] == "exact"  # zero-width CIs, exact
    # periodic stamps: the rate's CI is the stamp resolution (1 ns) wide and always covers
    assert rows["rate_hz"]["coverage"]["covered"] == 50
    assert rows["latency_max_ms"]["coverage"]["status"] == "n/a"
    # the per-seed values behind the check are the cells' own report values
    cell = json.loads(
        (
            tmp_path / "out" / "cells" / "reference-s100-nominal-demo" / "report" / "report.json"
        ).read_text()
    )
    first = rows["range_std"]["per_seed"][0]
    assert first["ci"] == cell["sensors"]["lidar"]["metrics"]["range_std"]["ci"]


BAD = [
    ({"bogus": 1}, "bogus", "unknown key"),
    ({"seeds": []}, "seeds", "at least 1"),
    ({"seeds": [1, 1]}, "seeds", "each seed once"),
    ({"seeds": [-1]}, "seeds.0", "greater than or equal"),
    ({"seeds": {"start": 0}}, "seeds", "count"),
    ({"seeds": {"start": 0, "count": 2, "step": 2}}, "seeds", "unknown key"),
    ({"backends": ["nope"]}, "backends.0", "expected one of"),
    ({"variants": {"bad-name": {}}}, "variants", "pattern"),
    ({"variants": {"v": {"sensors.lidar.noise.range.sgima": 0.1}}}, "variants.v.", "sigma"),
    ({"variants": {"v": {"sensors.lidar.noise.range.sigma": -1}}}, "variants.v", "greater"),
    ({"variants": {"v": {"noise_scale": 0}}}, "variants.v.noise_scale", "factor"),
    ({"variants": {"v": {"sensors.lidar.rings.fov_deg.5": 1}}}, "variants.v.", "index"),
    ({"duration": 1e6}, "duration", "spans only"),
    ({"duration": -1}, "duration", "greater than"),
    ({"duration": "10"}, "duration", "expected a number or one of 'auto', not a string"),
    ({"confidence": 0.2}, "confidence", "greater than or equal"),
    ({"interpolation": "cubic"}, "interpolation", "'spline' or 'linear'"),
    ({"worlds": [{"world": "missing.yaml", "trajectory": "t.tum"}]}, "worlds.0.world", "exist"),
    ({"worlds": [{"world": str(DEMO_WORLD)}]}, "worlds.0.trajectory", "it is required"),
    ({"spec": "nope.yaml"}, "spec", "existing file"),
]


@pytest.mark.parametrize(("over", "field", "allowed"), BAD, ids=[b[1] for b in BAD])
def test_campaign_file_errors_name_file_field_and_allowed(tmp_path, over, field, allowed) -> None:
    file = campaign_file(tmp_path, **over)
    with pytest.raises(UserError) as exc:
        cp.run_campaign(file, tmp_path / "out")
    err = exc.value
    assert err.file == str(file) and err.field.startswith(field), str(err)
    assert "constrained-" not in err.field and "literal[" not in err.field  # pydantic's, not ours
    assert allowed in err.allowed, str(err)
    assert not (tmp_path / "out").exists()  # nothing written


def test_flag_errors_and_missing_ray(tmp_path: Path, monkeypatch) -> None:
    file = campaign_file(tmp_path)
    for kwargs, field in (
        ({"jobs": 0}, "--jobs"),
        ({"executor": "slurm"}, "--executor"),
        ({"address": "auto"}, "--address"),
    ):
        with pytest.raises(UserError) as exc:
            cp.run_campaign(file, tmp_path / "out", **kwargs)
        assert exc.value.field == field
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a simconform campaign"):
        cp.run_campaign(file, tmp_path / "taken")
    if importlib.util.find_spec("ray") is not None:  # no cluster to join: nothing written
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        with pytest.raises(UserError, match="could not connect to Ray") as exc:
            cp.run_campaign(file, tmp_path / "out", executor="ray", address="auto")
        assert exc.value.field == "--address"
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(UserError, match=r"pip install 'simconform\[ray\]'"):
        cp.run_campaign(file, tmp_path / "out", executor="ray")
    assert not (tmp_path / "out").exists()


def test_interpolation_reaches_the_cells_and_their_hash(tmp_path: Path) -> None:
    """`interpolation` (default spline) is a run option like storage: every cell runs with it,
    records it in run.json, and a change of it runs the cell again (another hash)."""
    default = cp.load_campaign(campaign_file(tmp_path)).cells(tmp_path / "out")
    plan = cp.load_campaign(campaign_file(tmp_path, interpolation="linear", seeds=[1]))
    (cell,) = plan.cells(tmp_path / "out")
    assert default[0].interpolation == "spline" and cell.interpolation == "linear"
    assert cell.hash != default[0].hash
    cell_spec = Path(cell.spec)
    cell_spec.parent.mkdir(parents=True)
    cell_spec.write_text(plan.variants[0].text)
    assert cp.execute_cell(cell)["status"] == "ran"
    assert json.loads((Path(cell.out) / "run.json").read_text())["interpolation"] == "linear"


def test_example_campaign_is_valid() -> None:
    plan = cp.load_campaign(TESTS.parent / "campaigns" / "demo_seeds.yaml")
    cells = plan.cells(Path("/nonexistent/out"))
    assert len(cells) == 16 and cells[0].id == "reference-s1-nominal-demo"
    sigma = yaml.safe_load(plan.variants[1].text)["sensors"]["lidar"]["noise"]["range"]["sigma"]
    assert sigma == pytest.approx(2 * demo_spec()["sensors"]["lidar"]["noise"]["range"]["sigma"])


def test_duration_auto_plans_each_variant_and_world_as_run_does(tmp_path: Path) -> None:
    """`duration: auto` resolves, once at load, to `run --duration auto`'s length for each
    variant (a tighter tolerance needs a longer run); the cells and their hashes carry the
    resolved seconds, as if they had been written in the file."""
    from simconform.run import RunConfig, load_inputs
    from simconform.verify.runlength import auto_length, plan_inputs

    file = campaign_file(
        tmp_path,
        duration="auto",
        seeds=[1],
        variants={"nominal": {}, "tight": {"sensors.lidar.tolerances.sigma_rel": 0.03}},
    )
    plan = cp.load_campaign(file)
    cells = {c.variant: c for c in plan.cells(tmp_path / "out")}
    inp = load_inputs(
        RunConfig(world=DEMO_WORLD, spec=tmp_path / "tiny.yaml", trajectory=DEMO_TRAJECTORY)
    )
    span = (inp.end_ns - inp.start_ns) / 1e9
    expect = auto_length(plan_inputs(inp.spec, inp.world, inp.trajectory, 0.95, 0.8), span)
    assert cells["nominal"].duration == pytest.approx(expect.seconds, abs=1e-3)
    assert cells["tight"].duration > cells["nominal"].duration
    fixed = cp.load_campaign(campaign_file(tmp_path, seeds=[1], duration=cells["nominal"].duration))
    assert fixed.cells(tmp_path / "out")[0].hash == cells["nominal"].hash


def test_a_backend_not_installed_here_is_refused_before_any_cell(tmp_path: Path, monkeypatch):
    """A campaign naming gazebo on a machine without it ran every other cell, then ended FAIL
    (exit 1); `run --backend gazebo` refuses the same machine up front (exit 2)."""
    from simconform.adapters.gazebo import transport

    monkeypatch.setattr(transport, "missing_pieces", lambda: ["the `gz` executable"])
    camp = write_yaml(
        tmp_path / "c.yaml",
        {"backends": ["reference", "gazebo"], "seeds": [1], "duration": 1.0,
         "worlds": [{"world": str(DEMO_WORLD), "trajectory": str(DEMO_TRAJECTORY)}]},
    )  # fmt: skip
    out = tmp_path / "out"
    with pytest.raises(UserError) as err:
        cp.run_campaign(camp, out)
    msg = str(err.value)
    assert "backends.1: got 'gazebo'" in msg and "`gz` executable" in msg and "apt-get" in msg
    assert not out.exists()
    # replay runs come from `simconform replay`: its cell ended in `error`, the campaign FAILed
    camp = write_yaml(
        tmp_path / "r.yaml", {**yaml.safe_load(camp.read_text()), "backends": ["replay"]}
    )
    with pytest.raises(UserError, match=r"backends\.0: got 'replay'.*simconform replay"):
        cp.run_campaign(camp, out)
    assert not out.exists()

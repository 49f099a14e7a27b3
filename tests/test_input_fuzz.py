"""Generated bad inputs: the bundled spec, world, trajectory and replay map, mutated as a new
user (or a broken generator) would, must be refused with one message or accepted as valid --
never a traceback, a hang or a judged garbage value.

Two tiers: the loaders (fast, a few hundred examples) and the real command line in-process
(`simconform run` and `simconform replay`, fewer examples, each a real short run when the input
is accepted). `python3 -m tox -e fuzz` (or `SIMCONFORM_FUZZ_EXAMPLES=5000 pytest
tests/test_input_fuzz.py`) runs thousands.
"""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import DEMO_TRAJECTORY, demo_spec, demo_world
from simconform.adapters.replay.map import load_map
from simconform.errors import UserError
from simconform.fields import FRAME_PATTERN, RESERVED_TOPICS, TOPIC_PATTERN
from simconform.spec import Spec, load_spec
from simconform.trajectory import load_trajectory
from simconform.world import World, load_world

REPO = Path(__file__).resolve().parent.parent
OWN_MAP = REPO / "examples" / "replay" / "own_layout.yaml"
LOADER_EXAMPLES = int(os.environ.get("SIMCONFORM_FUZZ_EXAMPLES", "300"))
CLI_EXAMPLES = int(os.environ.get("SIMCONFORM_FUZZ_CLI_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=LOADER_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

BAD_VALUES = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        1e300,
        -1e300,
        1e-300,
        0,
        -1,
        2**63,
        "",
        " ",
        "a b",
        "/tf",
        "/truth/x",
        "base_link",
        "map",
        None,
        True,
        [],
        {},
        [1, 2],
        {"unknown": 1},
        "1e400",
        "ñ\x00",
    ]
)


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a value (mappings and lists), containers included."""
    out = [path] if path else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _leaves(v, (*path, i))
    return out


@st.composite
def mutated(draw, base: dict) -> dict:
    """`base` with one to three edits: a value replaced, a key removed or an unknown key added."""
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _leaves(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for p in path[:-1]:
            parent = parent[p]
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = copy.deepcopy(draw(BAD_VALUES))  # never share a drawn [] or {}
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "sigma ", "Sigma"]))] = 1.0
    return data


def _finite_everywhere(node: Any) -> bool:
    if isinstance(node, float):
        return math.isfinite(node)
    if isinstance(node, dict):
        return all(_finite_everywhere(v) for v in node.values())
    if isinstance(node, list | tuple):
        return all(_finite_everywhere(v) for v in node)
    return True


def _load_or_refuse(load, path: Path):
    """The loader's result, or None for a UserError; any other exception fails the test."""
    try:
        return load(path)
    except UserError as exc:
        text = str(exc)
        assert "\n" not in text.strip() and len(text) < 2000, text
        assert str(path) in text, text  # the message names the file
        return None


@FUZZ
@given(data=mutated(demo_spec()))
def test_mutated_specs_are_refused_or_valid(tmp_path_factory, data) -> None:
    path = tmp_path_factory.mktemp("spec") / "spec.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    spec = _load_or_refuse(load_spec, path)
    event("accepted" if spec is not None else "refused")
    if spec is not None:
        dumped = spec.model_dump(mode="python")
        assert _finite_everywhere(dumped)
        assert Spec.model_validate(spec.model_dump()).model_dump() == spec.model_dump()
        _names_are_sound(spec)


def _names_are_sound(spec: Spec) -> None:
    """What an accepted spec promises the bag: ROS 2 names, each topic written by one sensor
    and none of the bag's own or truth's; one frame per sensor, none in the trajectory's tree."""
    topics: list[str] = []
    frames = ["map", "odom", spec.base_frame, f"truth/{spec.base_frame}"]
    for name in spec.sensors:
        assert re.fullmatch(TOPIC_PATTERN, spec.topic(name))
        assert not spec.topic(name).startswith("/truth")
        topics += spec.all_topics(name)
        frames.append(spec.frame(name))
        assert re.fullmatch(FRAME_PATTERN, spec.frame(name))
        assert not spec.frame(name).startswith("truth/")
    assert len(set(topics)) == len(topics) and not set(topics) & set(RESERVED_TOPICS)
    assert len(set(frames)) == len(frames)


@FUZZ
@given(data=mutated(demo_world()))
def test_mutated_worlds_are_refused_or_valid(tmp_path_factory, data) -> None:
    path = tmp_path_factory.mktemp("world") / "world.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    world = _load_or_refuse(load_world, path)
    if world is not None:
        assert _finite_everywhere(world.model_dump(mode="python"))
        assert World.model_validate(world.model_dump()).model_dump() == world.model_dump()


@FUZZ
@given(data=mutated(yaml.safe_load(OWN_MAP.read_text())))
def test_mutated_replay_maps_are_refused_or_valid(tmp_path_factory, data) -> None:
    folder = tmp_path_factory.mktemp("map")
    for key in ("spec", "world"):  # keep the map's relative paths pointing at the bundled files
        if isinstance(data.get(key), str) and data[key].startswith("../../"):
            data[key] = str((OWN_MAP.parent / data[key]).resolve())
    path = folder / "map.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    m = _load_or_refuse(load_map, path)
    if m is not None:
        assert _finite_everywhere(m.model_dump(mode="python"))


# vertex coordinates: small integers (a triangle's area is 0 or >= 0.5, never lost to merging)
# and the non-finite values a broken exporter writes
COORD = st.sampled_from(["0", "1", "2", "-1", "nan", "inf", "-inf"]) | st.integers(-3, 3).map(str)


@st.composite
def obj_mesh(draw) -> tuple[str, bool]:
    """An OBJ file, and whether it must be accepted: every vertex of every face finite and at
    least one face of non-zero area (computed here, independently of the loader)."""
    n = draw(st.integers(3, 8))
    verts = [[draw(COORD) for _ in range(3)] for _ in range(n)]
    faces = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=3, max_size=3), max_size=6))
    v = np.array([[float(c) for c in row] for row in verts])
    finite = all(np.isfinite(v[f]).all() for f in faces)
    areas = (
        [np.linalg.norm(np.cross(v[b] - v[a], v[c] - v[a])) for a, b, c in faces] if finite else []
    )
    ok = bool(faces) and finite and any(x > 0 for x in areas)
    text = "".join(f"v {' '.join(r)}\n" for r in verts)
    text += "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in faces)
    return text, ok


@FUZZ
@given(mesh=obj_mesh())
def test_meshes_with_non_finite_or_only_degenerate_triangles_are_refused(
    tmp_path_factory, mesh
) -> None:
    """Issue 15: a mesh whose triangles all had zero area was silently invisible, and trimesh
    silently drops a face with a NaN vertex; the world is refused instead, naming the file."""
    text, ok = mesh
    folder = tmp_path_factory.mktemp("mesh")
    (folder / "m.obj").write_text(text)
    data = demo_world()
    data["objects"] = [o for o in data["objects"] if o["type"] != "mesh"]
    data["objects"].append({"type": "mesh", "name": "m", "file": "m.obj", "position": [0, 0, 1]})
    path = folder / "world.yaml"
    path.write_text(yaml.safe_dump(data))
    world = _load_or_refuse(load_world, path)
    event("accepted" if world is not None else "refused")
    assert (world is not None) == ok, text
    if world is not None:
        tri = world.mesh_triangles(len(data["objects"]) - 1)
        assert np.isfinite(tri).all()
        assert (
            np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1).max() > 0
        )


TUM_LINES = DEMO_TRAJECTORY.read_text().splitlines()
BAD_FIELDS = st.sampled_from(
    ["nan", "inf", "-inf", "-1", "1e30", "1e400", "x", "", "0x10", "1e-320", "9" * 40]
)


@st.composite
def mutated_tum(draw) -> str:
    lines = [ln for ln in TUM_LINES[:60] if ln.strip() and not ln.startswith("#")]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        parts = lines[i].split()
        action = draw(st.sampled_from(["field", "field", "drop", "dup", "swap", "columns"]))
        if action == "field":
            parts[draw(st.integers(0, len(parts) - 1))] = draw(BAD_FIELDS)
            lines[i] = " ".join(parts)
        elif action == "drop":
            lines[i] = " ".join(parts[:-1])
        elif action == "dup":
            lines.insert(i, lines[i])
        elif action == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        elif action == "columns":
            lines[i] = " ".join([*parts, "0"])
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=mutated_tum())
def test_mutated_trajectories_are_refused_or_valid(tmp_path_factory, text) -> None:
    path = tmp_path_factory.mktemp("traj") / "t.tum"
    path.write_text(text)
    world = load_world(REPO / "worlds" / "demo.yaml")
    traj = _load_or_refuse(lambda p: load_trajectory(p, world), path)
    if traj is not None:
        assert np.all(np.diff(traj.times_ns) > 0) and traj.start_ns >= 0
        assert np.all(np.isfinite(traj.positions))


RAW = st.sampled_from(
    [
        b"\xff\xfe not utf-8\n",
        b"name: a\nname: b\n",
        b"a: " + b"[" * 500 + b"]" * 500 + b"\n",
        b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + b"".join(
            b"%c: &%c [" % (c, c) + b", ".join([b"*%c" % (c - 1)] * 10) + b"]\n"
            for c in range(ord("b"), ord("j"))
        ),
        b"\x00\x01\x02",
        b"- just\n- a list\n",
        b"key: [unclosed\n",
        b"",
    ]
)


@settings(max_examples=40, deadline=None)
@given(raw=RAW, loader=st.sampled_from([load_spec, load_world, load_map]))
def test_malformed_yaml_files_are_refused_with_the_file_named(tmp_path_factory, raw, loader):
    path = tmp_path_factory.mktemp("raw") / "in.yaml"
    path.write_bytes(raw)
    assert _load_or_refuse(loader, path) is None


# --------------------------------------------------------------- the real command line


def _main(args: list[str], capsys) -> tuple[int, str]:
    from simconform.cli import main

    with pytest.raises(SystemExit) as exc:
        main_args = ["simconform", *args]
        import sys

        old = sys.argv
        sys.argv = main_args
        try:
            main()
        finally:
            sys.argv = old
    captured = capsys.readouterr()
    return int(exc.value.code or 0), captured.err


CLI = settings(
    max_examples=CLI_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@CLI
@given(spec=mutated(demo_spec()), world=st.none() | mutated(demo_world()))
def test_run_with_mutated_inputs_exits_0_1_or_2_and_writes_nothing_on_2(
    tmp_path_factory, capsys, spec, world
) -> None:
    folder = tmp_path_factory.mktemp("cli")
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    args = ["run", "--spec", str(folder / "spec.yaml"), "--duration", "0.3", "--jobs", "0"]
    if world is not None:
        (folder / "world.yaml").write_text(yaml.safe_dump(world, allow_unicode=True))
        args += ["--world", str(folder / "world.yaml")]
    out = folder / "out"
    code, err = _main([*args, "--out", str(out), "--no-progress"], capsys)
    event(f"exit {code}")
    assert code in (0, 1, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("simconform: error: "), err
        assert not out.exists(), "a refused run wrote its folder"
    else:
        load_spec(folder / "spec.yaml")  # only inputs the models accept get this far
        assert (out / "run.json").is_file()

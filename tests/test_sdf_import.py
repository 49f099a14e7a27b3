"""`simconform import-sdf`: SDF world -> world YAML, with both parsers (sdformat14 where Gazebo's
Python bindings import, else skipped; the xml.etree fallback always).

Round trip demo -> export-sdf -> import-sdf, hand-computed nested poses, a hypothesis check of
pose composition against 4x4 matrices, meshes with <scale> (relative, file://, model://), the
skipped summary, bad inputs (exit 2, nothing written), and a short run on the imported world.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from conftest import cli
from simconform.adapters.gazebo import sdf, sdf_import
from simconform.demo import DEMO_SPEC, DEMO_WORLD
from simconform.errors import UserError
from simconform.spec import load_spec
from simconform.world import Box, Cylinder, Mesh, Plane, Sphere, World, load_world

WORLD = load_world(DEMO_WORLD)
SPEC = load_spec(DEMO_SPEC)
HAS_SDFORMAT = sdf_import.sdformat_available()
PARSERS = [
    "xml",
    pytest.param(
        "sdformat",
        marks=pytest.mark.gazebo,  # skipped without Gazebo, a failure in CI (tests/conftest.py)
    ),
]
TOL = 1e-9


@pytest.mark.gazebo
def test_gazebo_installs_have_sdformat() -> None:
    """Where Gazebo is installed (and in CI) the sdformat parser is tested, not skipped."""
    assert HAS_SDFORMAT


TETRA = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"


def _rot(rpy) -> np.ndarray:
    return Rotation.from_euler("xyz", rpy).as_matrix()


def _sorted_tri(tri: np.ndarray) -> np.ndarray:
    rows = np.round(tri.reshape(len(tri), 9), 9)
    return rows[np.lexsort(rows.T[::-1])]


def assert_same_world(a: World, b: World) -> None:
    """b (imported) equals a (original) within TOL: geometry, pose, colour, reflectivity,
    origin, sky, light. Angles as rotation matrices (yaw 4.5 imports as 4.5 - 2 pi)."""
    assert b.name == a.name
    for f in ("lat", "lon", "alt"):
        assert getattr(b.origin, f) == pytest.approx(getattr(a.origin, f), abs=TOL)
    np.testing.assert_allclose(b.sky_color, a.sky_color, atol=TOL)
    da, db = (np.asarray(w.light.direction) for w in (a, b))
    np.testing.assert_allclose(db / np.linalg.norm(db), da / np.linalg.norm(da), atol=TOL)
    assert b.light.ambient == pytest.approx(a.light.ambient, abs=TOL)
    assert b.light.diffuse == pytest.approx(a.light.diffuse, abs=TOL)
    assert len(b.objects) == len(a.objects)
    for i, (oa, ob) in enumerate(zip(a.objects, b.objects)):
        assert (ob.type, ob.name) == (oa.type, oa.name), i
        np.testing.assert_allclose(ob.color, oa.color, atol=TOL, err_msg=oa.name)
        assert ob.reflectivity == pytest.approx(oa.reflectivity, abs=TOL), oa.name
        if isinstance(oa, Plane):
            np.testing.assert_allclose(ob.point, oa.point, atol=TOL)
            np.testing.assert_allclose(ob.normal, oa.normal, atol=TOL)
        elif isinstance(oa, Box | Cylinder | Sphere):
            np.testing.assert_allclose(ob.center, oa.center, atol=TOL, err_msg=oa.name)
        if isinstance(oa, Box):
            np.testing.assert_allclose(ob.size, oa.size, atol=TOL)
        if isinstance(oa, Cylinder | Sphere):
            assert ob.radius == pytest.approx(oa.radius, abs=TOL)
        if isinstance(oa, Cylinder):
            assert ob.length == pytest.approx(oa.length, abs=TOL)
        if isinstance(oa, Box | Cylinder):
            np.testing.assert_allclose(_rot(ob.rpy), _rot(oa.rpy), atol=TOL, err_msg=oa.name)
        if isinstance(oa, Mesh):
            ta, tb = _sorted_tri(a.mesh_triangles(i)), _sorted_tri(b.mesh_triangles(i))
            np.testing.assert_allclose(tb, ta, atol=TOL)


def world_sdf(body: str, extra: str = "") -> str:
    head = '<?xml version="1.0"?>\n<sdf version="1.10">\n<world name="hand">'
    return f"{head}\n{extra}\n{body}\n</world>\n</sdf>\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def do_import(src: Path, out: Path, parser: str) -> tuple[World, list[str]]:
    skipped = sdf_import.write_world(src, out, parser=parser)
    return load_world(out), skipped


# ------------------------------------------------------------------ round trip


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    return sdf.write_sdf(WORLD, SPEC, tmp_path_factory.mktemp("export"))


@pytest.mark.parametrize("parser", PARSERS)
def test_demo_round_trip(exported, tmp_path, parser) -> None:
    world, skipped = do_import(exported, tmp_path / "demo.yaml", parser)
    assert skipped == []  # the vehicle is the exporter's own: silently left out
    assert_same_world(WORLD, world)
    assert (tmp_path / "demo_meshes" / "rock.obj").is_file()


def test_demo_round_trip_through_the_cli(tmp_path) -> None:
    r = cli("export-sdf", "--out", str(tmp_path / "gz"))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "w" / "demo.yaml"
    r = cli("import-sdf", str(tmp_path / "gz" / "demo.sdf"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "27 objects" in r.stdout and "skipped: 0" in r.stdout
    assert_same_world(WORLD, load_world(out))
    again = cli("import-sdf", str(tmp_path / "gz" / "demo.sdf"), "--out", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "--force" in again.stderr
    forced = cli("import-sdf", str(tmp_path / "gz" / "demo.sdf"), "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    # --force replaces an earlier import only, never a world the user wrote
    mine = tmp_path / "w" / "mine.yaml"
    mine.write_text("name: mine\n")
    r = cli("import-sdf", str(tmp_path / "gz" / "demo.sdf"), "--out", str(mine), "--force")
    assert r.returncode == 2 and "not written by `simconform import-sdf`" in r.stderr, r.stderr
    assert mine.read_text() == "name: mine\n" and not (tmp_path / "w" / "mine_meshes").exists()


@pytest.mark.slow
def test_imported_world_runs(exported, tmp_path) -> None:
    out = tmp_path / "imported.yaml"
    sdf_import.write_world(exported, out)
    r = cli("run", "--world", str(out), "--duration", "1", "--out", str(tmp_path / "run"),
            "--jobs", "0", "--no-progress")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr  # 1 s is too short for every verdict to pass
    assert (tmp_path / "run" / "report" / "report.md").is_file()


# ------------------------------------------------------------------ poses

NESTED = """
<model name="outer">
  <static>true</static>
  <pose>10 0 0 0 0 1.5707963267948966</pose>
  <link name="l">
    <pose relative_to="__model__">1 0 0 0 0 0</pose>
    <visual name="v">
      <pose degrees="true" relative_to="l">0 2 0.5 0 0 90</pose>
      <geometry><box><size>1 2 3</size></box></geometry>
    </visual>
  </link>
  <model name="inner">
    <pose>0 0 1 0 0 0</pose>
    <link name="il">
      <pose>0 0 0 1.5707963267948966 0 0</pose>
      <visual name="iv">
        <pose>0 0 1 0 0 0</pose>
        <geometry><cylinder><radius>0.5</radius><length>2</length></cylinder></geometry>
      </visual>
    </link>
  </model>
</model>
"""


@pytest.mark.parametrize("parser", PARSERS)
def test_nested_poses_by_hand(tmp_path, parser) -> None:
    src = write(tmp_path / "n.sdf", world_sdf(NESTED))
    world, _ = do_import(src, tmp_path / "n.yaml", parser)
    box, cyl = world.objects
    assert (box.name, cyl.name) == ("outer", "outer::inner")  # one visual each
    # model yaw 90: link (1,0,0) -> (10,1,0); visual (0,2,0.5) in the link -> (-2,0,0.5) more
    np.testing.assert_allclose(box.center, (8, 1, 0.5), atol=TOL)
    np.testing.assert_allclose(_rot(box.rpy), _rot((0, 0, math.pi)), atol=TOL)
    # inner at (10,0,1); link rolled 90 deg: the visual's +z (0,0,1) becomes (0,-1,0) in the
    # inner frame, then yaw 90 -> (1,0,0) in the world; the cylinder axis is the world x
    np.testing.assert_allclose(cyl.center, (11, 0, 1), atol=TOL)
    np.testing.assert_allclose(_rot(cyl.rpy) @ (0, 0, 1), (1, 0, 0), atol=TOL)


REL = """
<frame name="corner"><pose>5 5 0 0 0 1.5707963267948966</pose></frame>
<model name="m">
  <static>true</static>
  <pose relative_to="corner">1 0 0 0 0 0</pose>
  <frame name="top"><pose>0 0 2 0 0 0</pose></frame>
  <link name="l">
    <visual name="v">
      <pose relative_to="top">0 1 0 0 0 0</pose>
      <geometry><sphere><radius>0.5</radius></sphere></geometry>
    </visual>
  </link>
</model>
"""


@pytest.mark.gazebo
def test_relative_to_with_sdformat(tmp_path) -> None:
    src = write(tmp_path / "r.sdf", world_sdf(REL))
    world, _ = do_import(src, tmp_path / "r.yaml", "sdformat")
    # model at corner + yaw90*(1,0,0) = (5,6,0); visual at top (z 2) + yaw90*(0,1,0) = (-1,0,0)
    np.testing.assert_allclose(world.objects[0].center, (4, 6, 2), atol=TOL)


DEEP = """
<model name="a"><static>true</static><pose>1 2 3 0.1 0.2 0.3</pose>
 <link name="la"><pose>0.5 0 0 0 0 0.4</pose><visual name="va"><pose>0 0.3 0 0.2 0 0</pose>
  <geometry><box><size>1 1 1</size></box></geometry></visual></link>
 <model name="b"><pose>0 1 0 0 0.5 0</pose>
  <model name="c"><pose degrees="true">2 0 0 30 0 0</pose>
   <link name="lc"><pose>0 0 1 0 0 1</pose>
    <visual name="vc"><pose>1 1 1 0.3 0.2 0.1</pose>
     <geometry><cylinder><radius>1</radius><length>1</length></cylinder></geometry></visual>
    <visual name="vc2"><geometry><sphere><radius>1</radius></sphere></geometry></visual>
   </link>
  </model>
 </model>
</model>
"""


@pytest.mark.gazebo
def test_parsers_agree_on_three_levels_of_nesting(tmp_path) -> None:
    src = write(tmp_path / "d.sdf", world_sdf(DEEP))
    a, _, _ = sdf_import.import_sdf(src, tmp_path / "d.yaml", "xml")
    b, _, _ = sdf_import.import_sdf(src, tmp_path / "d.yaml", "sdformat")
    assert [o["name"] for o in a["objects"]] == ["a", "a::b::c::lc::vc", "a::b::c::lc::vc2"]
    assert a == b
    want = (  # by matrices: a * b * c * lc * vc2 (its own pose: identity)
        _matrix((1, 2, 3, 0.1, 0.2, 0.3))
        @ _matrix((0, 1, 0, 0, 0.5, 0))
        @ _matrix((2, 0, 0, math.radians(30), 0, 0))
        @ _matrix((0, 0, 1, 0, 0, 1))
    )
    np.testing.assert_allclose(a["objects"][2]["center"], want[:3, 3], atol=TOL)


def test_relative_to_without_sdformat_is_refused(tmp_path) -> None:
    src = write(tmp_path / "r.sdf", world_sdf(REL))
    with pytest.raises(UserError, match="relative_to needs sdformat14"):
        sdf_import.write_world(src, tmp_path / "r.yaml", parser="xml")
    assert not (tmp_path / "r.yaml").exists()


def test_include_with_sdformat_and_reported_without(tmp_path, monkeypatch) -> None:
    model = (
        '<?xml version="1.0"?><sdf version="1.10"><model name="crate"><static>true</static>'
        '<link name="l"><pose>0 0 0.5 0 0 0</pose><visual name="v"><geometry><mesh>'
        "<uri>meshes/tetra.obj</uri><scale>2 2 2</scale></mesh></geometry></visual></link>"
        "</model></sdf>"
    )
    config = (
        '<?xml version="1.0"?><model><name>crate</name><sdf version="1.10">model.sdf</sdf></model>'
    )
    write(tmp_path / "res" / "crate" / "meshes" / "tetra.obj", TETRA)
    write(tmp_path / "res" / "crate" / "model.sdf", model)
    write(tmp_path / "res" / "crate" / "model.config", config)
    monkeypatch.setenv("GZ_SIM_RESOURCE_PATH", str(tmp_path / "res"))
    body = (
        "<include><uri>model://crate</uri><name>c1</name><pose>1 2 3 0 0 0</pose></include>"
        '<model name="b"><static>true</static><link name="l"><visual name="v"><geometry>'
        "<sphere><radius>1</radius></sphere></geometry></visual></link></model>"
    )
    src = write(tmp_path / "w" / "i.sdf", world_sdf(body))
    world, skipped = do_import(src, tmp_path / "x.yaml", "xml")
    assert [o.name for o in world.objects] == ["b"]
    assert any("include model://crate" in s and "sdformat14" in s for s in skipped)
    if not HAS_SDFORMAT:
        pytest.skip("sdformat14 (Gazebo) not importable")
    world, _ = do_import(src, tmp_path / "s.yaml", "sdformat")
    assert [o.name for o in world.objects] == ["c1", "b"]
    tri = world.mesh_triangles(0).reshape(-1, 3)  # tetra x2, lifted 0.5 by the link, at 1 2 3
    np.testing.assert_allclose(tri.min(axis=0), (1, 2, 3.5), atol=TOL)
    np.testing.assert_allclose(tri.max(axis=0), (3, 4, 5.5), atol=TOL)


def test_light_sky_and_origin(tmp_path) -> None:
    extra = (
        "<scene><ambient>0.2 0.4 0.6 1</ambient><background>0.1 0.2 0.3 1</background></scene>"
        '<light type="point" name="lamp"><diffuse>1 1 1 1</diffuse></light>'
        '<light type="directional" name="sun"><pose>0 0 10 0 0 1.5707963267948966</pose>'
        "<direction>1 0 0</direction><diffuse>0.5 0.5 0.5 1</diffuse><intensity>1.2</intensity>"
        "</light><spherical_coordinates><latitude_deg>-33.5</latitude_deg>"
        "<longitude_deg>151.25</longitude_deg><elevation>12.5</elevation></spherical_coordinates>"
    )
    body = (
        '<model name="b"><static>1</static><link name="l"><visual name="v"><geometry>'
        "<sphere><radius>1</radius></sphere></geometry></visual></link></model>"
    )
    world, skipped = do_import(
        write(tmp_path / "l.sdf", world_sdf(body, extra)), tmp_path / "l.yaml", "xml"
    )
    assert skipped == []
    assert (world.origin.lat, world.origin.lon, world.origin.alt) == (-33.5, 151.25, 12.5)
    assert world.sky_color == (0.1, 0.2, 0.3)
    np.testing.assert_allclose(world.light.direction, (0, 1, 0), atol=TOL)  # turned by yaw 90
    assert world.light.diffuse == pytest.approx(0.6) and world.light.ambient == pytest.approx(0.4)


def _matrix(x) -> np.ndarray:
    """4x4 of an SDF pose, written out: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    r, p, y = x[3:]
    cr, sr, cp, sp = math.cos(r), math.sin(r), math.cos(p), math.sin(p)
    cy, sy = math.cos(y), math.sin(y)
    m = np.eye(4)
    m[:3, :3] = [
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ]
    m[:3, 3] = x[:3]
    return m


POSE = st.tuples(
    *[st.floats(-50, 50, allow_subnormal=False)] * 3,
    *[st.floats(-math.pi, math.pi, allow_subnormal=False)] * 3,
)


@settings(max_examples=25, deadline=None)
@given(model=POSE, link=POSE, visual=POSE)
def test_pose_composition_matches_matrices(tmp_path_factory, model, link, visual) -> None:
    tmp = tmp_path_factory.mktemp("hyp")
    fmt = lambda x: " ".join(repr(float(v)) for v in x)  # noqa: E731
    body = f"""<model name="m"><static>true</static><pose>{fmt(model)}</pose>
      <link name="l"><pose>{fmt(link)}</pose><visual name="v"><pose>{fmt(visual)}</pose>
      <geometry><box><size>1 2 3</size></box></geometry></visual></link></model>"""
    src = write(tmp / "h.sdf", world_sdf(body))
    want = _matrix(model) @ _matrix(link) @ _matrix(visual)
    for parser in ["xml"] + (["sdformat"] if HAS_SDFORMAT else []):
        data, _, _ = sdf_import.import_sdf(src, tmp / "h.yaml", parser)
        box = World.model_validate(data).objects[0]
        np.testing.assert_allclose(box.center, want[:3, 3], atol=1e-9)
        np.testing.assert_allclose(_rot(box.rpy), want[:3, :3], atol=1e-9)


# ------------------------------------------------------------------ meshes


@pytest.mark.parametrize("parser", PARSERS)
def test_mesh_scale_pose_and_uris(tmp_path, parser, monkeypatch) -> None:
    write(tmp_path / "src" / "meshes" / "tetra.obj", TETRA)
    write(tmp_path / "res" / "thing" / "meshes" / "tetra.obj", TETRA)
    monkeypatch.setenv("GZ_SIM_RESOURCE_PATH", str(tmp_path / "res"))
    uris = ["meshes/tetra.obj", f"file://{tmp_path}/src/meshes/tetra.obj",
            "model://thing/meshes/tetra.obj"]  # fmt: skip
    body = "".join(
        f"""<model name="m{i}"><static>true</static><pose>1 2 3 0 0 1.5707963267948966</pose>
        <link name="l"><visual name="v"><geometry><mesh><uri>{u}</uri><scale>2 3 4</scale>
        </mesh></geometry><material><diffuse>0.1 0.2 0.3 1</diffuse></material>
        <laser_retro>0.8</laser_retro></visual></link></model>"""
        for i, u in enumerate(uris)
    )
    src = write(tmp_path / "src" / "m.sdf", world_sdf(body))
    world, _ = do_import(src, tmp_path / "out" / "m.yaml", parser)
    verts = np.array([[0, 0, 0], [2, 0, 0], [0, 3, 0], [0, 0, 4]], float)  # scaled
    want = verts @ _rot((0, 0, math.pi / 2)).T + (1, 2, 3)  # yaw 90, then moved
    for i, obj in enumerate(world.objects):
        assert obj.type == "mesh" and obj.file == f"m_meshes/m{i}.obj"
        assert obj.color == (0.1, 0.2, 0.3) and obj.reflectivity == 0.8
        got = np.unique(world.mesh_triangles(i).reshape(-1, 3).round(9), axis=0)
        np.testing.assert_allclose(got, np.unique(want.round(9), axis=0), atol=TOL)


# ------------------------------------------------------------------ skipped, planes, colours

SKIPPY = """
<model name="terrain"><static>true</static><link name="l">
  <visual name="hm"><geometry><heightmap><uri>h.png</uri></heightmap></geometry></visual>
  <visual name="cap"><geometry><capsule><radius>1</radius><length>2</length></capsule></geometry>
  </visual>
  <visual name="ell"><geometry><ellipsoid><radii>1 2 3</radii></ellipsoid></geometry></visual>
  <visual name="poly"><geometry><polyline><point>0 0</point><point>1 0</point><point>0 1</point>
    <height>1</height></polyline></geometry></visual>
  <visual name="pad"><pose>0 0 0.2 0 0 0</pose>
    <geometry><plane><normal>0 0 1</normal><size>4 2</size></plane></geometry>
    <material><ambient>0 0.5 0 1</ambient></material></visual>
</link></model>
<model name="floor"><static>true</static><link name="l"><visual name="v">
  <geometry><plane><normal>0 0 1</normal><size>500 500</size></plane></geometry></visual>
</link></model>
<model name="cart"><link name="l"><visual name="v">
  <geometry><box><size>1 1 1</size></box></geometry></visual></link></model>
<model name="wall"><static>true</static><link name="l"><collision name="c">
  <geometry><box><size>1 1 1</size></box></geometry></collision></link></model>
"""


@pytest.mark.parametrize("parser", PARSERS)
def test_skipped_items_are_reported(tmp_path, parser) -> None:
    src = write(tmp_path / "s.sdf", world_sdf(SKIPPY))
    out = tmp_path / "s.yaml"
    world, skipped = do_import(src, out, parser)
    text = "\n".join(skipped)
    for item in ("terrain::l::hm", "terrain::l::cap", "terrain::l::ell",
                 "terrain::l::poly", "model cart: not "
                 "static", "link wall::l: collision only", "spherical_coordinates"):  # fmt: skip
        assert item in text, (item, text)
    assert len(skipped) == 7
    header = out.read_text().split("\nname:")[0]
    assert "# skipped (7):" in header and "terrain::l::cap" in header
    pad, floor = world.objects
    assert (pad.type, pad.name, floor.type) == ("box", "terrain", "plane")
    np.testing.assert_allclose(pad.size, (4, 2, sdf_import.PLANE_THICKNESS_M))
    assert pad.center[2] + pad.size[2] / 2 == pytest.approx(0.2)  # top face = the plane
    assert pad.color == (0.0, 0.5, 0.0)  # no diffuse: ambient
    assert floor.color == sdf_import.GREY and floor.reflectivity == 0.5  # defaults
    assert (world.origin.lat, world.origin.lon) == (0.0, 0.0)


def test_skipped_summary_on_the_cli(tmp_path, monkeypatch, capsys) -> None:
    src = write(tmp_path / "s.sdf", world_sdf(SKIPPY))
    args = ("import-sdf", str(src), "--out", str(tmp_path / "s.yaml"))
    code, out, err = main_in_process(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "skipped: 7" in out and "model cart: not static" in out


QUIRKS = """
<!-- tinyxml2 (Gazebo) accepts this comment, expat does not: use it with --gui-config -->
<model name="b"><static>true</static><link name="l">
  <sensor name="s" type="custom" gz:type="my_sensor"><always_on>1</always_on></sensor>
  <visual name="v"><geometry><box><size>1 1 1</size></box></geometry></visual></link>
  <experimental:params><x>1</x></experimental:params>
</model>
"""


@pytest.mark.parametrize("parser", PARSERS)
def test_what_gazebo_accepts_and_expat_does_not(tmp_path, parser) -> None:
    src = write(tmp_path / "q.sdf", world_sdf(QUIRKS))
    world, _ = do_import(src, tmp_path / "q.yaml", parser)
    assert [o.name for o in world.objects] == ["b"]


def test_multiline_include_uri_stays_one_summary_line(tmp_path) -> None:
    body = "<include>\n  <uri>\n    model://crate\n  </uri>\n</include>" + QUIRKS
    src = write(tmp_path / "m.sdf", world_sdf(body))
    _, skipped = do_import(src, tmp_path / "m.yaml", "xml")
    assert "include model://crate: needs sdformat14 (Gazebo)" in skipped
    assert "#   - include model://crate: needs" in (tmp_path / "m.yaml").read_text()


# ------------------------------------------------------------------ bad input

GOOD_BOX = '<model name="b"><static>true</static><link name="l"><visual name="v"><geometry>'
BAD = {
    "not_xml": "this is not xml <",
    "not_sdf": '<?xml version="1.0"?><urdf><world name="w"/></urdf>',
    "no_world": '<sdf version="1.10"><model name="m"><link name="l"/></model></sdf>',
    "missing_mesh": world_sdf(
        GOOD_BOX + "<mesh><uri>nope.obj</uri></mesh></geometry></visual></link></model>"
    ),
    "fuel_mesh": world_sdf(
        GOOD_BOX + "<mesh><uri>https://fuel.gazebosim.org/1.0/x/models/y/z.dae</uri></mesh>"
        "</geometry></visual></link></model>"
    ),
    "not_wgs84": world_sdf(
        GOOD_BOX + "<box><size>1 1 1</size></box></geometry></visual></link></model>",
        "<spherical_coordinates><surface_model>MOON_SCS</surface_model></spherical_coordinates>",
    ),
    "nothing_static": world_sdf('<model name="m"><link name="l"/></model>'),
    "bad_pose": world_sdf(
        GOOD_BOX.replace('<visual name="v">', '<visual name="v"><pose>a b c</pose>')
        + "<box><size>1 1 1</size></box></geometry></visual></link></model>"
    ),
    "fuel_include": world_sdf(
        "<include><uri>https://fuel.gazebosim.org/1.0/OpenRobotics/models/Radio</uri></include>"
    ),
    "bad_size": world_sdf(
        GOOD_BOX + "<box><size>1 0 1</size></box></geometry></visual></link></model>"
    ),
}


def main_in_process(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """simconform.cli.main as the entry point runs it, without a new interpreter."""
    from simconform.cli import main

    monkeypatch.setattr("sys.argv", ["simconform", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    cap = capsys.readouterr()
    return exc.value.code, cap.out, cap.err


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_and_writes_nothing(tmp_path, case, parser, monkeypatch, capsys) -> None:
    src = write(tmp_path / "bad.sdf", BAD[case])
    out = tmp_path / "out" / "bad.yaml"
    args = ("import-sdf", str(src), "--out", str(out), "--parser", parser)
    code, _, err = main_in_process(monkeypatch, capsys, *args)
    assert code == 2, err
    assert err.startswith("simconform: error:") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_bad_input_through_the_real_cli(tmp_path) -> None:
    src = write(tmp_path / "bad.sdf", BAD["missing_mesh"])
    r = cli("import-sdf", str(src), "--out", str(tmp_path / "out" / "bad.yaml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "nope.obj" in r.stderr and not (tmp_path / "out").exists()


def test_missing_sdf_file(tmp_path, monkeypatch, capsys) -> None:
    args = ("import-sdf", str(tmp_path / "nope.sdf"), "--out", str(tmp_path / "w.yaml"))
    code, _, err = main_in_process(monkeypatch, capsys, *args)
    assert code == 2 and "expected an existing SDF file" in err
    assert not (tmp_path / "w.yaml").exists()


def test_output_is_valid_yaml_for_load_world(exported, tmp_path) -> None:
    data, meshes, _ = sdf_import.import_sdf(exported, tmp_path / "x.yaml")
    assert set(meshes) == {"x_meshes/rock.obj"}
    text = sdf_import._yaml_text(data, exported, [])
    assert yaml.safe_load(text) == data

"""An SDF world (Gazebo) -> a simconform world YAML: `simconform import-sdf WORLD.sdf --out W.yaml`.

Length: over our ~400 lines, because the two parsers below must give one result, so they live
side by side with the one mapping they share, rather than in modules that could drift apart.

Two parsers, one result. sdformat14 (Gazebo Harmonic's own parser) is used when it imports: it
resolves <include> (model:// through GZ_SIM_RESOURCE_PATH), `relative_to` frames and
placement frames exactly as Gazebo does. Without Gazebo (sdformat14 is not on PyPI) a plain
xml.etree reader composes the model / nested model / link / visual <pose>s itself (SDF pose:
x y z roll pitch yaw, extrinsic XYZ = scipy `from_euler("xyz")`, `degrees="true"` honoured);
it refuses `relative_to` (other than to the parent's frame) and skips <include>, which need a
frame graph and a resource search.
World-level elements (<spherical_coordinates>, <scene>, <light>) are read from the XML in both.

What becomes what:
- Visuals (not collisions: the world is what sensors see) of static models, nested models of
  a static model included. Non-static models are skipped and reported, except the exporter's
  own vehicle. Links that only collide are reported. Box, cylinder (axis: local z in both),
  sphere and mesh map one to one, posed in the map frame (the SDF world frame, ENU). An object
  is named after its model when it is the model's only imported visual, else model::link::visual.
- A <plane> of size >= PLANE_INFINITE_M on both sides becomes an infinite plane (point +
  normal; the exporter writes 2000 m planes). A smaller one becomes a box PLANE_THICKNESS_M
  thick whose top face is the plane (its in-plane axes: the visual's x/y turned onto the normal).
- Colour: material <diffuse>, else <ambient>, else grey (black counts as absent: sdformat fills
  absent colours with black). sdformat keeps colours as float32; we take the shortest decimal
  with the same float32, which is what the file said. Reflectivity: <laser_retro> clipped to
  [0, 1], else the World default.
- Meshes: <uri> relative to the SDF file that holds it, file://, absolute, or model://NAME/...
  searched in GZ_SIM_RESOURCE_PATH; http(s)/Fuel URIs are refused (download the model first).
  Loaded with trimesh, <scale> and pose applied, written as OBJ in map coordinates to
  <out stem>_meshes/ (the world file's mesh loader then needs no position/rpy/scale).
- Origin: <spherical_coordinates> (EARTH_WGS84, ENU, heading 0 only; absent: 0 0 0, reported).
  Light: the first directional <light>: its <direction> turned by its pose; diffuse = mean of
  its <diffuse> rgb times <intensity>; ambient = mean of <scene><ambient> rgb. Sky: <scene>
  <background> rgb.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.errors import UserError, dump_yaml
from simconform.world import load_world

from .sdf import VEHICLE

PLANE_INFINITE_M = 100.0
PLANE_THICKNESS_M = 0.01
GREY = (0.6, 0.6, 0.6)
SHOWN = 30  # skipped items the command prints (the YAML lists them all)
DIGITS = 12  # output rounding: removes the 1e-16 noise of pose composition


@dataclass
class Pose:
    p: np.ndarray = field(default_factory=lambda: np.zeros(3))
    r: Rotation = field(default_factory=Rotation.identity)

    def __mul__(self, other: Pose) -> Pose:
        return Pose(self.p + self.r.apply(other.p), self.r * other.r)


@dataclass
class Visual:
    name: str  # model::link::visual (nested models: outer::inner::link::visual)
    pose: Pose  # in the world frame
    shape: str
    params: dict[str, Any]  # box size; cylinder radius, length; plane normal, size; mesh ...
    diffuse: tuple | None = None
    ambient: tuple | None = None
    laser_retro: float | None = None


@dataclass
class Parsed:
    visuals: list[Visual] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ xml.etree


def _floats(el: ET.Element | None, n: int | None, path: Path, where: str) -> list[float] | None:
    if el is None or el.text is None:
        return None
    try:
        vals = [float(x) for x in el.text.split()]
    except ValueError:
        vals = []
    if len(vals) != (n or max(len(vals), 1)) or not all(map(math.isfinite, vals)):
        raise UserError(path, where, el.text.strip(), f"expected {n or 'some'} finite numbers")
    return vals


def _num(el: ET.Element | None, tag: str, default: float, path: Path, where: str) -> float:
    v = _floats(el.find(tag) if el is not None else None, 1, path, f"{where}.{tag}")
    return v[0] if v else default


def xml_pose(el: ET.Element, path: Path, where: str, default: str = "") -> Pose:
    """The <pose> child of `el`: x y z roll pitch yaw (radians, or degrees="true"), or
    x y z qx qy qz qw with rotation_format="quat_xyzw" (SDF 1.9+); relative_to only when it
    names the `default` frame (the parent's), which changes nothing."""
    pe = el.find("pose")
    if pe is None or not (pe.text or "").strip():
        return Pose()
    if pe.get("relative_to") not in (None, "", default):
        why = "relative_to needs sdformat14: source Gazebo's env.sh and run again"
        raise UserError(path, f"{where}.pose", pe.get("relative_to"), why)
    if pe.get("rotation_format") == "quat_xyzw":
        v = _floats(pe, 7, path, f"{where}.pose")
        return Pose(np.array(v[:3]), Rotation.from_quat(v[3:]))
    v = _floats(pe, 6, path, f"{where}.pose")
    deg = pe.get("degrees", "false").strip().lower() in ("true", "1")
    return Pose(np.array(v[:3]), Rotation.from_euler("xyz", v[3:], degrees=deg))


def _rgb(el: ET.Element | None, tag: str, path: Path, where: str) -> tuple | None:
    v = _floats(el.find(tag) if el is not None else None, None, path, f"{where}.{tag}")
    return tuple(v[:3]) if v and len(v) >= 3 else None


def _xml_geometry(g: ET.Element | None, path: Path, where: str) -> tuple[str, dict] | str:
    """(shape, params), or the name of an unsupported geometry."""
    s = g[0] if g is not None and len(g) else None
    get = lambda tag, n, default: _floats(s.find(tag), n, path, f"{where}.{tag}") or default  # noqa: E731
    if s is None:
        return "empty"
    if s.tag == "box":
        return "box", {"size": get("size", 3, [1.0] * 3)}
    if s.tag == "cylinder":
        return "cylinder", {
            "radius": get("radius", 1, [1.0])[0],
            "length": get("length", 1, [1])[0],
        }
    if s.tag == "sphere":
        return "sphere", {"radius": get("radius", 1, [1.0])[0]}
    if s.tag == "plane":
        return "plane", {"normal": get("normal", 3, [0, 0, 1]), "size": get("size", 2, [1, 1])}
    if s.tag == "mesh":
        uri = (s.findtext("uri") or "").strip()
        return "mesh", {"uri": uri, "scale": get("scale", 3, [1, 1, 1]), "base": path.parent}
    return s.tag


def _xml_model(m, parent: Pose, parent_static: bool, scope: str, path, out: Parsed) -> None:
    scoped = f"{scope}::{m.get('name')}" if scope else m.get("name", "")
    if not scope and scoped == VEHICLE:
        return
    pose = parent * xml_pose(m, path, f"model {scoped}", "__model__" if scope else "world")
    if not (parent_static or (m.findtext("static") or "").strip().lower() in ("true", "1")):
        out.skipped.append(f"model {scoped}: not static")
        return
    for link in m.findall("link"):
        lname = f"{scoped}::{link.get('name')}"
        lpose = pose * xml_pose(link, path, f"link {lname}", "__model__")
        if not link.findall("visual") and link.findall("collision"):
            out.skipped.append(f"link {lname}: collision only")
        for v in link.findall("visual"):
            vname = f"{lname}::{v.get('name')}"
            geom = _xml_geometry(v.find("geometry"), path, vname)
            if isinstance(geom, str):
                out.skipped.append(f"visual {vname}: {geom} geometry not supported")
                continue
            mat, retro = v.find("material"), _num(v, "laser_retro", None, path, vname)
            diffuse, ambient = _rgb(mat, "diffuse", path, vname), _rgb(mat, "ambient", path, vname)
            vpose = lpose * xml_pose(v, path, f"visual {vname}", link.get("name"))
            out.visuals.append(Visual(vname, vpose, *geom, diffuse, ambient, retro))
    _xml_includes(m, f" in {scoped}", path, out)
    for nested in m.findall("model"):
        _xml_model(nested, pose, True, scoped, path, out)


def parse_xml(world: ET.Element, path: Path) -> Parsed:
    out = Parsed()
    for m in world.findall("model"):
        _xml_model(m, Pose(), False, "", path, out)
    _xml_includes(world, "", path, out)
    return out


def _xml_includes(parent: ET.Element, where: str, path: Path, out: Parsed) -> None:
    for inc in parent.findall("include"):
        uri = (inc.findtext("uri") or "").strip()
        _remote(uri, path, f"include{where}.uri")
        out.skipped.append(f"include {uri}{where}: needs sdformat14 (Gazebo)")


# ------------------------------------------------------------------ sdformat14


def _f32(x: float) -> float:
    """Shortest decimal with the same float32 (sdformat stores colours as float32)."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def _sdf_pose(p) -> Pose:
    q, t = p.rot(), p.pos()
    return Pose(np.array([t.x(), t.y(), t.z()]), Rotation.from_quat([q.x(), q.y(), q.z(), q.w()]))


def _sdf_geometry(g) -> tuple[str, dict] | str:
    kind = g.type().name.lower() if g is not None else "empty"
    kind = kind if kind.isidentifier() else "polyline?"  # a type sdformat14 has no name for
    v3 = lambda v: [v.x(), v.y(), v.z()]  # noqa: E731
    if kind == "box":
        return kind, {"size": v3(g.box_shape().size())}
    if kind == "cylinder":
        return kind, {"radius": g.cylinder_shape().radius(), "length": g.cylinder_shape().length()}
    if kind == "sphere":
        return kind, {"radius": g.sphere_shape().radius()}
    if kind == "plane":
        p = g.plane_shape()
        return kind, {"normal": v3(p.normal()), "size": [p.size().x(), p.size().y()]}
    if kind == "mesh":
        m = g.mesh_shape()
        base = Path(m.file_path()).parent if m.file_path() else None
        return kind, {"uri": m.uri(), "scale": v3(m.scale()), "base": base}
    return kind


def _resolve(obj, where: str, path: Path, *frame: str) -> Pose:
    try:
        return _sdf_pose(obj.semantic_pose().resolve(*frame))
    except Exception as exc:
        msg = " ".join(str(exc).split())
        raise UserError(path, where, "pose", f"expected a resolvable pose ({msg})") from None


def _sdf_model(m, parent: Pose | None, parent_static: bool, scope: str, path, out) -> None:
    scoped = f"{scope}::{m.name()}" if scope else m.name()
    if parent is None and scoped == VEHICLE:
        return
    # a top-level model resolves to the world, a nested one to its parent model
    pose = _resolve(m, scoped, path) if parent is None else (
        parent * _resolve(m, scoped, path, "__model__"))  # fmt: skip
    if not (parent_static or m.static()):
        out.skipped.append(f"model {scoped}: not static")
        return
    rgb = lambda c: tuple(_f32(x) for x in (c.r(), c.g(), c.b()))  # noqa: E731
    for link in map(m.link_by_index, range(m.link_count())):
        if link.visual_count() == 0 and link.collision_count():
            out.skipped.append(f"link {scoped}::{link.name()}: collision only")
        for v in map(link.visual_by_index, range(link.visual_count())):
            vname = f"{scoped}::{link.name()}::{v.name()}"
            geom = _sdf_geometry(v.geometry())
            if isinstance(geom, str):
                out.skipped.append(f"visual {vname}: {geom} geometry not supported")
                continue
            mat = v.material()
            colors = (rgb(mat.diffuse()), rgb(mat.ambient())) if mat is not None else (None, None)
            retro = v.laser_retro() if v.has_laser_retro() else None
            vpose = pose * _resolve(v, vname, path, "__model__")
            out.visuals.append(Visual(vname, vpose, *geom, *colors, retro))
    for nested in map(m.model_by_index, range(m.model_count())):
        _sdf_model(nested, pose, True, scoped, path, out)


@contextlib.contextmanager
def _quiet_stderr():
    """sdformat prints its errors as well as raising them: one message is enough."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def parse_sdformat(path: Path, world_name: str) -> Parsed:
    import sdformat14

    cfg = sdformat14.ParserConfig()
    for d in _resource_dirs():
        cfg.add_uri_path("model://", str(d))
    root = sdformat14.Root()
    try:
        with _quiet_stderr():
            root.load(str(path), cfg)
    except Exception as exc:
        msg = " ".join(str(exc).split())
        first = re.match(r"(Error Code \d+:.*?)(?= Error Code \d+:|$)", msg)
        why = f"expected valid SDF: {first.group(1) if first else msg}"
        if "Unable to find uri[http" in why:
            why += " (download the model into GZ_SIM_RESOURCE_PATH, include it by model://)"
        raise UserError(path, "", "sdformat error", why) from None
    worlds = [root.world_by_index(i) for i in range(root.world_count())]
    w = next((w for w in worlds if w.name() == world_name), None)
    if w is None:
        raise UserError(path, "world", world_name, "expected sdformat to load this world")
    out = Parsed()
    for m in map(w.model_by_index, range(w.model_count())):
        _sdf_model(m, None, False, "", path, out)
    return out


def sdformat_available() -> bool:
    try:
        import sdformat14  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------ conversion


def _resource_dirs() -> list[Path]:
    dirs = []
    for var in ("GZ_SIM_RESOURCE_PATH", "SDF_PATH", "GZ_FILE_PATH"):
        dirs += [Path(d) for d in os.environ.get(var, "").split(os.pathsep) if d]
    return dirs


def _remote(uri: str, path: Path, where: str) -> None:
    if re.match(r"^(https?|fuel)://", uri) or "fuel.gazebosim.org" in uri:
        why = "expected a local file: download it into GZ_SIM_RESOURCE_PATH, use model://"
        raise UserError(path, where, uri, why)


def resolve_uri(uri: str, base: Path | None, path: Path, where: str) -> Path:
    """The local file of a mesh <uri>; remote (http, Fuel) URIs are refused."""
    _remote(uri, path, where)
    if uri.startswith("model://"):
        rest = uri[len("model://") :]
        for d in _resource_dirs():
            if (d / rest).is_file():
                return d / rest
        raise UserError(path, where, uri, "expected model://NAME/... in GZ_SIM_RESOURCE_PATH")
    local = Path(uri[len("file://") :] if uri.startswith("file://") else uri)
    local = local if local.is_absolute() else (base or path.parent) / local
    if not local.is_file():
        raise UserError(path, where, uri, f"expected an existing mesh file ({local})")
    return local


def _mesh_obj(v: Visual, path: Path, name: str) -> str:
    """OBJ text of the mesh, scaled and posed: map-frame vertices."""
    import trimesh

    file = resolve_uri(v.params["uri"], v.params["base"], path, f"visual {v.name}.mesh.uri")
    try:
        mesh = trimesh.load(file, force="mesh")
    except Exception as exc:  # trimesh raises many types for unreadable files
        raise UserError(path, v.name, str(file), f"expected a readable mesh ({exc})") from None
    if len(getattr(mesh, "faces", ())) == 0:
        raise UserError(path, v.name, str(file), "expected a mesh with triangles")
    vert = np.asarray(mesh.vertices, dtype=float) * np.asarray(v.params["scale"], dtype=float)
    vert = v.pose.r.apply(vert) + v.pose.p
    lines = [f"# {name}: from {file}, map frame (ENU), metres"]
    lines += ["v " + " ".join(repr(float(x)) for x in row) for row in vert]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in np.asarray(mesh.faces)]
    return "\n".join(lines) + "\n"


def _r(x) -> Any:
    if isinstance(x, list | tuple | np.ndarray):
        return [_r(v) for v in x]
    return round(float(x), DIGITS) + 0.0  # + 0.0: no -0.0


def _rpy(r: Rotation) -> list[float]:
    with warnings.catch_warnings():  # gimbal lock: still the same rotation
        warnings.simplefilter("ignore")
        return _r(r.as_euler("xyz"))


def _object(v: Visual, name: str, mesh_file: str | None) -> dict:
    p, prm = v.pose, v.params
    if v.shape == "box":
        obj = {"type": "box", "center": _r(p.p), "size": _r(prm["size"]), "rpy": _rpy(p.r)}
    elif v.shape == "cylinder":
        obj = {"type": "cylinder", "center": _r(p.p), "radius": _r(prm["radius"]),
               "length": _r(prm["length"]), "rpy": _rpy(p.r)}  # fmt: skip
    elif v.shape == "sphere":
        obj = {"type": "sphere", "center": _r(p.p), "radius": _r(prm["radius"])}
    elif v.shape == "mesh":
        obj = {"type": "mesh", "file": mesh_file}
    else:  # plane
        n = np.asarray(prm["normal"], dtype=float) / np.linalg.norm(prm["normal"])
        if min(prm["size"]) >= PLANE_INFINITE_M:
            obj = {"type": "plane", "point": _r(p.p), "normal": _r(p.r.apply(n))}
        else:  # the visual's z turned onto the normal (shortest arc); top face = the plane
            r = p.r * Rotation.align_vectors([n], [[0.0, 0.0, 1.0]])[0]
            obj = {"type": "box", "center": _r(p.p - r.apply([0, 0, PLANE_THICKNESS_M / 2])),
                   "size": _r([*prm["size"], PLANE_THICKNESS_M]), "rpy": _rpy(r)}  # fmt: skip
    color = next((c for c in (v.diffuse, v.ambient) if c is not None and max(c) > 0), GREY)
    obj = {"type": obj.pop("type"), "name": name, **obj, "color": _r(np.clip(color, 0, 1))}
    if v.laser_retro is not None:
        obj["reflectivity"] = _r(min(1.0, max(0.0, v.laser_retro)))
    return obj


def _world_fields(w: ET.Element, path: Path, skipped: list[str]) -> dict:
    sc, out = w.find("spherical_coordinates"), {}
    if sc is None:
        skipped.append("no <spherical_coordinates>: origin set to lat 0, lon 0, alt 0")
    for tag, ok in (("surface_model", "EARTH_WGS84"), ("world_frame_orientation", "ENU")):
        got = ((sc.findtext(tag) if sc is not None else None) or ok).strip()
        if got != ok:
            raise UserError(path, f"spherical_coordinates.{tag}", got, f"expected {ok}")
    num = lambda t: _num(sc, t, 0.0, path, "spherical_coordinates")  # noqa: E731
    if num("heading_deg") != 0:
        why = "expected 0 (the map frame is ENU)"
        raise UserError(path, "spherical_coordinates.heading_deg", num("heading_deg"), why)
    out["origin"] = {
        "lat": num("latitude_deg"),
        "lon": num("longitude_deg"),
        "alt": num("elevation"),
    }
    scene, light = w.find("scene"), {}
    if (bg := _rgb(scene, "background", path, "scene")) is not None:
        out["sky_color"] = _r(np.clip(bg, 0, 1))
    if (amb := _rgb(scene, "ambient", path, "scene")) is not None:
        light["ambient"] = _r(np.clip(np.mean(amb), 0, 1))
    sun = next((e for e in w.findall("light") if e.get("type") == "directional"), None)
    if sun is not None:
        d = np.asarray(_floats(sun.find("direction"), 3, path, "light.direction") or [0, 0, -1])
        if sun.find("pose") is not None and not sun.find("pose").get("relative_to"):
            d = xml_pose(sun, path, "light").r.apply(d)  # (relative_to a frame: not applied)
        if np.linalg.norm(d) > 1e-9:
            light["direction"] = _r(d / np.linalg.norm(d))
        if (dif := _rgb(sun, "diffuse", path, "light")) is not None:
            k = _num(sun, "intensity", 1.0, path, "light")
            light["diffuse"] = _r(np.clip(np.mean(dif) * k, 0, 1))
    return out | ({"light": light} if light else {})


def _tolerant_xml(text: bytes) -> bytes:
    """What Gazebo's parser (tinyxml2) accepts and expat does not: "--" inside comments, and
    undeclared prefixes (<experimental:params>, gz:type="..."), declared here on the root."""
    text = re.sub(rb"<!--.*?-->", lambda m: b"\n" * m[0].count(b"\n"), text, flags=re.S)
    used = set(re.findall(rb"[<\s/]([A-Za-z_][\w.-]*):[A-Za-z_]", text)) - {b"xml", b"xmlns"}
    decl = b"".join(b' xmlns:%s="urn:sdf:%s"' % (p, p) for p in sorted(used)
                    if b"xmlns:" + p + b"=" not in text)  # fmt: skip
    return re.sub(rb"<sdf\b", lambda m: b"<sdf" + decl, text, count=1) if decl else text


def import_sdf(path: Path, out: Path, parser: str = "auto") -> tuple[dict, dict[str, str], list]:
    """(world YAML data, {mesh path relative to `out`: OBJ text}, skipped); nothing written."""
    path = Path(path)
    if not path.is_file():
        raise UserError(path, "", str(path), "expected an existing SDF file")
    try:
        root = ET.fromstring(_tolerant_xml(path.read_bytes()))
    except ET.ParseError as exc:
        raise UserError(path, "", "not XML", f"expected an SDF (XML) file ({exc})") from None
    if root.tag != "sdf":
        raise UserError(path, "(root)", f"<{root.tag}>", "expected an <sdf> root element")
    if (w := root.find("world")) is None:
        raise UserError(path, "sdf", "no <world>", "expected an SDF world")
    if parser == "auto":
        parser = "sdformat" if sdformat_available() else "xml"
    if parser == "sdformat" and not sdformat_available():
        raise UserError(None, "--parser", parser, "sdformat14 does not import: source Gazebo's env")
    skipped = (
        [f"worlds after the first ({w.get('name')})"] if len(root.findall("world")) > 1 else []
    )
    data: dict[str, Any] = {"name": w.get("name") or path.stem}
    data |= _world_fields(w, path, skipped)
    parsed = parse_sdformat(path, data["name"]) if parser == "sdformat" else parse_xml(w, path)
    skipped += parsed.skipped
    models = [v.name.rsplit("::", 2)[0] for v in parsed.visuals]
    count, objects, meshes = Counter(models), [], {}
    for v, model in zip(parsed.visuals, models):
        name = model if count[model] == 1 else v.name
        rel = None
        if v.shape == "mesh":
            stem = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "mesh"
            while (rel := f"{out.stem}_meshes/{stem}.obj") in meshes:
                stem += "_"
            meshes[rel] = _mesh_obj(v, path, name)
        objects.append(_object(v, name, rel))
    if not objects:
        raise UserError(path, f"world {data['name']}", "no static visual", "expected one to import")
    return data | {"objects": objects}, meshes, skipped


def _yaml_text(data: dict, src: Path, skipped: list[str]) -> str:
    head = [f"# imported from {src} by `simconform import-sdf`"]
    head += [f"# skipped ({len(skipped)}):"] + [f"#   - {' '.join(s.split())}" for s in skipped]
    return "\n".join(head) + "\n" + dump_yaml(data, sort_keys=False, default_flow_style=None)


def _imported(out: Path) -> bool:
    """Whether `out` is a world file an earlier import wrote (its first line says so)."""
    try:
        with out.open(encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return False
    return first.startswith("# imported from ") and "by `simconform import-sdf`" in first


def write_world(path: Path, out: Path, force: bool = False, parser: str = "auto") -> list[str]:
    """Import and write OUT plus its meshes, all or nothing; returns the skipped lines."""
    data, meshes, skipped = import_sdf(path, out, parser)
    existing = [t for t in [out, *(out.parent / rel for rel in meshes)] if t.exists()]
    if existing and not force:
        raise UserError(None, "--out", str(existing[0]), "expected a new file (or --force)")
    if existing and not _imported(out):  # --force replaces an earlier import only
        raise UserError(
            None,
            "--out",
            str(existing[0]),
            "was not written by `simconform import-sdf`, and --force replaces only an earlier "
            "import (its world file and meshes); choose another --out",
        )
    with tempfile.TemporaryDirectory(prefix="simconform-import-") as tmp:
        for rel, text in [*meshes.items(), (out.name, _yaml_text(data, path, skipped))]:
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(text)
        try:  # the result must load as a world: checked before anything is written
            load_world(Path(tmp) / out.name)
        except UserError as exc:
            i = re.match(r"objects\.(\d+)", exc.field)
            name = f" ({data['objects'][int(i[1])]['name']})" if i else ""
            raise UserError(path, f"imported {exc.field}{name}", exc.value, exc.allowed) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        for rel in meshes:
            (out.parent / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / rel, out.parent / rel)
        staged = out.with_name(f".{out.name}.tmp")
        shutil.copyfile(Path(tmp) / out.name, staged)
        os.replace(staged, out)  # the world file last, atomically
    return skipped

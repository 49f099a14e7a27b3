"""Gazebo Harmonic backend: SDF export round trip and schema, gz.msgs10 decoding, the
unavailable message, and (marked `gazebo`, skipped without an install) a real server run.

Decoding runs on real gz.msgs10 messages where `gz.msgs10` imports; otherwise on messages built
with the `protobuf` package from a descriptor written here from gz-msgs 10's field numbers
(proto/gz/msgs/*.proto), i.e. the same wire bytes.
"""

from __future__ import annotations

import math
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pymap3d
import pytest
import trimesh
import yaml

from simconform.adapters.base import BackendUnavailable
from simconform.adapters.gazebo import decode, sdf, transport
from simconform.adapters.gazebo.backend import GazeboBackend
from simconform.demo import DEMO_SPEC, DEMO_WORLD
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, load_spec
from simconform.world import Box, Cylinder, Mesh, Plane, Sphere, load_world

REPO = Path(__file__).resolve().parent.parent
WORLD = load_world(DEMO_WORLD)
SPEC = load_spec(DEMO_SPEC)
VLP16 = load_spec(REPO / "sensors_spec" / "vlp16.yaml")

# ------------------------------------------------------------------ SDF 1.10 element table
# Allowed children of each element we write, read from sdformat's sdf/1.10/*.sdf (commit
# 2ace536, main): the element's own <element> children plus those of its <include>d files.
# A key "a/b" is element b inside a (for names that mean different things in different places).
PLUGIN_ANY = None  # plugin.sdf: <element copy_data="true">: any children
# fmt: off
SDF_CHILDREN: dict[str, set[str] | None] = {
    "sdf": {"world", "model", "actor", "light"},  # root.sdf
    # world.sdf (+ atmosphere, gui, physics, scene, light, frame, joint, model, actor, plugin,
    # road, spherical_coordinates, state, population)
    "world": {
        "audio", "wind", "include", "gravity", "magnetic_field", "atmosphere", "gui", "physics",
        "scene", "light", "frame", "joint", "model", "actor", "plugin", "road",
        "spherical_coordinates", "state", "population",
    },
    "physics": {  # physics.sdf
        "max_step_size", "real_time_factor", "real_time_update_rate", "max_contacts", "dart",
        "simbody", "bullet", "ode",
    },
    "scene": {"ambient", "background", "sky", "shadows", "fog", "grid", "origin_visual"},
    "light": {  # light.sdf
        "cast_shadows", "light_on", "visualize", "intensity", "pose", "diffuse", "specular",
        "attenuation", "direction", "spot",
    },
    "spherical_coordinates": {  # spherical_coordinates.sdf
        "surface_model", "world_frame_orientation", "latitude_deg", "longitude_deg",
        "elevation", "surface_axis_equatorial", "surface_axis_polar", "heading_deg",
    },
    "plugin": PLUGIN_ANY,
    "model": {  # model.sdf (+ frame, pose, link, joint, plugin, gripper)
        "static", "self_collide", "allow_auto_disable", "frame", "pose", "link", "joint",
        "plugin", "gripper", "include", "model", "enable_wind",
    },
    "link": {  # link.sdf
        "gravity", "enable_wind", "self_collide", "kinematic", "must_be_base_link",
        "velocity_decay", "pose", "inertial", "collision", "visual", "sensor", "projector",
        "audio_sink", "audio_source", "battery", "light", "particle_emitter",
    },
    "inertial": {"mass", "pose", "inertia", "fluid_added_mass"},  # inertial.sdf
    "inertia": {"ixx", "ixy", "ixz", "iyy", "iyz", "izz"},
    "visual": {  # visual.sdf
        "cast_shadows", "laser_retro", "transparency", "visibility_flags", "meta", "pose",
        "material", "geometry", "plugin",
    },
    "geometry": {  # geometry.sdf
        "empty", "box", "capsule", "cylinder", "ellipsoid", "heightmap", "image", "mesh",
        "plane", "polyline", "sphere",
    },
    "box": {"size"},  # box_shape.sdf
    "cylinder": {"radius", "length"},  # cylinder_shape.sdf
    "sphere": {"radius"},  # sphere_shape.sdf
    "plane": {"normal", "size"},  # plane_shape.sdf
    "mesh": {"uri", "submesh", "scale"},  # mesh_shape.sdf
    "material": {  # material.sdf
        "script", "shader", "render_order", "lighting", "ambient", "diffuse", "specular",
        "shininess", "emissive", "double_sided", "pbr",
    },
    "sensor": {  # sensor.sdf
        "always_on", "update_rate", "visualize", "topic", "enable_metrics", "pose", "plugin",
        "air_pressure", "air_speed", "altimeter", "camera", "contact", "forcetorque", "gps",
        "imu", "lidar", "logical_camera", "magnetometer", "navsat", "ray", "rfid", "rfidtag",
        "sonar", "transceiver",
    },
    "lidar": {"scan", "range", "noise", "visibility_mask"},  # lidar.sdf
    "scan": {"horizontal", "vertical"},
    "scan/horizontal": {"samples", "resolution", "min_angle", "max_angle"},
    "scan/vertical": {"samples", "resolution", "min_angle", "max_angle"},
    "lidar/range": {"min", "max", "resolution"},
    "camera": {  # camera.sdf
        "triggered", "camera_info_topic", "trigger_topic", "horizontal_fov", "image", "clip",
        "save", "depth_camera", "segmentation_type", "box_type", "noise", "distortion", "lens",
        "visibility_mask", "optical_frame_id",
    },
    "camera/image": {"width", "height", "format", "anti_aliasing"},
    "clip": {"near", "far"},
    "lens": {
        "type", "scale_to_hfov", "custom_function", "cutoff_angle", "env_texture_size",
        "intrinsics", "projection",
    },
    "intrinsics": {"fx", "fy", "cx", "cy", "s"},
    "imu": {  # imu.sdf
        "orientation_reference_frame", "angular_velocity", "linear_acceleration",
        "enable_orientation",
    },
    "navsat": {"position_sensing", "velocity_sensing"},  # navsat.sdf
    # --noise engine: noise.sdf, and where lidar.sdf, camera.sdf, imu.sdf, navsat.sdf put it
    "noise": {
        "mean", "stddev", "bias_mean", "bias_stddev", "dynamic_bias_stddev",
        "dynamic_bias_correlation_time", "precision",
    },
    "lidar/noise": {"type", "mean", "stddev"},  # lidar.sdf: <type> is an element here
    "camera/noise": {"type", "mean", "stddev"},  # camera.sdf: likewise
    "angular_velocity": {"x", "y", "z"},
    "linear_acceleration": {"x", "y", "z"},
    "x": {"noise"},
    "y": {"noise"},
    "z": {"noise"},
    "position_sensing": {"horizontal", "vertical"},
    "velocity_sensing": {"horizontal", "vertical"},
    "position_sensing/horizontal": {"noise"},
    "position_sensing/vertical": {"noise"},
}
# fmt: on
# attributes each element may carry (required ones marked by the spec files with required="1")
SDF_ATTRIBUTES = {
    "sdf": ({"version"}, {"version"}),
    "world": ({"name"}, {"name"}),
    "model": ({"name", "canonical_link", "placement_frame"}, {"name"}),
    "link": ({"name"}, {"name"}),
    "visual": ({"name"}, {"name"}),
    "sensor": ({"name", "type"}, {"name", "type"}),
    "plugin": ({"name", "filename"}, {"filename"}),
    "light": ({"name", "type"}, {"name", "type"}),
    "physics": ({"name", "default", "type"}, {"type"}),
    "camera": ({"name"}, set()),
    "noise": ({"type"}, set()),  # required by noise.sdf; lidar/camera give <type> instead
}


def _key(parent: str | None, tag: str) -> str:
    return f"{parent}/{tag}" if parent and f"{parent}/{tag}" in SDF_CHILDREN else tag


def _check_schema(el: ET.Element, parent: str | None = None) -> int:
    """Every element is allowed in its parent and carries allowed attributes; returns count."""
    key = _key(parent, el.tag)
    allowed, required = SDF_ATTRIBUTES.get(el.tag, (set(), set()))
    assert set(el.attrib) <= allowed, (key, el.attrib)
    assert required <= set(el.attrib), (key, el.attrib)
    children = list(el)
    if not children:
        if el.tag not in SDF_CHILDREN or el.tag == "navsat":  # leaves hold a value
            assert el.tag == "navsat" or (el.text or "").strip(), f"empty leaf {key}"
        return 1
    spec_children = SDF_CHILDREN.get(key, set())
    if spec_children is None:  # plugin: free-form
        return 1 + len(children)
    n = 1
    for c in children:
        assert c.tag in spec_children, f"<{c.tag}> is not a child of <{key}> in SDF 1.10"
        n += _check_schema(c, el.tag)
    return n


def _floats(el: ET.Element | None) -> np.ndarray:
    assert el is not None
    return np.array([float(x) for x in el.text.split()])


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, ET.Element]:
    out = tmp_path_factory.mktemp("sdf")
    path = sdf.write_sdf(WORLD, SPEC, out, driver=True)  # the backend's world: a superset
    return path, ET.parse(path).getroot()


def test_sdf_matches_the_sdf_1_10_element_definitions(exported) -> None:
    _path, root = exported
    assert root.tag == "sdf" and root.get("version") == "1.10"
    assert _check_schema(root) > 100


def test_sdf_world_geometry_colours_and_origin(exported) -> None:
    path, root = exported
    w = root.find("world")
    assert w.get("name") == WORLD.name
    sc = w.find("spherical_coordinates")
    assert sc.findtext("surface_model") == "EARTH_WGS84"
    assert sc.findtext("world_frame_orientation") == "ENU"
    assert float(sc.findtext("latitude_deg")) == WORLD.origin.lat
    assert float(sc.findtext("longitude_deg")) == WORLD.origin.lon
    assert float(sc.findtext("elevation")) == WORLD.origin.alt
    assert float(sc.findtext("heading_deg")) == 0.0
    plugins = {p.get("filename"): p for p in w.findall("plugin")}
    for name in (
        "gz-sim-physics-system",
        "gz-sim-scene-broadcaster-system",
        "gz-sim-sensors-system",
        "gz-sim-imu-system",
        "gz-sim-navsat-system",
        "gz-sim-user-commands-system",
    ):
        assert name in plugins
    assert plugins["gz-sim-sensors-system"].findtext("render_engine") == "ogre2"
    models = {m.get("name"): m for m in w.findall("model")}
    for obj, name in zip(WORLD.objects, sdf.model_names(WORLD)):
        m = models[name]
        assert m.findtext("static") == "true"
        vis = m.find("link/visual")
        np.testing.assert_array_equal(_floats(vis.find("material/diffuse")), (*obj.color, 1.0))
        np.testing.assert_array_equal(_floats(vis.find("material/ambient")), (*obj.color, 1.0))
        pose = _floats(m.find("pose"))
        g = vis.find("geometry")
        if isinstance(obj, Box):
            np.testing.assert_array_equal(pose, (*obj.center, *obj.rpy))
            np.testing.assert_array_equal(_floats(g.find("box/size")), obj.size)
        elif isinstance(obj, Cylinder):
            np.testing.assert_array_equal(pose, (*obj.center, *obj.rpy))
            assert float(g.findtext("cylinder/radius")) == obj.radius
            assert float(g.findtext("cylinder/length")) == obj.length
        elif isinstance(obj, Sphere):
            np.testing.assert_array_equal(pose[:3], obj.center)
            assert float(g.findtext("sphere/radius")) == obj.radius
        elif isinstance(obj, Plane):
            np.testing.assert_array_equal(pose[:3], obj.point)
            np.testing.assert_array_equal(_floats(g.find("plane/normal")), obj.normal)
        elif isinstance(obj, Mesh):
            uri = g.findtext("mesh/uri")
            assert not uri.startswith("/") and (path.parent / uri).is_file()
            back = trimesh.load(path.parent / uri, force="mesh", process=False)
            i = WORLD.objects.index(obj)
            tri = np.sort(WORLD.mesh_triangles(i).reshape(-1, 9), axis=0)
            np.testing.assert_allclose(np.sort(back.triangles.reshape(-1, 9), axis=0), tri)
    assert any(isinstance(o, Mesh) for o in WORLD.objects)


def test_sdf_vehicle_is_a_free_unit_body_carrying_the_driver(exported) -> None:
    """The drive table's wrench assumes exactly this body: unit mass and isotropic inertia at the
    link origin, gravity off, nothing to collide with."""
    from simconform.adapters.gazebo import driver_system

    _path, root = exported
    model = root.find(f"world/model[@name='{sdf.VEHICLE}']")
    assert model.findtext("static") == "false"
    link = model.find("link")
    assert link.findtext("gravity") == "false" and link.find("collision") is None
    inertial = link.find("inertial")
    np.testing.assert_array_equal(_floats(inertial.find("pose")), np.zeros(6))
    assert float(inertial.findtext("mass")) == sdf.VEHICLE_MASS
    i = {c.tag: float(c.text) for c in inertial.find("inertia")}
    assert i == {
        "ixx": sdf.VEHICLE_INERTIA, "iyy": sdf.VEHICLE_INERTIA, "izz": sdf.VEHICLE_INERTIA,
        "ixy": 0.0, "ixz": 0.0, "iyz": 0.0,
    }  # fmt: skip
    (plugin,) = model.findall("plugin")
    assert (plugin.get("filename"), plugin.get("name")) == sdf.PYTHON_SYSTEM
    assert plugin.findtext("module_name") == driver_system.MODULE_NAME
    # what users open in `gz sim` (export-sdf) has no driver: they move the vehicle themselves
    plain = ET.fromstring(sdf.world_to_sdf(WORLD, SPEC))
    assert plain.find(f"world/model[@name='{sdf.VEHICLE}']/plugin") is None


def _sensors(root: ET.Element) -> dict[str, ET.Element]:
    link = root.find(f"world/model[@name='{sdf.VEHICLE}']/link")
    return {s.get("name"): s for s in link.findall("sensor")}


@pytest.mark.parametrize("spec", [SPEC, VLP16], ids=["rover", "vlp16"])
def test_sdf_sensors_round_trip_the_spec(spec) -> None:
    root = ET.fromstring(sdf.world_to_sdf(WORLD, spec))
    sensors = _sensors(root)
    gz_types = {"lidar": "gpu_lidar", "camera": "camera", "imu": "imu", "gnss": "navsat"}
    depth = {f"{n}_depth": n for n, s in spec.sensors.items() if s.type == "camera" and s.depth}
    assert set(sensors) == {n for n, s in spec.sensors.items() if s.type in gz_types} | set(depth)
    assert not root.findall(".//noise"), "Gazebo must add no noise of its own"
    for name, el in sensors.items():
        twin = name in depth
        s = spec.sensors[depth.get(name, name)]
        assert el.get("type") == ("depth_camera" if twin else gz_types[s.type])
        assert float(el.findtext("update_rate")) == s.rate_hz
        topic = sdf.depth_topic(depth[name]) if twin else sdf.gz_topic(name)
        assert el.findtext("topic") == topic
        np.testing.assert_array_equal(_floats(el.find("pose")), (*s.mount.xyz, *s.mount.rpy))
        if isinstance(s, LidarSpec):
            h, v = el.find("lidar/scan/horizontal"), el.find("lidar/scan/vertical")
            assert int(h.findtext("samples")) == s.columns
            n, lo, hi = (float(h.findtext(k)) for k in ("samples", "min_angle", "max_angle"))
            az = lo + (hi - lo) * np.arange(n) / (n - 1)  # Gazebo's spacing, both ends included
            np.testing.assert_allclose(az, 2 * np.pi * np.arange(s.columns) / s.columns)
            el_spec = s.rings.elevations()
            assert int(v.findtext("samples")) == len(el_spec)
            assert float(v.findtext("min_angle")) == el_spec.min()
            assert float(v.findtext("max_angle")) == el_spec.max()
            assert float(el.findtext("lidar/range/min")) == s.range.min
            assert float(el.findtext("lidar/range/max")) == s.range.max
            assert float(el.findtext("lidar/range/resolution")) == 0.0
        elif isinstance(s, CameraSpec):
            c = el.find("camera")
            assert int(c.findtext("image/width")) == s.width
            assert int(c.findtext("image/height")) == s.height
            assert c.findtext("image/format") == ("R_FLOAT32" if twin else "R8G8B8")
            assert math.isclose(math.degrees(float(c.findtext("horizontal_fov"))), s.hfov_deg)
            assert 0 < float(c.findtext("clip/near")) < float(c.findtext("clip/far"))
        elif isinstance(s, ImuSpec):
            assert el.find("imu") is not None
        elif isinstance(s, GnssSpec):
            assert el.find("navsat") is not None


def test_bridge_yaml_and_export_command(tmp_path) -> None:
    from typer.testing import CliRunner

    from simconform.cli import app

    entries = yaml.safe_load(sdf.bridge_yaml(SPEC))
    by_ros = {e["ros_topic_name"]: e for e in entries}
    assert by_ros["/lidar/points"]["gz_topic_name"] == "/simconform/lidar/points"
    assert by_ros["/lidar/points"]["gz_type_name"] == "gz.msgs.PointCloudPacked"
    assert by_ros["/imu"]["ros_type_name"] == "sensor_msgs/msg/Imu"
    assert by_ros["/gps/fix"]["gz_type_name"] == "gz.msgs.NavSat"
    assert by_ros["/camera/image"]["gz_topic_name"] == "/simconform/camera"
    assert by_ros["/camera/depth"]["gz_topic_name"] == sdf.depth_topic("camera")
    assert by_ros["/camera/depth"]["ros_type_name"] == "sensor_msgs/msg/Image"
    assert "/clock" in by_ros
    assert all(e["direction"] == "GZ_TO_ROS" for e in entries)
    res = CliRunner().invoke(app, ["export-sdf", "--out", str(tmp_path), "--bridge"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / f"{WORLD.name}.sdf").is_file() and (tmp_path / "bridge.yaml").is_file()
    assert list((tmp_path / "meshes").glob("*.obj"))


# ------------------------------------------------------------------ gz.msgs10 messages


def _stamp(msg, t_ns: int) -> None:
    msg.header.stamp.sec, msg.header.stamp.nsec = divmod(t_ns, 1_000_000_000)


def test_laserscan_decodes_to_the_spec_layout(msgs) -> None:
    s: LidarSpec = SPEC.sensors["lidar"]
    el = _sensors(ET.fromstring(sdf.world_to_sdf(WORLD, SPEC)))["lidar"]
    h, v = el.find("lidar/scan/horizontal"), el.find("lidar/scan/vertical")
    rings, cols = s.rings.count, s.columns
    scan = msgs["LaserScan"]()
    _stamp(scan, 12_300_000_000)
    scan.frame = "simconform_vehicle::base_link::lidar"
    scan.angle_min, scan.angle_max = float(h.findtext("min_angle")), float(h.findtext("max_angle"))
    scan.count = int(h.findtext("samples"))
    scan.vertical_angle_min = float(v.findtext("min_angle"))
    scan.vertical_angle_max = float(v.findtext("max_angle"))
    scan.vertical_count = int(v.findtext("samples"))
    scan.range_min, scan.range_max = s.range.min, s.range.max
    truth_r = 5.0 + np.arange(rings)[:, None] + 0.01 * np.arange(cols)[None, :]
    wire = truth_r.copy()
    wire[0, 0] = np.inf  # no return
    wire[1, 2] = s.range.max  # NaN clamped to range_max by gz-sensors
    wire[2, 3] = s.range.min * 0.5  # too near
    wire[3, 4] = -np.inf  # inside the near clip, clamping off
    scan.ranges.extend(wire.ravel())  # horizontal fastest, bottom ring first
    scan.intensities.extend(np.full(rings * cols, 0.5))
    raw = scan.SerializeToString()
    assert decode.message_stamp_ns(raw) == 12_300_000_000
    lt = decode.laserscan_to_truth(scan)  # the message object itself
    lt2 = decode.laserscan_to_truth(raw)  # and its bytes
    np.testing.assert_array_equal(lt.ranges, lt2.ranges)
    assert lt.ranges.shape == (rings, cols)
    nan = np.isnan(lt.ranges)
    assert nan[0, 0] and nan[1, 2] and nan[2, 3] and nan[3, 4] and nan.sum() == 4
    np.testing.assert_array_equal(lt.ranges[~nan], truth_r[~nan])
    np.testing.assert_allclose(lt.directions, s.directions(), atol=1e-12)
    np.testing.assert_allclose(lt.points[~nan], (s.directions() * truth_r[..., None])[~nan])
    assert np.all(lt.intensity[nan] == 0) and np.all(lt.t_offset == 0)


def test_pointcloud_packed_fields(msgs) -> None:
    pc = msgs["PointCloudPacked"]()
    _stamp(pc, 1_500_000_000)
    dtype = np.dtype(
        {"names": ["x", "y", "z", "intensity", "ring"], "formats": ["<f4"] * 4 + ["<u2"],
         "offsets": [0, 4, 8, 16, 20], "itemsize": 32}
    )  # fmt: skip
    h, w = 3, 4
    rec = np.zeros(h * w, dtype=dtype)
    rec["x"] = np.arange(h * w)
    rec["ring"] = np.repeat(np.arange(h), w)
    for name, off, dt in (("x", 0, 6), ("y", 4, 6), ("z", 8, 6), ("intensity", 16, 6),
                          ("ring", 20, 3)):  # fmt: skip
        f = pc.field.add()
        f.name, f.offset, f.datatype, f.count = name, off, dt, 1
    pc.height, pc.width, pc.point_step, pc.row_step = h, w, 32, 32 * w
    pc.data = rec.tobytes()
    t, fields = decode.read_pointcloud_packed(pc)
    assert t == 1_500_000_000
    np.testing.assert_array_equal(fields["x"], np.arange(h * w).reshape(h, w))
    np.testing.assert_array_equal(fields["ring"][:, 0], np.arange(h))
    assert fields["ring"].dtype == np.uint16


def test_image_imu_navsat(msgs) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    img = msgs["Image"]()
    _stamp(img, 2_000_000_000)
    img.width, img.height, img.step = 7, 5, 7 * 3 + 3  # padded rows
    img.pixel_format_type = decode.RGB_INT8
    img.data = np.pad(pixels.reshape(5, 21), ((0, 0), (0, 3))).tobytes()
    ct = decode.image_to_truth(img)
    np.testing.assert_array_equal(ct.image, pixels)
    img.pixel_format_type = 8  # BGR_INT8
    with pytest.raises(ValueError, match="RGB_INT8"):
        decode.image_to_truth(img)

    z = rng.uniform(0.5, 80.0, (5, 7)).astype(np.float32)
    z[0, 0], z[1, 1] = np.inf, -np.inf  # beyond the far clip; inside the near clip
    dimg = msgs["Image"]()
    _stamp(dimg, 2_000_000_000)
    dimg.width, dimg.height, dimg.step = 7, 5, 7 * 4
    dimg.pixel_format_type = decode.R_FLOAT32
    dimg.data = z.astype("<f4").tobytes()
    ct = decode.image_to_truth(img_ok := _rgb(msgs, pixels), dimg)
    np.testing.assert_array_equal(ct.image, pixels)
    assert ct.depth.dtype == np.float32 and np.isposinf(ct.depth[0, 0])
    assert np.isnan(ct.depth[1, 1]) and np.isfinite(ct.depth).sum() == 33
    np.testing.assert_array_equal(ct.depth[2:], z[2:])
    with pytest.raises(ValueError, match="R_FLOAT32"):
        decode.image_to_truth(img_ok, img_ok)  # an RGB image is not a depth image

    pose = msgs["Pose"]()
    _stamp(pose, 4_000_000_000)
    pose.name = sdf.VEHICLE
    pose.position.x, pose.position.y, pose.position.z = 1.5, -2.0, 0.25
    pose.orientation.z, pose.orientation.w = math.sin(0.3), math.cos(0.3)
    t, xyz, quat = decode.read_pose(pose.SerializeToString())
    assert t == 4_000_000_000
    np.testing.assert_array_equal(xyz, [1.5, -2.0, 0.25])
    np.testing.assert_array_equal(quat, [0.0, 0.0, math.sin(0.3), math.cos(0.3)])

    imu = msgs["IMU"]()
    _stamp(imu, 10_000_000)
    imu.linear_acceleration.x, imu.linear_acceleration.z = 0.5, 9.80665
    imu.angular_velocity.y = -0.25
    q = np.array([0.0, 0.0, -0.6, -0.8])  # w < 0: decoded with w >= 0
    imu.orientation.x, imu.orientation.y, imu.orientation.z, imu.orientation.w = q
    it = decode.imu_to_truth(imu)
    np.testing.assert_array_equal(it.accel, [0.5, 0.0, 9.80665])
    np.testing.assert_array_equal(it.gyro, [0.0, -0.25, 0.0])
    np.testing.assert_allclose(it.orientation, -q)

    enu = np.array([12.5, -40.25, 1.5])
    o = WORLD.origin
    lat, lon, alt = pymap3d.enu2geodetic(*enu, o.lat, o.lon, o.alt)
    nav = msgs["NavSat"]()
    _stamp(nav, 3_100_000_000)
    nav.latitude_deg, nav.longitude_deg, nav.altitude = lat, lon, alt
    assert decode.read_navsat(nav)[0] == 3_100_000_000
    np.testing.assert_allclose(decode.navsat_to_truth(nav, o).enu, enu, atol=1e-6)


def _rgb(msgs: dict, pixels: np.ndarray):
    img = msgs["Image"]()
    h, w, _ = pixels.shape
    img.width, img.height, img.step = w, h, 3 * w
    img.pixel_format_type = decode.RGB_INT8
    img.data = pixels.tobytes()
    return img


def test_hand_encoded_unpacked_doubles() -> None:
    """Writers may send repeated doubles unpacked (one fixed64 per value); both decode."""

    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            b, v = v & 0x7F, v >> 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def ld(num: int, payload: bytes) -> bytes:
        return varint(num << 3 | 2) + varint(len(payload)) + payload

    time = varint(1 << 3) + varint(7) + varint(2 << 3) + varint(250_000_000)
    header = ld(1, time)
    body = ld(1, header) + varint(9 << 3) + varint(2) + varint(13 << 3) + varint(1)
    body += varint(8 << 3 | 1) + struct.pack("<d", 50.0)  # range_max
    for r in (3.0, math.inf):
        body += varint(14 << 3 | 1) + struct.pack("<d", r)
    scan = decode.read_laserscan(body)
    assert scan.stamp_ns == 7_250_000_000
    np.testing.assert_array_equal(scan.ranges, [[3.0, math.inf]])
    with pytest.raises(ValueError, match="truncated"):
        decode.parse(body[:-3])


# ------------------------------------------------------------------ availability


def test_unavailable_message_is_one_paragraph(monkeypatch) -> None:
    monkeypatch.setattr(
        transport, "missing_pieces", lambda: ["Python module gz.transport13", "the `gz` executable"]
    )
    with pytest.raises(BackendUnavailable) as exc:
        GazeboBackend().open(WORLD, SPEC)
    msg = str(exc.value)
    assert "\n" not in msg
    for needle in ("gz.transport13", "`gz` executable", "packages.osrfoundation.org",
                   "gz-harmonic", "python3-gz-transport13", "24.04"):  # fmt: skip
        assert needle in msg


def test_missing_pieces_reports_this_machine() -> None:
    missing = transport.missing_pieces()
    assert all(isinstance(m, str) for m in missing)
    assert (transport.unavailable_message() is None) == (not missing)


# ------------------------------------------------------------------ real Gazebo


@pytest.mark.gazebo
def test_gazebo_against_reference_5s(tmp_path) -> None:
    """5 s of the demo through a real gz-sim 8 server and the reference backend, compared with
    `simconform compare` exactly as docs/gazebo.md tells users to. The raw lidar difference is
    metres (gpu_lidar's cube-map texels, global shutter); the engine model must explain it."""
    import json

    from conftest import cli

    ref, gz, cmp = tmp_path / "reference", tmp_path / "gazebo", tmp_path / "compare"
    r = cli("run", "--backend", "reference", "--duration", "5", "--out", str(ref))
    assert r.returncode in (0, 1), r.stderr
    g = cli("run", "--backend", "gazebo", "--duration", "5", "--out", str(gz))
    assert g.returncode in (0, 1), g.stderr
    # the server's log and the SDF it ran are kept in the run folder
    assert (gz / "gazebo" / "server.log").is_file()
    assert (gz / "gazebo" / "demo.sdf").is_file()
    c = cli("compare", str(ref), str(gz), "--out", str(cmp))
    assert c.returncode in (0, 1), c.stderr
    report = json.loads((cmp / "compare.json").read_text())
    truth = report["truth"]

    def m(sensor: str, metric: str) -> float:
        return truth[sensor][metric]["measured"]

    # lidar: the engine model (texel-centre rays, global shutter) explains the difference
    assert truth["lidar"]["engine_model_agreement"]["verdict"] == "pass"
    assert m("lidar", "engine_model_agreement") >= 0.95
    assert m("lidar", "engine_model_unexplained") < 0.002
    for key in ("range_diff_std", "range_diff_p99"):  # predicted vs measured, within 10 %
        assert m("lidar", f"predicted_{key}") == pytest.approx(m("lidar", key), rel=0.1)
    assert abs(m("lidar", "predicted_hit_agreement") - m("lidar", "hit_agreement")) < 0.005
    explained = report["explained"]["lidar"]
    assert [a.get("column") for a in explained["anomalies"]] == [45]
    assert explained["anomalies"][0]["hypothesis_reproduced"] > 0.8
    assert "rolling shutter" in " ".join(report["notes"])
    md = (cmp / "compare.md").read_text()
    assert "Anomaly: column 45 (azimuth 45 deg)" in md
    # the driven vehicle: Gazebo's IMU feels the trajectory's motion
    for axis in "xyz":
        assert m("imu", f"accel_diff_maxabs_{axis}") < 0.01
        assert m("imu", f"gyro_diff_maxabs_{axis}") < 1e-4
    for axis in "enu":
        assert m("gnss", f"position_diff_maxabs_{axis}") < 0.01
    for axis in ("x", "y"):
        assert m("odom", f"pose_diff_maxabs_{axis}") < 1e-3
    assert m("camera", "depth_finite_agreement") > 0.95
    assert abs(m("camera", "depth_diff_bias")) < 0.05


@pytest.mark.gazebo
def test_server_failure_keeps_the_log(tmp_path) -> None:
    """A server that cannot load its world: one EngineError naming a log that still exists."""
    from simconform.adapters.base import EngineError

    sdf = tmp_path / "broken.sdf"
    sdf.write_text("<sdf version='1.10'><world name='w'><model name='m'><link name='l'>")
    log = tmp_path / "kept" / "server.log"
    log.parent.mkdir()
    with pytest.raises(EngineError) as err:
        transport.GzSession(sdf, "w", timeout_s=20, log_path=log)
    assert str(log) in str(err.value)
    assert log.is_file() and log.stat().st_size > 0


@pytest.mark.gazebo
def test_ctrl_c_at_a_terminal_interrupts_a_gazebo_run(tmp_path) -> None:
    """A terminal's Ctrl-C goes to the whole foreground process group. The server shared it,
    died at once, and the run waited 30 s for it, then said "engine error" (exit 3, state
    failed, no report); the server now has a session of its own and the run stops as it does
    on any other backend."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import default_sigint

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", "run", "--backend", "gazebo",
         "--spec", "sensors_spec/rover_core.yaml", "--duration", "30", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_sigint,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while not (out / "gazebo" / "server.log").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # the server is starting or taking its first steps (seen: 6 s into a run)
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 25, err  # not the 30 s wait for a dead server
    assert "engine error" not in err and "Traceback" not in err, err
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["state"] == "interrupted" and manifest["stopped_by"] == "SIGINT"
    assert (out / "report" / "report.json").is_file()


@pytest.mark.gazebo
def test_interrupted_gazebo_run_keeps_what_it_recorded(tmp_path) -> None:
    """SIGTERM during a Gazebo run: exit 143, a readable bag verified up to the stop, run.json
    incomplete, the server's log kept, and no gz server left running."""
    import json
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", "run", "--backend", "gazebo",
         "--spec", "sensors_spec/rover_core.yaml", "--duration", "30", "--out", str(out)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    gt = out / "gt" / "base_link.tum"  # its first buffer reaches the disk once poses flow
    while not (gt.exists() and gt.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["complete"] is False and manifest["stopped_by"] == "SIGTERM"
    assert 0 < manifest["captures"]["imu"] < 3000
    assert json.loads((out / "report" / "report.json").read_text())["run"]["complete"] is False
    assert (out / "gazebo" / "server.log").is_file()
    assert not _servers_of(proc.pid), "gz processes still running"


def _servers_of(run_pid: int) -> list[str]:
    """The pids of processes in a run's own Gazebo partition, GZ_PARTITION=simconform_<pid>_."""
    mark = f"GZ_PARTITION=simconform_{run_pid}_".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in env.read_bytes():
                found.append(env.parent.name)
        except OSError:  # gone, or not ours to read
            pass
    return found


@pytest.mark.gazebo
def test_sigkilled_gazebo_run_takes_its_server_along(tmp_path) -> None:
    """SIGKILL of a run while its server steps (in a session of its own since Ctrl-C must not
    reach it): the kernel's parent-death signal ends the server at once, no orphan is left."""
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simconform.cli", "run", "--backend", "gazebo",
         "--spec", "sensors_spec/rover_core.yaml", "--duration", "30", "--out", str(out)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    gt = out / "gt" / "base_link.tum"  # poses flow: the server is up and stepping
    while not (gt.exists() and gt.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _servers_of(proc.pid), "no gz server found while the run recorded"
    proc.kill()
    proc.wait(timeout=10)
    killed = time.monotonic()
    while _servers_of(proc.pid) and time.monotonic() - killed < 5:
        time.sleep(0.05)
    assert not _servers_of(proc.pid), "the gz server outlived its killed run by 5 s"

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
from simconform.run import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
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
    path = sdf.write_sdf(WORLD, SPEC, out)
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


def _sensors(root: ET.Element) -> dict[str, ET.Element]:
    link = root.find(f"world/model[@name='{sdf.VEHICLE}']/link")
    return {s.get("name"): s for s in link.findall("sensor")}


@pytest.mark.parametrize("spec", [SPEC, VLP16], ids=["rover", "vlp16"])
def test_sdf_sensors_round_trip_the_spec(spec) -> None:
    root = ET.fromstring(sdf.world_to_sdf(WORLD, spec))
    sensors = _sensors(root)
    gz_types = {"lidar": "gpu_lidar", "camera": "camera", "imu": "imu", "gnss": "navsat"}
    assert set(sensors) == {n for n, s in spec.sensors.items() if s.type in gz_types}
    assert not root.findall(".//noise"), "Gazebo must add no noise of its own"
    for name, el in sensors.items():
        s = spec.sensors[name]
        assert el.get("type") == gz_types[s.type]
        assert float(el.findtext("update_rate")) == s.rate_hz
        assert el.findtext("topic") == sdf.gz_topic(name)
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
            assert c.findtext("image/format") == "R8G8B8"
            assert math.isclose(math.degrees(float(c.findtext("horizontal_fov"))), s.hfov_deg)
            assert 0 < float(c.findtext("clip/near")) < float(c.findtext("clip/far"))
        elif isinstance(s, ImuSpec):
            assert el.find("imu") is not None
        elif isinstance(s, GnssSpec):
            assert el.find("navsat") is not None


def test_bridge_yaml_and_export_command(tmp_path) -> None:
    import typer
    from typer.testing import CliRunner

    entries = yaml.safe_load(sdf.bridge_yaml(SPEC))
    by_ros = {e["ros_topic_name"]: e for e in entries}
    assert by_ros["/lidar/points"]["gz_topic_name"] == "/simconform/lidar/points"
    assert by_ros["/lidar/points"]["gz_type_name"] == "gz.msgs.PointCloudPacked"
    assert by_ros["/imu"]["ros_type_name"] == "sensor_msgs/msg/Imu"
    assert by_ros["/gps/fix"]["gz_type_name"] == "gz.msgs.NavSat"
    assert by_ros["/camera/image"]["gz_topic_name"] == "/simconform/camera"
    assert "/clock" in by_ros
    assert all(e["direction"] == "GZ_TO_ROS" for e in entries)
    app = typer.Typer()
    app.command("export-sdf")(sdf.export_sdf_command)
    app.command("noop")(lambda: None)  # two commands: keep the sub-command name
    res = CliRunner().invoke(app, ["export-sdf", "--out", str(tmp_path), "--bridge"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / f"{WORLD.name}.sdf").is_file() and (tmp_path / "bridge.yaml").is_file()
    assert list((tmp_path / "meshes").glob("*.obj"))


# ------------------------------------------------------------------ gz.msgs10 messages


def _message_classes() -> dict:
    try:
        from gz.msgs10 import image_pb2, imu_pb2, laserscan_pb2, navsat_pb2, pointcloud_packed_pb2

        return {
            "LaserScan": laserscan_pb2.LaserScan,
            "Image": image_pb2.Image,
            "IMU": imu_pb2.IMU,
            "NavSat": navsat_pb2.NavSat,
            "PointCloudPacked": pointcloud_packed_pb2.PointCloudPacked,
        }
    except ImportError:
        pass
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    from google.protobuf import descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    D, I64, I32, U32, STR, BYTES, BOOL, MSG, ENUM = (
        F.TYPE_DOUBLE, F.TYPE_INT64, F.TYPE_INT32, F.TYPE_UINT32, F.TYPE_STRING, F.TYPE_BYTES,
        F.TYPE_BOOL, F.TYPE_MESSAGE, F.TYPE_ENUM,
    )  # fmt: skip
    # field numbers from gz-msgs 10 proto/gz/msgs/{time,header,vector3d,quaternion,laserscan,
    # image,imu,navsat,pointcloud_packed}.proto
    schema = {
        "Time": [("sec", 1, I64), ("nsec", 2, I32)],
        "Header": [("stamp", 1, MSG, ".gz.msgs.Time")],
        "Vector3d": [("header", 1, MSG, ".gz.msgs.Header"), ("x", 2, D), ("y", 3, D), ("z", 4, D)],
        "Quaternion": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("x", 2, D), ("y", 3, D), ("z", 4, D),
            ("w", 5, D),
        ],
        "LaserScan": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("frame", 2, STR), ("angle_min", 4, D),
            ("angle_max", 5, D), ("angle_step", 6, D), ("range_min", 7, D), ("range_max", 8, D),
            ("count", 9, U32), ("vertical_angle_min", 10, D), ("vertical_angle_max", 11, D),
            ("vertical_angle_step", 12, D), ("vertical_count", 13, U32),
            ("ranges", 14, D, None, True), ("intensities", 15, D, None, True),
        ],
        "Image": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("width", 2, U32), ("height", 3, U32),
            ("step", 4, U32), ("data", 5, BYTES), ("pixel_format_type", 6, U32),
        ],
        "IMU": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("entity_name", 2, STR),
            ("orientation", 3, MSG, ".gz.msgs.Quaternion"),
            ("angular_velocity", 5, MSG, ".gz.msgs.Vector3d"),
            ("linear_acceleration", 7, MSG, ".gz.msgs.Vector3d"),
        ],
        "NavSat": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("latitude_deg", 2, D),
            ("longitude_deg", 3, D), ("altitude", 4, D), ("frame_id", 8, STR),
        ],
        "PointField": [("name", 1, STR), ("offset", 2, U32), ("datatype", 3, U32),
                       ("count", 4, U32)],
        "PointCloudPacked": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("field", 2, MSG, ".gz.msgs.PointField", True),
            ("height", 3, U32), ("width", 4, U32), ("is_bigendian", 5, BOOL),
            ("point_step", 6, U32), ("row_step", 7, U32), ("data", 8, BYTES),
            ("is_dense", 9, BOOL),
        ],
    }  # fmt: skip
    del ENUM  # enums are varints on the wire: uint32 stands in for them
    fd = descriptor_pb2.FileDescriptorProto(
        name="simconform_test_gz_msgs.proto", package="gz.msgs", syntax="proto3"
    )
    for mname, fields in schema.items():
        m = fd.message_type.add(name=mname)
        for name, num, typ, *rest in fields:
            type_name = rest[0] if rest else None
            repeated = len(rest) > 1 and rest[1]
            f = m.field.add(name=name, number=num, type=typ)
            f.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
            if type_name:
                f.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"gz.msgs.{n}"))
        for n in ("LaserScan", "Image", "IMU", "NavSat", "PointCloudPacked")
    }


@pytest.fixture(scope="module")
def msgs() -> dict:
    return _message_classes()


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


class _FakeSession:
    """Stands in for GzSession: records teleports and steps, and 'publishes' a message for
    every sensor whose update falls on the sim time a step reaches (as Gazebo's sensors do)."""

    def __init__(self, msgs: dict, spec, calls: list) -> None:
        self.msgs, self.spec, self.calls = msgs, spec, calls
        self.sim_ns, self.inbox, self.kind = 0, {}, {}
        self.pose = None

    def subscribe(self, topic: str, msg_class) -> None:
        name = topic.rsplit("/", 1)[-1]
        self.kind[topic] = (name, msg_class)
        self.inbox[topic] = {}

    def set_pose(self, model: str, xyz, quat) -> None:
        self.calls.append(("set_pose", model, np.asarray(xyz).copy()))
        self.pose = np.asarray(xyz).copy()

    def step(self, n: int) -> None:
        self.calls.append(("step", n))
        self.sim_ns += n * 1_000_000
        for topic, (name, cls) in self.kind.items():
            if self.sim_ns % round(1e9 / self.spec.sensors[name].rate_hz):
                continue
            m = cls()
            _stamp(m, self.sim_ns)
            if name == "lidar":
                m.count, m.vertical_count, m.range_min, m.range_max = 360, 16, 0.3, 100.0
                m.angle_max, m.vertical_angle_min, m.vertical_angle_max = 6.2, -0.26, 0.26
                m.ranges.extend([self.pose[0]] * 360 * 16)  # range = x of the teleport
            elif name == "gnss":
                o = WORLD.origin
                m.latitude_deg, m.longitude_deg, m.altitude = pymap3d.enu2geodetic(
                    *self.pose, o.lat, o.lon, o.alt
                )
            self.inbox[topic][self.sim_ns] = m.SerializeToString()

    def wait_stamp(self, topic: str, stamp_ns: int, timeout_s: float = 1.0) -> None:
        assert stamp_ns in self.inbox[topic], (topic, stamp_ns, sorted(self.inbox[topic]))

    def wait_for(self, topic: str, stamp_ns: int, timeout_s: float = 1.0) -> bytes:
        self.wait_stamp(topic, stamp_ns)
        return self.inbox[topic].pop(stamp_ns)

    def close(self) -> None:
        self.calls.append(("close",))


def test_backend_steps_teleports_and_stamps(msgs, monkeypatch, tmp_path) -> None:
    """GazeboBackend's driving logic against a fake server: T0, step sizes, teleport before
    each step, captures served by sim-time stamp in any sensor order."""
    import sys
    import types

    from simconform.adapters.gazebo import backend as gzb
    from simconform.trajectory import load_trajectory

    spec = load_spec(REPO / "sensors_spec" / "rover.yaml")
    spec = spec.model_copy(
        update={"sensors": {k: v for k, v in spec.sensors.items() if k in ("lidar", "gnss")}}
    )
    pkg = types.ModuleType("gz.msgs10")
    monkeypatch.setitem(sys.modules, "gz", types.ModuleType("gz"))
    monkeypatch.setitem(sys.modules, "gz.msgs10", pkg)
    for mod, cls in (("laserscan_pb2", "LaserScan"), ("navsat_pb2", "NavSat")):
        m = types.ModuleType(f"gz.msgs10.{mod}")
        setattr(m, cls, msgs[cls])
        monkeypatch.setitem(sys.modules, f"gz.msgs10.{mod}", m)
    calls: list = []
    monkeypatch.setattr(gzb, "unavailable_message", lambda: None)
    monkeypatch.setattr(gzb, "GzSession", lambda sdf_path, world: _FakeSession(msgs, spec, calls))
    traj = load_trajectory(DEMO_TRAJECTORY, WORLD)
    b = gzb.GazeboBackend()
    b.open(WORLD, spec)
    t = traj.start_ns + np.arange(1, 4) * 100_000_000
    gnss = b.capture_batch("gnss", t[:2], traj)  # GNSS first, then lidar, then GNSS again
    lidar = b.capture_batch("lidar", t, traj)
    gnss += b.capture_batch("gnss", t[2:], traj)
    b.close()
    t0 = gzb.sim_offset_ns(traj.start_ns)
    steps = [c for c in calls if c[0] == "step"]
    # the walk starts at the first capture of the run (trajectory start), 1 s after T0
    assert traj.start_ns - t0 == 1_000_000_000 and steps[0][1] == 1000
    assert [c[1] for c in steps[1:]] == [100] * 3
    kinds = [c[0] for c in calls if c[0] != "close"]
    assert kinds == ["set_pose", "step"] * 4  # a teleport before every step
    for k, tt in enumerate(t):
        p = traj.pose_at(int(tt))
        np.testing.assert_allclose(calls[2 * (k + 1)][2], p.t)
        np.testing.assert_allclose(np.nanmax(lidar[k].ranges), p.t[0])
        np.testing.assert_allclose(gnss[k].enu, p.t, atol=1e-6)
    assert calls[-1] == ("close",)


# ------------------------------------------------------------------ real Gazebo


@pytest.mark.gazebo
@pytest.mark.skipif(
    transport.unavailable_message() is not None,
    reason=f"Gazebo Harmonic not installed: {transport.unavailable_message()}",
)
def test_gazebo_against_reference_5s() -> None:
    """5 s of the demo through a real gz-sim 8 server, lidar and GNSS compared with the
    reference backend at the same captures (camera/IMU: decoded and shaped only)."""
    from simconform.adapters.reference import ReferenceBackend
    from simconform.pipeline.schedule import capture_times
    from simconform.trajectory import load_trajectory

    traj = load_trajectory(DEMO_TRAJECTORY, WORLD)
    end = min(traj.end_ns, traj.start_ns + 5_000_000_000)
    ref, gz = ReferenceBackend(), GazeboBackend()
    ref.open(WORLD, SPEC)
    gz.open(WORLD, SPEC)
    try:
        lidar: LidarSpec = SPEC.sensors["lidar"]
        diffs = []
        for t in capture_times(lidar.rate_hz, traj.start_ns, end)[::5]:
            a, b = gz.capture("lidar", int(t), traj), ref.capture("lidar", int(t), traj)
            both = np.isfinite(a.ranges) & np.isfinite(b.ranges)
            assert both.mean() > 0.5
            diffs.append(a.ranges[both] - b.ranges[both])
        d = np.concatenate(diffs)
        assert abs(np.median(d)) < 0.05, np.median(d)  # rolling vs global shutter, depth quant.
        for t in capture_times(10.0, traj.start_ns, end)[::10]:
            g = gz.capture("gnss", int(t), traj).enu
            np.testing.assert_allclose(g, ref.capture("gnss", int(t), traj).enu, atol=0.05)
        cam = gz.capture("camera", int(capture_times(10.0, traj.start_ns, end)[-1]), traj)
        assert cam.image.shape == (480, 640, 3)
    finally:
        gz.close()
        ref.close()

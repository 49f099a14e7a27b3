"""World + spec -> an SDF 1.10 world for Gazebo Harmonic (gz-sim 8), and a ros_gz_bridge YAML.

Element names and nesting follow sdformat's sdf/1.10/*.sdf definitions (world, model, link,
visual, geometry, material, sensor, lidar, camera, imu, navsat, plugin,
spherical_coordinates). Choices that matter for a fair comparison:

- Every world object is a static model with one visual (gpu_lidar and camera are rendered, so
  visuals are what they see; nothing collides, so no collisions). Colours go to
  <ambient>/<diffuse>, reflectivity to <laser_retro> (the gpu_lidar intensity).
- A plane becomes a finite <plane> visual of PLANE_SIZE metres (ogre2 has no infinite plane).
- Meshes are written as OBJ files in map coordinates under meshes/ next to the SDF and
  referenced with a relative <uri> (sdformat resolves it against the SDF file's directory).
- The vehicle is one non-static model with gravity off, unit mass and isotropic unit inertia at
  its origin, and no collision. For a backend run (`driver=True`) it carries simconform's
  Python system (driver_system.py, through gz-sim's PythonSystemLoader), which moves it with
  velocities and wrenches so Gazebo's IMU feels the motion (drive.py). Sensors sit at the
  spec's mounts, in the link frame.
- Each actor is a non-static model (`actor_model`) of one link without collision or gravity,
  its visual the actor's shape; the driver system sets its pose every physics step.
- A camera with `depth: true` gets a second, `depth_camera` sensor at the same mount with the
  same geometry, publishing 32-bit float z-depth on <topic>/depth.
- By default no Gazebo noise anywhere: no <noise> element is written (SDF's default noise type
  is none), and no IMU/NavSat noise either, so only simconform's seeded pipeline adds error.
  With `engine_noise=True` (`simconform run --noise engine`) the spec's error model is written
  as each sensor's SDF <noise> (`engine_noise_plan` says what and in which units), and every
  noisy sensor gets a noiseless twin `<name>_truth` at the same mount on `<topic>/truth`, whose
  output is the run's truth.
- Lidar vertical beams: SDF only has samples + min/max angle (evenly spaced). Explicit
  `rings.angles_deg` are written as their min/max with their count; for non-uniform angles
  (e.g. a real sensor's table) the beams Gazebo casts then differ from the spec's.
- Lidar azimuth: spec column c looks at 2*pi*c/columns, so min_angle 0 and
  max_angle 2*pi*(columns-1)/columns (Gazebo's step is (max-min)/(samples-1)).
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import yaml

from simconform.adapters.gazebo.noise import add_engine_noise, engine_noise_values
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, Spec
from simconform.world import Actor, Box, Cylinder, Mesh, Origin, Plane, Sphere, World

SDF_VERSION = "1.10"
VEHICLE = "simconform_vehicle"
VEHICLE_LINK = "base_link"
PLANE_SIZE = 2000.0
PHYSICS_STEP_S = 0.001
VEHICLE_MASS = 1.0  # kg; with VEHICLE_INERTIA the drive table's forces and torques
VEHICLE_INERTIA = 1.0  # kg m^2 about every axis (isotropic: no gyroscopic torque)
PYTHON_SYSTEM = ("gz-sim-python-system-loader-system", "gz::sim::systems::PythonSystemLoader")
CAMERA_NEAR_M = 0.05
CAMERA_FAR_M = 1000.0

# (filename, C++ class) of the gz-sim 8 systems the sensors and the backend need
SYSTEMS = (
    ("gz-sim-physics-system", "gz::sim::systems::Physics"),
    ("gz-sim-user-commands-system", "gz::sim::systems::UserCommands"),
    ("gz-sim-scene-broadcaster-system", "gz::sim::systems::SceneBroadcaster"),
    ("gz-sim-sensors-system", "gz::sim::systems::Sensors"),
    ("gz-sim-imu-system", "gz::sim::systems::Imu"),
    ("gz-sim-navsat-system", "gz::sim::systems::NavSat"),
)

# gz message type and ROS type per sensor type, as ros_gz_bridge maps them
BRIDGE_TYPES = {
    "lidar": ("gz.msgs.PointCloudPacked", "sensor_msgs/msg/PointCloud2"),
    "camera": ("gz.msgs.Image", "sensor_msgs/msg/Image"),
    "imu": ("gz.msgs.IMU", "sensor_msgs/msg/Imu"),
    "gnss": ("gz.msgs.NavSat", "sensor_msgs/msg/NavSatFix"),
}


def _num(x: float) -> str:
    return repr(float(x))


def _vec(v) -> str:
    return " ".join(_num(x) for x in np.ravel(v))


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrib: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrib)
    if text is not None:
        el.text = text
    return el


def gz_topic(sensor: str) -> str:
    """Gazebo topic of a sensor; gpu_lidar also publishes its cloud on <topic>/points."""
    return f"/simconform/{sensor}"


def depth_topic(sensor: str) -> str:
    """Gazebo topic of a camera's depth_camera twin (its cloud: <topic>/points)."""
    return f"{gz_topic(sensor)}/depth"


TWIN_SUFFIX = "_truth"  # --noise engine: the noiseless twin of a noisy sensor


def twin_topic(sensor: str) -> str:
    """Gazebo topic of the noiseless twin of a noisy sensor (--noise engine)."""
    return f"{gz_topic(sensor)}/truth"


def model_names(world: World) -> list[str]:
    """One unique model name per world object: its name, else f"obj{i}"."""
    names, taken = [], {VEHICLE}
    for i, obj in enumerate(world.objects):
        name = re.sub(r"[^A-Za-z0-9_]", "_", obj.name) if obj.name else f"obj{i}"
        if name in taken:
            name = f"{name}_obj{i}"
        taken.add(name)
        names.append(name)
    return names


def mesh_files(world: World) -> dict[str, str]:
    """Relative path -> OBJ text for every mesh object (map-frame vertices), then every mesh
    actor (vertices in the actor's frame)."""
    out = {}
    for i, (obj, name) in enumerate(zip(world.objects, model_names(world))):
        if isinstance(obj, Mesh):
            what = f"{name}: world object {i}, map frame (ENU), metres"
            out[f"meshes/{name}.obj"] = _obj_text(world.mesh_triangles(i), what)
    for a, actor in enumerate(world.actors):
        if isinstance(actor.shape, Mesh):
            tri = world.mesh_triangles(len(world.objects) + a)
            what = f"{actor.name}: actor {a}, the actor's frame, metres"
            out[f"meshes/{actor_model(a)}.obj"] = _obj_text(tri, what)
    return out


def _obj_text(tri: np.ndarray, what: str) -> str:
    vert, inv = np.unique(tri.reshape(-1, 3), axis=0, return_inverse=True)
    faces = inv.reshape(-1, 3) + 1
    lines = [f"# {what}"]
    lines += [f"v {_vec(v)}" for v in vert]
    lines += [f"f {a} {b} {c}" for a, b, c in faces]
    return "\n".join(lines) + "\n"


def _object_model(world_el: ET.Element, obj, name: str, mesh_uri: str | None) -> None:
    model = _sub(world_el, "model", name=name)
    _sub(model, "static", "true")
    if isinstance(obj, Plane):
        pose = (*obj.point, 0.0, 0.0, 0.0)
    elif isinstance(obj, Box | Cylinder):
        pose = (*obj.center, *obj.rpy)
    elif isinstance(obj, Sphere):
        pose = (*obj.center, 0.0, 0.0, 0.0)
    else:  # mesh vertices are already in the map frame
        pose = (0.0,) * 6
    _sub(model, "pose", _vec(pose))
    _visual(_sub(model, "link", name="link"), obj, mesh_uri)


def actor_model(a: int) -> str:
    """Gazebo model name of actor a."""
    return f"simconform_actor{a}"


def _actor_model(world_el: ET.Element, a: int, actor: Actor, mesh_uri: str | None) -> None:
    """A moved model: one link without collisions or gravity whose visual is the actor's shape
    (at its pose in the actor's frame); the driver system (driver_system.py) sets the model's
    pose on every physics step, so sensors render it where the actor is."""
    model = _sub(world_el, "model", name=actor_model(a))
    x, y, z = actor.path[0][1:4]
    _sub(model, "pose", _vec((x, y, z, 0.0, 0.0, actor.path[0][4])))
    link = _sub(model, "link", name="link")
    _sub(link, "gravity", "false")
    shape = actor.shape
    if isinstance(shape, Box | Cylinder):
        pose = (*shape.center, *shape.rpy)
    elif isinstance(shape, Sphere):
        pose = (*shape.center, 0.0, 0.0, 0.0)
    else:  # the mesh file's vertices are already in the actor's frame
        pose = (0.0,) * 6
    _visual(link, shape, mesh_uri, pose)


def _visual(link: ET.Element, obj, mesh_uri: str | None, pose=None) -> None:
    visual = _sub(link, "visual", name="visual")
    if pose is not None:
        _sub(visual, "pose", _vec(pose))
    _sub(visual, "laser_retro", _num(obj.reflectivity))
    geom = _sub(visual, "geometry")
    if isinstance(obj, Plane):
        p = _sub(geom, "plane")
        _sub(p, "normal", _vec(obj.normal))
        _sub(p, "size", _vec((PLANE_SIZE, PLANE_SIZE)))
    elif isinstance(obj, Box):
        _sub(_sub(geom, "box"), "size", _vec(obj.size))
    elif isinstance(obj, Cylinder):
        c = _sub(geom, "cylinder")
        _sub(c, "radius", _num(obj.radius))
        _sub(c, "length", _num(obj.length))
    elif isinstance(obj, Sphere):
        _sub(_sub(geom, "sphere"), "radius", _num(obj.radius))
    elif isinstance(obj, Mesh):
        _sub(_sub(geom, "mesh"), "uri", mesh_uri)
    else:  # pragma: no cover - the World model admits no other type
        raise TypeError(f"unsupported world object {type(obj).__name__}")
    mat = _sub(visual, "material")
    rgba = _vec((*obj.color, 1.0))
    _sub(mat, "ambient", rgba)
    _sub(mat, "diffuse", rgba)
    _sub(mat, "specular", "0 0 0 1")


def _lidar(sensor: ET.Element, s: LidarSpec) -> None:
    lidar = _sub(sensor, "lidar")
    scan = _sub(lidar, "scan")
    h = _sub(scan, "horizontal")
    _sub(h, "samples", str(s.columns))
    _sub(h, "resolution", "1")
    _sub(h, "min_angle", _num(0.0))
    _sub(h, "max_angle", _num(2 * math.pi * (s.columns - 1) / s.columns))
    el = s.rings.elevations()
    v = _sub(scan, "vertical")
    _sub(v, "samples", str(len(el)))
    _sub(v, "resolution", "1")
    _sub(v, "min_angle", _num(el.min()))
    _sub(v, "max_angle", _num(el.max()))
    r = _sub(lidar, "range")
    _sub(r, "min", _num(s.range.min))
    _sub(r, "max", _num(s.range.max))
    _sub(r, "resolution", _num(0.0))  # 0: no quantisation by gz-sensors (only the GPU's)


def _camera(sensor: ET.Element, name: str, s: CameraSpec, depth: bool = False) -> None:
    cam = _sub(sensor, "camera", name=name)
    fx, fy, cx, cy = s.k()
    _sub(cam, "horizontal_fov", _num(2 * math.atan(0.5 * s.width / fx)))
    img = _sub(cam, "image")
    _sub(img, "width", str(s.width))
    _sub(img, "height", str(s.height))
    _sub(img, "format", "R_FLOAT32" if depth else "R8G8B8")
    _sub(img, "anti_aliasing", "0")
    clip = _sub(cam, "clip")
    _sub(clip, "near", _num(CAMERA_NEAR_M))
    _sub(clip, "far", _num(CAMERA_FAR_M))
    if s.intrinsics is not None:  # only then: hfov alone is exact for the square, centred case
        intr = _sub(_sub(cam, "lens"), "intrinsics")
        for tag, val in (("fx", fx), ("fy", fy), ("cx", cx), ("cy", cy), ("s", 0.0)):
            _sub(intr, tag, _num(val))


def _sensor(link: ET.Element, name: str, gz_type: str, s, topic: str) -> ET.Element:
    sensor = _sub(link, "sensor", name=name, type=gz_type)
    _sub(sensor, "pose", _vec((*s.mount.xyz, *s.mount.rpy)))
    _sub(sensor, "always_on", "true")
    _sub(sensor, "update_rate", _num(s.rate_hz))
    _sub(sensor, "visualize", "false")
    _sub(sensor, "topic", topic)
    return sensor


def _vehicle(
    world_el: ET.Element,
    spec: Spec,
    driver: bool,
    engine_noise: bool = False,
    origin: Origin | None = None,
) -> None:
    model = _sub(world_el, "model", name=VEHICLE)
    _sub(model, "static", "false")
    _sub(model, "pose", _vec((0.0,) * 6))
    link = _sub(model, "link", name=VEHICLE_LINK)
    _sub(link, "gravity", "false")  # the drive table's wrench carries the whole acceleration
    inertial = _sub(link, "inertial")
    _sub(inertial, "pose", _vec((0.0,) * 6))
    _sub(inertial, "mass", _num(VEHICLE_MASS))
    inertia = _sub(inertial, "inertia")
    for tag in ("ixx", "iyy", "izz"):
        _sub(inertia, tag, _num(VEHICLE_INERTIA))
    for tag in ("ixy", "ixz", "iyz"):
        _sub(inertia, tag, _num(0.0))
    for name, s in spec.sensors.items():
        kind = {LidarSpec: "gpu_lidar", CameraSpec: "camera", ImuSpec: "imu", GnssSpec: "navsat"}
        gz_type = kind.get(type(s))
        if gz_type is None:  # odometry has no Gazebo sensor: the backend reads the link pose
            continue
        noisy = engine_noise and bool(engine_noise_values(s, origin))
        # with engine noise, the noiseless twin at the same mount gives the truth
        for sname, topic in ((name, gz_topic(name)),) + (
            ((name + TWIN_SUFFIX, twin_topic(name)),) if noisy else ()
        ):
            sensor = _sensor(link, sname, gz_type, s, topic)
            if isinstance(s, LidarSpec):
                _lidar(sensor, s)
            elif isinstance(s, CameraSpec):
                _camera(sensor, sname, s)
            elif isinstance(s, ImuSpec):
                imu = _sub(sensor, "imu")
                _sub(imu, "enable_orientation", "true")
            elif isinstance(s, GnssSpec):
                _sub(sensor, "navsat")
            if noisy and sname == name:
                add_engine_noise(sensor, s, origin)
        if isinstance(s, CameraSpec) and s.depth:
            twin = _sensor(link, f"{name}_depth", "depth_camera", s, depth_topic(name))
            _camera(twin, f"{name}_depth", s, depth=True)
    if driver:
        from simconform.adapters.gazebo.driver_system import MODULE_NAME

        plugin = _sub(model, "plugin", filename=PYTHON_SYSTEM[0], name=PYTHON_SYSTEM[1])
        _sub(plugin, "module_name", MODULE_NAME)


def world_to_sdf(world: World, spec: Spec, driver: bool = False, engine_noise: bool = False) -> str:
    """SDF 1.10 XML of the world, its systems and the spec's vehicle (meshes: `mesh_files`);
    `driver` adds simconform's drive system to the vehicle (backend runs only); `engine_noise`
    writes the spec's noise as SDF <noise> plus a noiseless twin per noisy sensor."""
    root = ET.Element("sdf", version=SDF_VERSION)
    w = _sub(root, "world", name=world.name)
    physics = _sub(w, "physics", name="simconform", type="ignored")
    _sub(physics, "max_step_size", _num(PHYSICS_STEP_S))
    _sub(physics, "real_time_factor", _num(0.0))  # as fast as possible (stepped anyway)
    gravity = next((s.gravity for s in spec.sensors.values() if isinstance(s, ImuSpec)), 9.80665)
    _sub(w, "gravity", _vec((0.0, 0.0, -gravity)))
    for filename, cls in SYSTEMS:
        plugin = _sub(w, "plugin", filename=filename, name=cls)
        if filename == "gz-sim-sensors-system":
            _sub(plugin, "render_engine", "ogre2")
    scene = _sub(w, "scene")
    _sub(scene, "ambient", _vec((world.light.ambient,) * 3 + (1.0,)))
    _sub(scene, "background", _vec((*world.sky_color, 1.0)))
    _sub(scene, "shadows", "false")
    _sub(scene, "grid", "false")
    light = _sub(w, "light", name="sun", type="directional")
    _sub(light, "cast_shadows", "false")
    _sub(light, "diffuse", _vec((world.light.diffuse,) * 3 + (1.0,)))
    _sub(light, "specular", "0 0 0 1")
    d = np.asarray(world.light.direction, dtype=float)
    _sub(light, "direction", _vec(d / np.linalg.norm(d)))
    sc = _sub(w, "spherical_coordinates")
    _sub(sc, "surface_model", "EARTH_WGS84")
    _sub(sc, "world_frame_orientation", "ENU")
    _sub(sc, "latitude_deg", _num(world.origin.lat))
    _sub(sc, "longitude_deg", _num(world.origin.lon))
    _sub(sc, "elevation", _num(world.origin.alt))
    _sub(sc, "heading_deg", _num(0.0))
    meshes = iter(mesh_files(world))
    for obj, name in zip(world.objects, model_names(world)):
        _object_model(w, obj, name, next(meshes) if isinstance(obj, Mesh) else None)
    for a, actor in enumerate(world.actors):
        _actor_model(w, a, actor, next(meshes) if isinstance(actor.shape, Mesh) else None)
    _vehicle(w, spec, driver, engine_noise, world.origin)
    ET.indent(root, "  ")
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def sdf_name(world: World) -> str:
    """The SDF file's name in the folder write_sdf fills."""
    return f"{world.name}.sdf"


def write_sdf(
    world: World, spec: Spec, out: Path, driver: bool = False, engine_noise: bool = False
) -> Path:
    """Write OUT/<world>.sdf and its meshes; returns the SDF path."""
    out.mkdir(parents=True, exist_ok=True)
    for rel, text in mesh_files(world).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    path = out / sdf_name(world)
    path.write_text(world_to_sdf(world, spec, driver, engine_noise))
    return path


def bridge_entries(spec: Spec) -> list[dict[str, str]]:
    """ros_gz_bridge parameter_bridge entries, Gazebo -> ROS, for the spec's Gazebo sensors.

    ROS topics are the spec's topic names (lidar: the PointCloud2 cloud on <gz topic>/points)
    plus /clock, so the bag can be replayed with `simconform replay`.
    """
    entries = [
        {
            "ros_topic_name": "/clock",
            "gz_topic_name": "/clock",
            "ros_type_name": "rosgraph_msgs/msg/Clock",
            "gz_type_name": "gz.msgs.Clock",
            "direction": "GZ_TO_ROS",
        }
    ]
    for name, s in spec.sensors.items():
        if s.type not in BRIDGE_TYPES:
            continue
        gz_type, ros_type = BRIDGE_TYPES[s.type]
        topic = gz_topic(name)
        gz_name = f"{topic}/points" if s.type == "lidar" else topic
        ros_name = f"{spec.topic(name)}/image" if s.type == "camera" else spec.topic(name)
        pairs = [(ros_name, gz_name)]
        if isinstance(s, CameraSpec) and s.depth:  # 32FC1 z-depth (REP 118)
            pairs.append((f"{spec.topic(name)}/depth", depth_topic(name)))
        for ros, gz in pairs:
            entries.append(
                {
                    "ros_topic_name": ros,
                    "gz_topic_name": gz,
                    "ros_type_name": ros_type,
                    "gz_type_name": gz_type,
                    "direction": "GZ_TO_ROS",
                }
            )
    return entries


def bridge_yaml(spec: Spec) -> str:
    """The parameter_bridge config file (`ros2 run ros_gz_bridge parameter_bridge --ros-args
    -p config_file:=bridge.yaml`)."""
    return yaml.safe_dump(bridge_entries(spec), sort_keys=False)

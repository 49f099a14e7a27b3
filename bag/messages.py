"""ROS 2 messages (rosbags' Jazzy type store) built from samples, and decoded back to arrays.

Lidar clouds are written in bag/cloud.py, in the layout of the driver the spec names;
`cloud_arrays` reads any PointCloud2 back.
"""

from __future__ import annotations

import math

import numpy as np
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from simconform.adapters.base import ImuTruth, OdomTruth

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
# vision_msgs (ROS 2, 4.x) is not in rosbags' store: its definitions, field for field, so that
# /truth/objects is written (and embedded in MCAP) as the package defines it
_VISION_MSGS = {
    "vision_msgs/msg/ObjectHypothesis": "string class_id\nfloat64 score\n",
    "vision_msgs/msg/ObjectHypothesisWithPose": (
        "vision_msgs/ObjectHypothesis hypothesis\ngeometry_msgs/PoseWithCovariance pose\n"
    ),
    "vision_msgs/msg/BoundingBox3D": "geometry_msgs/Pose center\ngeometry_msgs/Vector3 size\n",
    "vision_msgs/msg/Detection3D": (
        "std_msgs/Header header\nvision_msgs/ObjectHypothesisWithPose[] results\n"
        "vision_msgs/BoundingBox3D bbox\nstring id\n"
    ),
    "vision_msgs/msg/Detection3DArray": (
        "std_msgs/Header header\nvision_msgs/Detection3D[] detections\n"
    ),
}
for _name, _text in _VISION_MSGS.items():
    TYPESTORE.register(get_types_from_msg(_text, _name))
T = TYPESTORE.types

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
IMU = "sensor_msgs/msg/Imu"
NAVSATFIX = "sensor_msgs/msg/NavSatFix"
ODOMETRY = "nav_msgs/msg/Odometry"
TFMESSAGE = "tf2_msgs/msg/TFMessage"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
DETECTIONS = "vision_msgs/msg/Detection3DArray"
COUNTS = "std_msgs/msg/UInt32MultiArray"


def serialize(msg, typename: str) -> bytes:
    return bytes(TYPESTORE.serialize_cdr(msg, typename))


def deserialize(data: bytes, typename: str):
    return TYPESTORE.deserialize_cdr(data, typename)


def header(stamp_ns: int, frame_id: str):
    sec, nsec = divmod(int(stamp_ns), 1_000_000_000)
    stamp = T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec)
    return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)


def stamp_ns(hdr) -> int:
    return int(hdr.stamp.sec) * 1_000_000_000 + int(hdr.stamp.nanosec)


def _vec3(v):
    return T["geometry_msgs/msg/Vector3"](x=float(v[0]), y=float(v[1]), z=float(v[2]))


def _quat(q):
    return T["geometry_msgs/msg/Quaternion"](
        x=float(q[0]), y=float(q[1]), z=float(q[2]), w=float(q[3])
    )


def _point(v):
    return T["geometry_msgs/msg/Point"](x=float(v[0]), y=float(v[1]), z=float(v[2]))


_SIZES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}


def cloud_arrays(msg) -> dict[str, np.ndarray]:
    """Fields of an organized or unorganized PointCloud2 as float64/uint arrays (height, width)."""
    raw, names = _cloud_checked(msg)
    end = ">" if msg.is_bigendian else "<"
    dtype = np.dtype(
        {
            "names": names,
            "formats": [end + _SIZES[f.datatype] for f in msg.fields],
            "offsets": [f.offset for f in msg.fields],
            "itemsize": msg.point_step,
        }
    )
    # the points in place (rows row_step apart), copied once: fields are writable arrays
    h, w = msg.height, msg.width
    arr = np.ndarray((h, w), dtype=dtype, buffer=raw, strides=(msg.row_step, msg.point_step))
    arr = arr.copy()
    return {n: arr[n] for n in names}


def cloud_xyz(msg) -> np.ndarray:
    """x, y, z of a PointCloud2 as one (height, width, 3) array: np.stack of cloud_arrays' x,
    y and z. Where they are three consecutive float32 (every cloud simconform writes, and most
    drivers'), read straight out of the message in one copy, not three (the lidar verifier's
    decode: 0.07 against 0.20 ms a demo sweep, each sweep decoded twice: truth and published)."""
    raw, _names = _cloud_checked(msg)
    f = {x.name: x for x in msg.fields}
    x, y, z = f["x"], f["y"], f["z"]
    consecutive = y.offset == x.offset + 4 and z.offset == x.offset + 8
    if (
        (x.datatype, y.datatype, z.datatype) != (7, 7, 7)
        or not consecutive
        or x.offset + 12 > msg.point_step  # a malformed layout: cloud_arrays says why
        or msg.height * msg.width == 0
    ):
        a = cloud_arrays(msg)
        return np.stack([a["x"], a["y"], a["z"]], axis=-1)
    end = ">" if msg.is_bigendian else "<"
    view = np.ndarray(
        (msg.height, msg.width, 3),
        dtype=end + "f4",
        buffer=raw,
        offset=x.offset,
        strides=(msg.row_step, msg.point_step, 4),
    )
    return view.astype(np.float32)  # a native, contiguous copy


def _cloud_checked(msg) -> tuple[np.ndarray, list[str]]:
    """The cloud's bytes and field names, once x, y, z and the size are checked."""
    names = [f.name for f in msg.fields]
    for required in ("x", "y", "z"):
        if required not in names:
            raise ValueError(f"PointCloud2 has no '{required}' field (fields: {names})")
    raw = np.asarray(msg.data, dtype=np.uint8)
    h, w = msg.height, msg.width
    if h and w and (h - 1) * msg.row_step + w * msg.point_step > raw.size:
        raise ValueError(
            f"PointCloud2 data holds {raw.size} bytes, {h} rows of {w} points need "
            f"{(h - 1) * msg.row_step + w * msg.point_step}"
        )
    return raw, names


def diagonal_covariance(var) -> np.ndarray:
    """A message's row-major 3 x 3 covariance with `var` on its diagonal."""
    return np.diag(np.asarray(var, dtype=float)).ravel()


def imu(s: ImuTruth, stamp: int, frame_id: str, accel_cov, gyro_cov, with_orientation: bool):
    """`accel_cov`, `gyro_cov`: 9-element covariances (diagonal_covariance). The definition:
    the recorder writes these with bag/packed.py's ImuPacker, tested byte for byte against it
    (as navsat, odometry and transforms are)."""
    ocov = np.zeros(9)
    if not with_orientation:
        ocov[0] = -1.0  # REP 145: orientation not provided
    return T[IMU](
        header=header(stamp, frame_id),
        orientation=_quat(s.orientation if with_orientation else (0.0, 0.0, 0.0, 1.0)),
        orientation_covariance=ocov,
        angular_velocity=_vec3(s.gyro),
        angular_velocity_covariance=gyro_cov,
        linear_acceleration=_vec3(s.accel),
        linear_acceleration_covariance=accel_cov,
    )


def navsat(lla, stamp: int, frame_id: str, position_cov):
    """`position_cov`: the 9-element ENU covariance (diagonal_covariance)."""
    status = T["sensor_msgs/msg/NavSatStatus"]
    fix = T[NAVSATFIX]
    return fix(
        header=header(stamp, frame_id),
        status=status(status=status.STATUS_FIX, service=status.SERVICE_GPS),
        latitude=float(lla[0]),
        longitude=float(lla[1]),
        altitude=float(lla[2]),
        position_covariance=position_cov,
        position_covariance_type=fix.COVARIANCE_TYPE_DIAGONAL_KNOWN,
    )


def odometry(s: OdomTruth, twist: np.ndarray, stamp: int, frame_id: str, child: str, var):
    q = yaw_quat(s.yaw)
    cov = np.zeros(36)
    cov[0], cov[7], cov[35] = var[0], var[1], var[2]
    pose = T["geometry_msgs/msg/PoseWithCovariance"](
        pose=T["geometry_msgs/msg/Pose"](position=_point((s.x, s.y, 0.0)), orientation=_quat(q)),
        covariance=cov,
    )
    tw = T["geometry_msgs/msg/TwistWithCovariance"](
        twist=T["geometry_msgs/msg/Twist"](
            linear=_vec3((twist[0], twist[1], 0.0)), angular=_vec3((0.0, 0.0, twist[2]))
        ),
        covariance=np.zeros(36),
    )
    return T[ODOMETRY](header=header(stamp, frame_id), child_frame_id=child, pose=pose, twist=tw)


def odom_pose(msg) -> OdomTruth:
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    yaw = np.arctan2(2 * (q.w * q.z + q.x * q.y), 1 - 2 * (q.y * q.y + q.z * q.z))
    return OdomTruth(x=float(p.x), y=float(p.y), yaw=float(yaw))


def yaw_quat(yaw: float) -> np.ndarray:
    """x y z w of the rotation by `yaw` about z, with w >= 0: the same bits as
    Pose(0, Rotation.from_euler("z", yaw)).quat() (tests/test_messages.py), in 2 against 37 us
    (two odometry messages a sample)."""
    q = np.array([0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)])
    return -q if q[3] < 0 else q


def transforms(items: list[tuple[int, str, str, np.ndarray, np.ndarray]]):
    """TFMessage from (stamp, parent, child, xyz, quat xyzw) of the child in the parent."""
    ts = T["geometry_msgs/msg/TransformStamped"]
    tf = T["geometry_msgs/msg/Transform"]
    return T[TFMESSAGE](
        transforms=[
            ts(
                header=header(st, parent),
                child_frame_id=child,
                transform=tf(translation=_vec3(xyz), rotation=_quat(q)),
            )
            for st, parent, child, xyz, q in items
        ]
    )


def image_rgb8(img: np.ndarray, stamp: int, frame_id: str):
    h, w = img.shape[:2]
    return T[IMAGE](
        header=header(stamp, frame_id),
        height=h,
        width=w,
        encoding="rgb8",
        is_bigendian=0,
        step=3 * w,
        data=np.ascontiguousarray(img, dtype=np.uint8).reshape(-1),  # a view: no copy
    )


def image_depth(depth: np.ndarray, stamp: int, frame_id: str):
    """32FC1 z-depth in metres (REP 118)."""
    h, w = depth.shape
    data = np.ascontiguousarray(depth, dtype="<f4").reshape(-1).view(np.uint8)  # no copy
    return T[IMAGE](
        header=header(stamp, frame_id),
        height=h,
        width=w,
        encoding="32FC1",
        is_bigendian=0,
        step=4 * w,
        data=data,
    )


def compressed(data: bytes, stamp: int, frame_id: str, fmt: str = "rgb8; jpeg compressed bgr8"):
    """CompressedImage with compressed_image_transport's format string."""
    return T[COMPRESSED](
        header=header(stamp, frame_id), format=fmt, data=np.frombuffer(data, dtype=np.uint8)
    )


def image_array(msg) -> np.ndarray:
    """rgb8/bgr8/mono8 Image, or a CompressedImage (JPEG/PNG), as (h, w, 3) uint8 RGB."""
    if msg.__msgtype__ == COMPRESSED:
        from simconform.pipeline.encode import decode_image

        return decode_image(bytes(msg.data))
    raw = np.asarray(msg.data, dtype=np.uint8)
    if msg.encoding in ("rgb8", "bgr8"):
        rows = raw.reshape(msg.height, msg.step)[:, : 3 * msg.width]
        img = rows.reshape(msg.height, msg.width, 3)
        return img[..., ::-1] if msg.encoding == "bgr8" else img
    if msg.encoding == "mono8":
        rows = raw.reshape(msg.height, msg.step)[:, : msg.width]
        return np.repeat(rows[..., None], 3, axis=2)
    raise ValueError(f"unsupported image encoding {msg.encoding!r} (expected rgb8, bgr8, mono8)")


def camera_info(
    k: tuple[float, float, float, float], width: int, height: int, stamp: int, frame_id: str
):
    fx, fy, cx, cy = k
    roi = T["sensor_msgs/msg/RegionOfInterest"](
        x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
    )
    return T[CAMERA_INFO](
        header=header(stamp, frame_id),
        height=height,
        width=width,
        distortion_model="plumb_bob",
        d=np.zeros(5),
        k=np.array([fx, 0, cx, 0, fy, cy, 0, 0, 1], dtype=float),
        r=np.eye(3).ravel(),
        p=np.array([fx, 0, cx, 0, 0, fy, cy, 0, 0, 0, 1, 0], dtype=float),
        binning_x=0,
        binning_y=0,
        roi=roi,
    )

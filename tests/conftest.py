"""Shared fixtures: demo inputs, small specs written on the fly, and one short recorded run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simconform.adapters.mujoco import default_gl
from simconform.demo import DEMO_SPEC, DEMO_TRAJECTORY, DEMO_WORLD
from simconform.run import RunConfig, run

REPO = Path(__file__).resolve().parent.parent
# MuJoCo reads MUJOCO_GL once, at import: choose before any test imports it, as a run does
# (OSMesa where libosmesa6 is installed, else EGL; an EGL GPU where one exists)
default_gl()


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the real `simconform` entry point in a subprocess (`env`: added to os.environ)."""
    return subprocess.run(
        [sys.executable, "-m", "simconform.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


def default_sigint() -> None:
    """preexec_fn of a child that must take Ctrl-C as in a terminal (Python then installs its
    handler), whatever the test runner inherited: a shell's background job (CI's) ignores
    SIGINT, and an ignored signal stays ignored across exec."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def bag_digest(run_dir: Path) -> str:
    """SHA-256 over a run's bag files (names and bytes): byte-identical bags, same digest."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((run_dir / "bag").iterdir()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def demo_spec() -> dict:
    return yaml.safe_load(DEMO_SPEC.read_text())


def demo_world() -> dict:
    return yaml.safe_load(DEMO_WORLD.read_text())


@pytest.fixture(scope="session")
def short_run(tmp_path_factory) -> Path:
    """The demo for its first 3 s, recorded once for the tests that only read it."""
    out = tmp_path_factory.mktemp("runs") / "short"
    from simconform.verify.verifier import verify_run

    run(RunConfig(out=out, duration=3.0), progress=False)
    verify_run(out)
    return out


__all__ = [
    "DEMO_SPEC",
    "DEMO_TRAJECTORY",
    "DEMO_WORLD",
    "REPO",
    "bag_digest",
    "cli",
    "default_sigint",
    "demo_spec",
    "demo_world",
    "write_yaml",
]


# ------------------------------------------------------------------ real Gazebo


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`gazebo` tests need a Gazebo Harmonic install: without one they skip on a developer's
    machine, but fail in CI (CI=true), which installs ../shared/gazebo and must run them."""
    if item.get_closest_marker("gazebo") is None:
        return
    from simconform.adapters.gazebo.transport import unavailable_message

    msg = unavailable_message()
    if msg is None:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the gazebo tests, but {msg}", pytrace=False)
    pytest.skip(f"Gazebo Harmonic not installed: {msg}")


# ------------------------------------------------------------------ gz.msgs10 messages


def gz_message_classes() -> dict:
    """gz.msgs10 classes: the real ones where Gazebo's Python packages import, else the same
    wire format built with protobuf from gz-msgs 10's field numbers."""
    try:
        from gz.msgs10 import (
            image_pb2,
            imu_pb2,
            laserscan_pb2,
            navsat_pb2,
            pointcloud_packed_pb2,
            pose_pb2,
        )

        return {
            "Pose": pose_pb2.Pose,
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
    # image,imu,navsat,pointcloud_packed,pose}.proto
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
        "Pose": [
            ("header", 1, MSG, ".gz.msgs.Header"), ("name", 2, STR), ("id", 3, U32),
            ("position", 4, MSG, ".gz.msgs.Vector3d"),
            ("orientation", 5, MSG, ".gz.msgs.Quaternion"),
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
        for n in ("LaserScan", "Image", "IMU", "NavSat", "PointCloudPacked", "Pose")
    }


@pytest.fixture(scope="session")
def msgs() -> dict:
    return gz_message_classes()


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("simconform: error:")]
    assert len(lines) == 1, stderr
    return lines[0]

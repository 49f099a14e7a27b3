"""Ground-truth objects per lidar capture: /truth/objects as vision_msgs/msg/Detection3DArray.

Per sweep of the spec's first lidar, one detection per object a perception stack would label:
every moving actor within the lidar's maximum range, and every static object that has a
`class` and got at least one return. Each detection carries the object's name as `id`, its
class as the one hypothesis (score 1: truth), and its oriented 3D box in the lidar frame at the
sweep's stamp. vision_msgs has no field for the number of lidar points on an object, so
/truth/objects/lidar_points (std_msgs/msg/UInt32MultiArray, same stamp) carries them, one
per detection in the same order; a return counts for the object its ray hit (the truth sweep,
before dropout and noise).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from simconform.actors import ActorSet, ShapeBox, shape_box
from simconform.bag import messages
from simconform.bag.writer import BagRecorder
from simconform.frames import Pose
from simconform.spec import LidarSpec, Spec
from simconform.world import Mesh, Plane, World

TOPIC = "/truth/objects"
COUNTS_TOPIC = "/truth/objects/lidar_points"


def objects_lidar(spec: Spec) -> str | None:
    """The lidar whose sweeps /truth/objects follows: the spec's first."""
    return next((n for n, s in spec.sensors.items() if isinstance(s, LidarSpec)), None)


class ObjectsRecorder:
    """Writes /truth/objects and its point counts for each sweep of one lidar."""

    def __init__(self, world: World, spec: Spec, lidar: str, bag: BagRecorder, start_ns: int):
        self.frame = spec.frame(lidar)
        self.max_range = spec.sensors[lidar].range.max
        self.bag = bag
        self.actors = ActorSet(world, start_ns)
        self.first = len(world.objects)
        self.static: dict[int, tuple[str, str, ShapeBox]] = {}
        for i, o in enumerate(world.objects):
            if o.class_ is None or isinstance(o, Plane):
                continue
            tri = world.mesh_triangles(i) if isinstance(o, Mesh) else None
            self.static[i] = (o.name or f"object_{i}", o.class_, shape_box(o, tri))
        self.actor_ids = [(a.name, a.class_ or "unlabeled") for a in world.actors]
        bag.connection(TOPIC, messages.DETECTIONS)
        bag.connection(COUNTS_TOPIC, messages.COUNTS)

    def record(self, t_ns: int, objects: np.ndarray | None, sensor: Pose, log_ns: int) -> None:
        """One sweep stamped t_ns: `objects` the truth's per-ray object index (or None when the
        engine cannot tell, then counts are 0), `sensor` the lidar's map pose at t_ns."""
        hit = np.asarray(objects).ravel() if objects is not None else np.empty(0, np.int64)
        counts = np.bincount(hit[hit >= 0], minlength=self.first + len(self.actor_ids))
        inv = sensor.inverse()
        rows: list[tuple[str, str, ShapeBox, int]] = []
        for i, (name, cls, box) in self.static.items():
            if counts[i]:
                rows.append((name, cls, box, int(counts[i])))
        for a, box in enumerate(self.actors.boxes(t_ns)):
            reach = np.linalg.norm(box.center - sensor.t) - np.linalg.norm(box.size) / 2
            if reach <= self.max_range:
                name, cls = self.actor_ids[a]
                rows.append((name, cls, box, int(counts[self.first + a])))
        T = messages.T
        hdr = messages.header(t_ns, self.frame)
        dets = []
        for name, cls, box, _ in rows:
            center = inv.apply(box.center)
            rot: Rotation = inv.rot * box.rot
            q = Pose(center, rot).quat()
            pose = T["geometry_msgs/msg/Pose"](
                position=messages._point(center), orientation=messages._quat(q)
            )
            hyp = T["vision_msgs/msg/ObjectHypothesisWithPose"](
                hypothesis=T["vision_msgs/msg/ObjectHypothesis"](class_id=cls, score=1.0),
                pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
            )
            bbox = T["vision_msgs/msg/BoundingBox3D"](center=pose, size=messages._vec3(box.size))
            dets.append(
                T["vision_msgs/msg/Detection3D"](header=hdr, results=[hyp], bbox=bbox, id=name)
            )
        self.bag.push(
            TOPIC, messages.DETECTIONS, T[messages.DETECTIONS](header=hdr, detections=dets), log_ns
        )
        layout = T["std_msgs/msg/MultiArrayLayout"](
            dim=[
                T["std_msgs/msg/MultiArrayDimension"](
                    label="detections", size=len(rows), stride=len(rows)
                )
            ],
            data_offset=0,
        )
        data = np.array([c for *_, c in rows], dtype=np.uint32)
        self.bag.push(
            COUNTS_TOPIC, messages.COUNTS, T[messages.COUNTS](layout=layout, data=data), log_ns
        )

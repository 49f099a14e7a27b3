"""Ground-truth objects of A against B: per object and sweep, the lidar point counts and the 3D
boxes that each engine's /truth/objects reports (bag/objects.py), paired by stamp and id.

Counts are the engine's own returns on the object (the truth sweep), so they differ only where
the engines' geometry or ray pattern differs; a pair agrees when the counts differ by at most
one point or the fraction of rays compare already allows to disagree (`hit_agreement_min`).
Boxes come from each engine's idea of where the object is: their centres and sizes must agree
within the range tolerance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simconform.bag.objects import COUNTS_TOPIC, TOPIC
from simconform.verify.compare.explain.lidar import MODEL_TARGET
from simconform.verify.compare.verdicts import gated, informational, json_float

ROW = ("sweeps", "points_a", "points_b", "count_disagreements", "box_offset_max_m")


def read_objects(bag: Path) -> dict[int, dict[str, tuple[int, np.ndarray, np.ndarray]]]:
    """stamp -> object id -> (points, box centre (3,), box size (3,)), in the lidar frame."""
    from simconform.bag.reader import open_bag

    reader = open_bag(bag)
    try:
        conns = [c for c in reader.connections if c.topic in (TOPIC, COUNTS_TOPIC)]
        if {c.topic for c in conns} != {TOPIC, COUNTS_TOPIC}:
            return {}
        boxes: dict[int, list] = {}
        counts: dict[int, list[int]] = {}
        for c, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, c.msgtype)
            if c.topic == TOPIC:
                st = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                boxes[st] = msg.detections
                pending = st
            else:
                counts[pending] = [int(v) for v in msg.data]
    finally:
        reader.close()
    out = {}
    for st, dets in boxes.items():
        n = counts.get(st, [0] * len(dets))
        out[st] = {
            d.id: (
                k,
                np.array([d.bbox.center.position.x, d.bbox.center.position.y,
                          d.bbox.center.position.z]),
                np.array([d.bbox.size.x, d.bbox.size.y, d.bbox.size.z]),
            )
            for d, k in zip(dets, n)
        }  # fmt: skip
    return out


def _agree(na: int, nb: int, hit_min: float) -> bool:
    return abs(na - nb) <= max(1.0, (1.0 - hit_min) * max(na, nb))


def compare_objects(bag_a: Path, bag_b: Path, tol_m: float, hit_min: float, explainer=None):
    """(metrics, per-object rows), or None where either run has no /truth/objects.

    With a Gazebo explainer (explain/lidar.py) the Gazebo side's actor counts are also checked
    against the engine model's, attributed the same way, with the model's own target
    (MODEL_TARGET): the raw counts differ by the engine's known approximations (global shutter,
    texel-centre rays, tessellation), the model's by what is left."""
    a, b = read_objects(bag_a), read_objects(bag_b)
    if not a or not b:
        return None
    rows: dict[str, dict] = {}
    pairs = agree = only_a = only_b = 0
    worst_box = 0.0
    for st in sorted(set(a) & set(b)):
        oa, ob = a[st], b[st]
        only_a += len(set(oa) - set(ob))
        only_b += len(set(ob) - set(oa))
        for key in sorted(set(oa) & set(ob)):
            (na, ca, sa), (nb, cb, sb) = oa[key], ob[key]
            box = float(max(np.linalg.norm(ca - cb), np.max(np.abs(sa - sb))))
            ok = _agree(na, nb, hit_min)
            pairs += 1
            agree += ok
            worst_box = max(worst_box, box)
            r = rows.setdefault(key, dict.fromkeys(ROW, 0))
            r["sweeps"] += 1
            r["points_a"] += na
            r["points_b"] += nb
            r["count_disagreements"] += not ok
            r["box_offset_max_m"] = max(r["box_offset_max_m"], box)
    for r in rows.values():
        r["box_offset_max_m"] = json_float(r["box_offset_max_m"])
    if not pairs:
        return None
    model_pairs = model_agree = 0
    target = getattr(explainer, "target", MODEL_TARGET)
    if explainer is not None and getattr(explainer, "actor_points", None):
        gz = (a, b)[explainer.side]
        for st, predicted in explainer.actor_points.items():
            for key, n_model in predicted.items():
                if key in gz.get(st, {}):
                    n_gz = gz[st][key][0]
                    model_pairs += 1
                    model_agree += _agree(n_gz, n_model, target)
                    rows[key]["points_model"] = rows[key].get("points_model", 0) + n_model
    metrics = {
        "objects_count_agreement": gated(agree / pairs, (hit_min, 1.0), "1", pairs),
        "objects_box_offset_max": gated(worst_box, (0.0, tol_m), "m", pairs),
        "objects_only_a": informational(only_a, "1", pairs),
        "objects_only_b": informational(only_b, "1", pairs),
    }
    if model_pairs:
        metrics["objects_count_agreement_model"] = gated(
            model_agree / model_pairs, (target, 1.0), "1", model_pairs
        )
    return metrics, rows

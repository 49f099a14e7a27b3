"""Part 1 of a comparison, engine truth of A against B: one diff per sensor (lidar.py, camera.py,
vector.py) fed with the paired truth captures (streams.py), and the pairing counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simconform.bag.objects import objects_lidar
from simconform.errors import UserError
from simconform.progress import progress_bar
from simconform.spec import CameraSpec, LidarSpec, Spec
from simconform.verify.compare.camera import CameraTruthDiff
from simconform.verify.compare.config import CompareConfig
from simconform.verify.compare.explain.camera import gazebo_camera
from simconform.verify.compare.lidar import (
    LidarTruthDiff,
    ObjectLabels,
    explained_metrics,
    gazebo_explainer,
)
from simconform.verify.compare.objects import compare_objects
from simconform.verify.compare.streams import paired_truth
from simconform.verify.compare.vector import VectorTruthDiff
from simconform.world import Origin


def compare_truth(
    cfg: CompareConfig, spec: Spec, origin: Origin, manifests: tuple[dict, dict], notes: list
):
    """Engine truth of A against B: (metrics per sensor, pairing counts, breakdown, artifacts,
    per-object ground truth rows)."""
    diffs: dict[str, Any] = {}
    labels_note = None
    for name, s in spec.sensors.items():
        if isinstance(s, LidarSpec):
            labels = None
            for m in manifests if cfg.objects else ():  # A's input files, else B's
                try:
                    labels = ObjectLabels(m, spec, name)
                    break
                except (OSError, UserError, ValueError, KeyError, TypeError) as exc:
                    labels_note = f"per-object lidar breakdown skipped: {exc}"
            if labels is not None:
                labels_note = None
            diffs[name] = LidarTruthDiff(s, cfg.range_tolerance, cfg.hit_agreement_min, labels)
            diffs[name].explainer = gazebo_explainer(name, s, manifests, notes)
        elif isinstance(s, CameraSpec):
            diffs[name] = CameraTruthDiff(cfg.psnr_min, gazebo_camera(name, spec, manifests, notes))
        else:
            diffs[name] = VectorTruthDiff(s, origin)
    if labels_note:
        notes.append(labels_note)
    paired: dict[str, int] = {n: 0 for n in spec.sensors}
    unpaired: dict = {}
    total = sum((manifests[0].get("captures") or {}).values()) or 1
    bar = progress_bar(total, cfg.progress, "comparing engine truth")
    pairs = paired_truth(Path(cfg.run_a) / "bag", Path(cfg.run_b) / "bag", spec, notes)
    try:
        for i, item in enumerate(pairs):
            if bar is not None and i % 20 == 0:
                bar.update(min(i, total))
            if item[0] == "unpaired":
                unpaired = item[1]
                continue
            (sensor, part, st), va, vb = item
            acc = diffs[sensor]
            try:
                if part == "depth":
                    acc.add_depth(va, vb)
                    continue
                paired[sensor] += 1
                if isinstance(acc, CameraTruthDiff):
                    acc.add_image(st, va, vb)
                else:
                    acc.add(st, va, vb)
                explainer = getattr(acc, "explainer", None)
                if explainer is not None:
                    explainer.add(st, va, vb)
            except ValueError as exc:
                raise UserError(
                    Path(cfg.run_b) / "bag", spec.data_topics(sensor)[1], st, str(exc)
                ) from None
        if bar is not None:  # every capture compared (the updates come every 20th)
            bar.update(total)
    finally:  # an error mid-loop must not leave the live bar running
        if bar is not None:
            bar.close()
    captures = {}
    for name, s in spec.sensors.items():
        part = "image" if isinstance(s, CameraSpec) else "main"
        only = unpaired.get((name, part), [0, 0])
        captures[name] = {"paired": paired[name], "only_a": only[0], "only_b": only[1]}
        if only[0] or only[1]:
            notes.append(
                f"{name}: {only[0]} truth captures only in A and {only[1]} only in B "
                "(left out of the comparison)"
            )
    truth = {n: d.metrics() for n, d in diffs.items()}
    for n, d in diffs.items():
        if getattr(d, "explainer", None) is not None:
            d.explained = d.explainer.report()  # once: compare.json and the plot read it too
            truth[n].update(explained_metrics(d.explained))
    breakdown = {n: d.breakdown() for n, d in diffs.items() if isinstance(d, LidarTruthDiff)}
    breakdown = {n: b for n, b in breakdown.items() if b}
    objects: dict = {}
    lidar = objects_lidar(spec)
    if lidar is not None:
        bags = Path(cfg.run_a) / "bag", Path(cfg.run_b) / "bag"
        explainer = getattr(diffs.get(lidar), "explainer", None)
        got = compare_objects(*bags, cfg.range_tolerance, cfg.hit_agreement_min, explainer)
        if got is not None:
            truth[lidar].update(got[0])
            objects = {lidar: got[1]}
    return truth, captures, breakdown, diffs, objects

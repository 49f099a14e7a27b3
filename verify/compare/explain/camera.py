"""Judge a Gazebo camera against the reference as the engine renders: colour through Gazebo's
own model (the reference re-rendered with ReferenceBackend(emulate="gazebo"), adapters/
shading.py), geometry by depth (compare) and by edges (`edge_agreement`)."""

from __future__ import annotations

import numpy as np

from simconform.errors import UserError
from simconform.spec import Spec
from simconform.verify.compare.explain.inputs import gazebo_side, run_inputs

EDGE_STEP = 8.0  # grey levels: a luminance step at least this high makes edge pixels
EDGE_AGREEMENT_MIN = 0.95  # Dice of the two edge maps, when one side is a gazebo run
EDGE_CAP_PX = 3.0  # an edge pixel with no counterpart this close counts as this far


def edge_map(img: np.ndarray, step: float = EDGE_STEP) -> np.ndarray:
    """Edge pixels of an rgb8 (or grey) image: Sobel gradient magnitude of the luminance
    (Rec. 601 weights) of at least that of a `step` grey-level step (a step of h gives 4 h).
    No thinning: a step edge marks the two pixels either side of it, so images of the same
    geometry whose colours differ by a grey level or two still mark the same pixels, while a
    one-pixel shift moves half of them."""
    from scipy import ndimage

    g = img.astype(np.float64)
    if g.ndim == 3:
        g = g @ np.array([0.299, 0.587, 0.114])
    gx = ndimage.sobel(g, axis=1, mode="nearest")
    gy = ndimage.sobel(g, axis=0, mode="nearest")
    return np.hypot(gx, gy) >= 4.0 * step


def edge_agreement(a: np.ndarray, b: np.ndarray, step: float = EDGE_STEP) -> dict:
    """Edge maps (`edge_map`) of two images of the same shape compared. Returns the pixel
    counts `a`, `b`, `both` (edge in both at the same pixel) and `dist_sum`, the summed
    distance (px) from every edge pixel of each image to the nearest of the other's, capped at
    `EDGE_CAP_PX` (an edge missing on one side counts as that far), so that frames pool by
    summing: `dice` = 2 both / (a + b) (1 when identical, about 0.5 for a one-pixel shift of
    an edge across it) and `offset` = dist_sum / (a + b) (0 when identical)."""
    from scipy import ndimage

    ea, eb = edge_map(a, step), edge_map(b, step)
    na, nb = int(ea.sum()), int(eb.sum())
    if na and nb:
        da = ndimage.distance_transform_edt(~eb)[ea]  # A's edge pixels to B's edges
        db = ndimage.distance_transform_edt(~ea)[eb]
        dist = float(np.minimum(da, EDGE_CAP_PX).sum() + np.minimum(db, EDGE_CAP_PX).sum())
    else:
        dist = EDGE_CAP_PX * (na + nb)
    out = {"a": na, "b": nb, "both": int((ea & eb).sum()), "dist_sum": dist}
    total = na + nb
    out["dice"] = 2.0 * out["both"] / total if total else 1.0
    out["offset"] = dist / total if total else 0.0
    return out


class GazeboCameraModel:
    """The reference camera re-rendered in Gazebo's colour model (ReferenceBackend(emulate=
    "gazebo"), adapters/shading.py) at a capture's stamp, for the gazebo side of a comparison.
    Needs the run's world and trajectory files unchanged, as ObjectLabels."""

    def __init__(self, manifest: dict, spec: Spec, sensor: str) -> None:
        from simconform.adapters.reference import ReferenceBackend

        world, self.motion = run_inputs(manifest)
        self.backend = ReferenceBackend(emulate="gazebo")
        self.backend.open(world, spec)
        self.sensor = sensor

    def image(self, t_ns: int) -> np.ndarray:
        return self.backend.capture(self.sensor, t_ns, self.motion).image


def gazebo_camera(
    name: str, spec: Spec, manifests: tuple[dict, dict], notes: list
) -> tuple[int, GazeboCameraModel | None] | None:
    """(side of the gazebo run, its colour model or None) when exactly one side is gazebo."""
    side = gazebo_side(manifests)
    if side is None:
        return None
    problem = None
    for m in manifests:  # A's input files, else B's (the same content: check_comparable)
        try:
            return side, GazeboCameraModel(m, spec, name)
        except (OSError, UserError, ValueError, KeyError, TypeError) as exc:
            problem = exc
    notes.append(
        f"{name}: Gazebo's colour model not applied ({problem}); the colour is compared "
        "after sRGB -> linear on the gazebo side only"
    )
    return side, None

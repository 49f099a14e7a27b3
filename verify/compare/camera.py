"""Camera truth of A against B: PSNR and SSIM per frame and z-depth differences; when one side
is a gazebo run, its frame against the reference in Gazebo's colour model and edge agreement
(explain/camera.py)."""

from __future__ import annotations

import math

import numpy as np

from simconform.verify.compare.explain.camera import (
    EDGE_AGREEMENT_MIN,
    EDGE_CAP_PX,
    EDGE_STEP,
    GazeboCameraModel,
    edge_agreement,
)
from simconform.verify.compare.verdicts import gated, informational, skipped

SSIM_SIGMA, SSIM_TRUNCATE, SSIM_K1, SSIM_K2 = 1.5, 3.5, 0.01, 0.03


def psnr(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB; inf for identical images."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(data_range**2 / mse)


def ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Mean SSIM (Wang et al. 2004) per channel, averaged over channels.

    Gaussian window sigma 1.5 truncated at 3.5 sigma (11 x 11), K1 0.01, K2 0.03, population
    (co)variances; the map's border where the window leaves the image is left out of the mean
    when the image is large enough (as scikit-image does), edges reflected.
    """
    from scipy.ndimage import gaussian_filter

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"images differ in shape: {x.shape} vs {y.shape}")
    if x.ndim == 2:
        x, y = x[..., None], y[..., None]
    c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
    pad = int(SSIM_TRUNCATE * SSIM_SIGMA + 0.5)

    def blur(z: np.ndarray) -> np.ndarray:
        return gaussian_filter(z, SSIM_SIGMA, truncate=SSIM_TRUNCATE, mode="reflect")

    means = []
    for ch in range(x.shape[2]):
        xc, yc = x[..., ch], y[..., ch]
        mx, my = blur(xc), blur(yc)
        sxx = blur(xc * xc) - mx * mx
        syy = blur(yc * yc) - my * my
        sxy = blur(xc * yc) - mx * my
        num = (2 * mx * my + c1) * (2 * sxy + c2)
        den = (mx * mx + my * my + c1) * (sxx + syy + c2)
        m = num / den
        if m.shape[0] > 2 * pad and m.shape[1] > 2 * pad:
            m = m[pad:-pad, pad:-pad]
        means.append(float(m.mean()))
    return float(np.mean(means))


def depth_array(msg) -> np.ndarray:
    """32FC1 depth Image as (h, w) float32 metres."""
    if msg.encoding != "32FC1":
        raise ValueError(f"depth image encoding {msg.encoding!r}; expected 32FC1")
    raw = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)[:, : 4 * msg.width]
    return np.frombuffer(raw.tobytes(), dtype=">f4" if msg.is_bigendian else "<f4").reshape(
        msg.height, msg.width
    )


class Moments:
    """Streaming count, mean, M2 and max |x| (Chan et al. merge), for arrays too big to keep."""

    def __init__(self) -> None:
        self.n, self.mean, self.m2, self.maxabs = 0, 0.0, 0.0, 0.0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.size == 0:
            return
        n, mean = x.size, float(x.mean())
        m2 = float(np.sum((x - mean) ** 2))
        tot = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / tot
        self.m2 += m2 + delta * delta * self.n * n / tot
        self.n = tot
        self.maxabs = max(self.maxabs, float(np.abs(x).max()))

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else math.nan


class CameraTruthDiff:
    """PSNR/SSIM per frame and z-depth differences. With `gazebo` = (side, model) one side is
    Gazebo's camera, which writes sRGB of ogre2's PBS shading while the other engines write
    linear Lambert: raw PSNR then measures the colour models, so it is informational, and the
    camera is judged by geometry (depth, and edge agreement) and by the PSNR of the Gazebo
    frame against the reference re-rendered in Gazebo's colour model at the same stamp."""

    def __init__(
        self, psnr_min: float, gazebo: tuple[int, GazeboCameraModel | None] | None = None
    ) -> None:
        self.psnr_min = psnr_min
        self.psnr: list[float] = []
        self.ssim: list[float] = []
        self.worst: tuple[float, int, np.ndarray, np.ndarray] | None = None
        self.depth = Moments()
        self.depth_pixels = self.depth_agree = 0
        self.gazebo = gazebo
        self.psnr_model: list[float] = []
        self.edges: list[dict] = []

    def add_image(self, t_ns: int, a: np.ndarray, b: np.ndarray) -> None:
        if a.shape != b.shape:
            raise ValueError(f"truth images differ in shape: {a.shape} vs {b.shape}")
        p = psnr(a, b)
        self.psnr.append(p)
        self.ssim.append(ssim(a, b))
        if self.worst is None or p < self.worst[0]:
            self.worst = (p, t_ns, a, b)
        if self.gazebo is not None:
            side, model = self.gazebo
            gz, other = (a, b) if side == 0 else (b, a)
            if model is not None:
                other = model.image(t_ns)
            else:  # no model: both sides linear, the reference's Lambert as it is
                from simconform.adapters.shading import srgb8_to_linear

                gz = np.floor(srgb8_to_linear(gz) * 255.0 + 0.5)
            self.psnr_model.append(psnr(gz, other))
            self.edges.append(edge_agreement(gz, other))

    def add_depth(self, a: np.ndarray, b: np.ndarray) -> None:
        if a.shape != b.shape:
            raise ValueError(f"truth depth images differ in shape: {a.shape} vs {b.shape}")
        fa, fb = np.isfinite(a), np.isfinite(b)
        both = fa & fb
        self.depth.add(b[both].astype(np.float64) - a[both].astype(np.float64))
        self.depth_pixels += a.size
        self.depth_agree += int((fa == fb).sum())

    def metrics(self) -> dict[str, dict]:
        n = len(self.psnr)
        if n == 0:
            return {"psnr_mean": skipped("no capture of this sensor in both runs", "dB")}
        p = np.array(self.psnr)
        finite = p[np.isfinite(p)]
        identical = int(n - finite.size)
        mean = float(finite.mean()) if finite.size else math.inf
        extra = {"frames": n, "identical_frames": identical}
        out = {
            "psnr_mean": gated(mean, (self.psnr_min, math.inf), "dB", n, **extra),
            "psnr_min": informational(p.min(), "dB", n, **extra),
            "ssim_mean": informational(np.mean(self.ssim), "1", n),
            "ssim_min": informational(np.min(self.ssim), "1", n),
        }
        if self.gazebo is not None:
            out.update(self._gazebo_metrics(mean, n, extra))
        if self.depth_pixels:
            dm = self.depth
            out["depth_finite_agreement"] = informational(
                self.depth_agree / self.depth_pixels, "1", self.depth_pixels
            )
            out["depth_diff_bias"] = informational(dm.mean if dm.n else math.nan, "m", dm.n)
            out["depth_diff_std"] = informational(dm.std, "m", dm.n)
            out["depth_diff_maxabs"] = informational(dm.maxabs if dm.n else math.nan, "m", dm.n)
        return out

    def _gazebo_metrics(self, raw_mean: float, n: int, extra: dict) -> dict[str, dict]:
        modelled = self.gazebo[1] is not None
        against = (
            "the reference re-rendered in Gazebo's colour model (sRGB of ogre2 PBS shading, "
            "adapters/shading.py) at the same stamp"
            if modelled
            else "the other side, after sRGB -> linear on the gazebo side (no colour model: "
            "the world or trajectory file was not found unchanged)"
        )
        pm = np.array(self.psnr_model)
        fin = pm[np.isfinite(pm)]
        total = sum(x["a"] + x["b"] for x in self.edges)
        dice = 2.0 * sum(x["both"] for x in self.edges) / total if total else 1.0
        offset = sum(x["dist_sum"] for x in self.edges) / total if total else 0.0
        edges = (
            f"edge pixels (Sobel magnitude of a luminance step >= {EDGE_STEP:g} grey levels) of "
            f"the Gazebo frame and of {against}"
        )
        return {
            "psnr_mean": informational(
                raw_mean,
                "dB",
                n,
                **extra,
                reason="raw: Gazebo writes sRGB of ogre2 PBS shading, the other linear "
                "Lambert; judged by psnr_model_mean and edge_agreement",
                note=f"raw PSNR of different colour models; psnr_model_mean compares with "
                f"{against}",
            ),
            "psnr_model_mean": gated(
                float(fin.mean()) if fin.size else math.inf,
                (self.psnr_min, math.inf),
                "dB",
                n,
                frames=n,
                identical_frames=int(pm.size - fin.size),
                note=f"PSNR of the Gazebo frame against {against}",
            ),
            "psnr_model_min": informational(pm.min(), "dB", n),
            "edge_agreement": gated(
                dice,
                (EDGE_AGREEMENT_MIN, 1.0),
                "1",
                total,
                note=f"Dice 2|A&B|/(|A|+|B|) of the {edges}: 1 for the same geometry, about "
                "0.5 on edges crossed by a one-pixel shift",
            ),
            "edge_offset_mean": informational(
                offset,
                "px",
                total,
                reason=f"edge pixel to nearest edge, both ways, capped at {EDGE_CAP_PX:g} px",
                note=f"mean distance between the {edges}",
            ),
        }

"""Camera verification that predicts what clamping, rounding and JPEG do to the noise.

The measured error of a published image is not the configured sigma: clamping to [0, 255]
truncates it, rounding adds quantisation and JPEG removes and adds error. Instead of guessing,
the verifier computes the expected measured error frame by frame:

- raw (rgb8): exactly, from each frame's histogram of truth values and the discrete
  distribution of clamp(round(v + bias + sigma * N(0, 1)));
- JPEG: by running the same noise -> clamp -> round -> encode -> decode chain on the run's own
  truth frames (an evenly spaced subset) with the verifier's own generator, independent of the
  run's seed.

Measured and predicted statistics are compared frame by frame (paired), with t intervals over
frames, so the spatial correlation that JPEG puts into its errors does not make the intervals
falsely narrow.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np
from scipy.special import ndtr

from simconform.bag.deferred import DeferredImage
from simconform.bag.messages import COMPRESSED, image_array
from simconform.pipeline.encode import checked_jpeg_shape, decode_image, encode_jpeg
from simconform.pipeline.rng import stable_id
from simconform.spec import CameraSpec
from simconform.verify import stats
from simconform.verify import tolerances as tl
from simconform.verify.accumulator import Accumulator, metric, not_applicable
from simconform.verify.pairing import Pair

PREDICTION_ENTROPY = 0x5C0F_C0DE  # the verifier's own stream, never the run's seed
JPEG_PREDICTION_FRAMES = 40


def prediction_every(expected: int) -> int:
    """Every how many frames a JPEG camera's frame is compared (about 40 in a run): the
    verifier and the planner (verify/planning.py) count the same frames."""
    return max(1, expected // JPEG_PREDICTION_FRAMES)


HIST_FRAMES = 3


def error_moments(image: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Mean and mean square of image - truth over every pixel and channel, in one compiled
    pass with integer sums: exact, so equal to numpy's float64 means of the int16 error."""
    from simconform.verify.sums import error_sums  # numba only where data is added

    n = image.size
    s, s2 = error_sums(
        np.ascontiguousarray(image).reshape(-1), np.ascontiguousarray(truth).reshape(-1)
    )
    return s / n, s2 / n


def raw_error_tables(bias: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """E[e | v] and E[e^2 | v] for e = clamp(round(v + bias + sigma Z), 0, 255) - v, v = 0..255."""
    v = np.arange(256, dtype=float)[:, None]
    k = np.arange(256, dtype=float)[None, :]
    if sigma == 0:
        out = np.clip(np.rint(v + bias), 0, 255)
        return (out - v)[:, 0], ((out - v) ** 2)[:, 0]
    upper = ndtr((k + 0.5 - v - bias) / sigma)
    lower = ndtr((k - 0.5 - v - bias) / sigma)
    upper[:, -1] = 1.0  # everything above 254.5 clamps to 255
    lower[:, 0] = 0.0  # everything below 0.5 rounds or clamps to 0
    p = upper - lower
    e = k - v
    return (p * e).sum(axis=1), (p * e * e).sum(axis=1)


class JpegFrame(NamedTuple):
    """A published JPEG whose data decoded without error (at 1/8 scale, `checked_jpeg_shape`),
    not yet decoded to pixels: a JPEG camera's frames are all checked and counted, but only
    every `every`-th is compared with the prediction, so the others never need their pixels
    (the demo: 1,870 of 1,910 frames, 0.8 ms each)."""

    data: bytes
    shape: tuple[int, int, int]

    def pixels(self) -> np.ndarray:
        return decode_image(self.data)


def decode_frame(msg) -> np.ndarray | JpegFrame | DeferredImage:
    """A camera message as the accumulator takes it: an Image's or a PNG's pixels, a clean
    JPEG as a JpegFrame, a truth image read from its chunk's first bytes as it is (its pixels
    are decompressed in add_pair if its frame is compared). A JPEG libjpeg-turbo refuses is
    decoded at once, by Pillow where it can (`decode_image`), so a damaged frame is found, or
    decoded, here as before."""
    if msg.__msgtype__ == COMPRESSED:
        data = bytes(msg.data)
        shape = checked_jpeg_shape(data)
        return decode_image(data) if shape is None else JpegFrame(data, shape)
    if isinstance(msg, DeferredImage):  # a truth image whose pixels wait until compared
        return msg
    return image_array(msg)


class CameraAccumulator(Accumulator):
    decode = staticmethod(decode_frame)

    def __init__(self, name: str, spec: CameraSpec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        n = spec.noise.intensity
        self.mean_e, self.mean_e2 = raw_error_tables(n.bias, n.sigma)
        expected = max(1, round(spec.rate_hz * duration_s))
        self.every = prediction_every(expected)
        self.rng = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence([PREDICTION_ENTROPY, stable_id(name)]))
        )
        self.frames: list[tuple[float, float, float, float, float]] = []  # m, q, m', q', q0
        # the first HIST_FRAMES frames' errors, int16, written in place: the histogram's sample
        # is a view of it, not a second 5.5 MB copy beside it while the figures are drawn
        self.hist: np.ndarray | None = None
        self.hist_frames = 0
        self.images: dict[str, np.ndarray] = {}
        self.paired = 0

    def add_pair(self, pair: Pair) -> None:
        s: CameraSpec = self.spec
        truth, pub = pair.truth, pair.published
        if truth.shape != pub.shape or truth.shape[:2] != (s.height, s.width):
            raise ValueError(
                f"image {pub.shape} / truth {truth.shape} does not match the spec's "
                f"{s.height} x {s.width} x 3"
            )
        compared = s.encoding == "raw" or self.paired % self.every == 0
        first = self.hist_frames < HIST_FRAMES
        if isinstance(pub, JpegFrame) and (compared or first):
            pub = pub.pixels()
        if isinstance(truth, DeferredImage) and (compared or first or not self.images):
            truth = image_array(truth)  # its chunk decompressed and checked now
        if first:
            if self.hist is None:
                self.hist = np.zeros((HIST_FRAMES, truth.size), dtype=np.int16)
            if truth.size != self.hist.shape[1]:
                raise ValueError(f"image {truth.shape}: the first frames had another shape")
            row = self.hist[self.hist_frames].reshape(truth.shape)
            np.subtract(pub, truth, out=row, dtype=np.int16)
            self.hist_frames += 1
        if not self.images:
            self.images = {"truth": truth, "published": pub}
        # the moments only of the frames compared (every raw frame, every `every`-th JPEG
        # one); every frame's data is still decoded (decode_frame) and its size checked above
        if s.encoding == "raw":
            h = np.bincount(truth.ravel(), minlength=256) / truth.size
            m, q = error_moments(pub, truth)
            self.frames.append((m, q, float(h @ self.mean_e), float(h @ self.mean_e2), 0.0))
        elif compared:
            self.frames.append((*error_moments(pub, truth), *self._jpeg_prediction(truth)))
        self.paired += 1

    def finish(self) -> None:
        """The end of the stream; the noise tables of the JPEG prediction (8 MB each) are no
        longer needed, and a verification in one process would otherwise hold them while it
        draws its figures."""
        super().finish()
        noise = sys.modules.get("simconform.pipeline.image_noise")  # loaded only if used
        if noise is not None:
            noise.release_tables()

    def _jpeg_prediction(self, truth: np.ndarray) -> tuple[float, float, float]:
        s: CameraSpec = self.spec
        n = s.noise.intensity
        from simconform.pipeline.image_noise import draw_image_noise  # numba: as sums.py

        noisy = draw_image_noise(truth, np.float32(n.bias), np.float32(n.sigma), self.rng)
        sim = decode_image(encode_jpeg(noisy, s.jpeg_quality, s.jpeg_subsampling))
        alone = decode_image(encode_jpeg(truth, s.jpeg_quality, s.jpeg_subsampling))
        return (*error_moments(sim, truth), error_moments(alone, truth)[1])

    def field_metrics(self) -> dict[str, dict]:
        s: CameraSpec = self.spec
        n, tol, lv = s.noise.intensity, s.tolerances, self.level
        unit = "levels"
        if self.hist_frames:
            self.samples["intensity"] = {
                "errors": self.hist[: self.hist_frames].reshape(-1),  # int16, not 4x as floats
                "sigma": n.sigma,
                "bias": n.bias,
                "unit": unit,
                "note": f"pixels of the first {self.hist_frames} frames",
            }
        if self.images:
            self.samples["_images"] = self.images
        if len(self.frames) < 3:
            why = "fewer than 3 frames to compare with the prediction"
            return {"intensity_bias": not_applicable(why, unit)}
        f = np.array(self.frames)
        m, q, mp, qp, q0 = f.T
        v, vp = q - m**2, qp - mp**2
        basis = (
            "exact clamp/round model"
            if s.encoding == "raw"
            else f"simulated JPEG q{s.jpeg_quality} {s.jpeg_subsampling} on {len(f)} truth frames"
        )
        common = {"predicted_from": basis, "frames": len(f)}

        def paired(measured, predicted, band_of, transform=lambda x: x):
            d = stats.mean_ci(measured - predicted, lv)
            pred = float(predicted.mean())
            lo, hi = pred + d.ci[0], pred + d.ci[1]
            est = stats.Estimate(
                transform(float(measured.mean())), (transform(lo), transform(hi)), d.n, lv
            )
            p = transform(pred)
            return est, p, band_of(p)

        out = {}
        est, p, band = paired(
            m,
            mp,
            lambda p: (p - tl.bias_band(0, n.sigma, tol)[1], p + tl.bias_band(0, n.sigma, tol)[1]),
        )
        out["intensity_bias"] = metric(est, n.bias, band, unit, predicted=p, **common)
        root = _sqrt
        est, p, band = paired(v, vp, lambda p: tl.sigma_band(p, tol), root)
        extra = {}
        if s.encoding == "jpeg":
            mse = float(q.mean())
            extra = {
                "encoding_only_rmse": float(np.sqrt(q0.mean())),
                "encoding_share_of_mse": float(q0.mean() / mse) if mse > 0 else None,
            }
        out["intensity_std"] = metric(est, n.sigma, band, unit, predicted=p, **common, **extra)
        if "intensity" in self.samples:  # the plot overlays what the verdict is judged against
            self.samples["intensity"].update(
                predicted_sigma=p,  # the std metric's prediction, as judged
                predicted_bias=out["intensity_bias"]["predicted"],
                predicted_from="after clamp, round" + (", JPEG" * (s.encoding == "jpeg")),
            )
        est, p, band = paired(q, qp, lambda p: tl.relative_band(p, tol.sigma_rel), root)
        out["intensity_rmse"] = metric(
            est, float(np.hypot(n.bias, n.sigma)), band, unit, predicted=p, **common
        )
        out["intensity_normality"] = not_applicable(
            "clamping, rounding and encoding make image noise non-Gaussian by design; checked "
            "against the predicted distribution instead",
            "A2",
        )
        return out

    def details(self) -> dict:
        """How many paired frames the intensity metrics were judged on (JPEG: a sample, each
        needs the encoding chain simulated on its truth), for the report's "not checked"."""
        return {
            "frames_paired": self.paired,
            "frames_judged": len(self.frames),
            "judged_every": 1 if self.spec.encoding == "raw" else self.every,
        }


def _sqrt(x: float) -> float:
    return float(np.sqrt(max(x, 0.0)))

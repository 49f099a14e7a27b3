"""The camera's JPEG decode (simplejpeg) gives Pillow's pixels, and falls back to Pillow where
libjpeg-turbo's own API refuses an image."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from simconform.pipeline.encode import checked_jpeg_shape, decode_image, encode_jpeg


def _pillow(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.array(im.convert("RGB"))


def _image(seed: int, h: int, w: int, smooth: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if not smooth:
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    base = 128 + 100 * np.sin(x[..., None] / 7.0 + y[..., None] / 11.0 + np.arange(3))
    return np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    h=st.integers(1, 70),
    w=st.integers(1, 70),
    smooth=st.booleans(),
    quality=st.integers(1, 100),
    subsampling=st.sampled_from(["4:4:4", "4:2:2", "4:2:0"]),
)
def test_jpeg_decode_gives_pillows_pixels(seed, h, w, smooth, quality, subsampling) -> None:
    data = encode_jpeg(_image(seed, h, w, smooth), quality, subsampling)
    got = decode_image(data)
    assert got.dtype == np.uint8 and got.shape == (h, w, 3)
    assert np.array_equal(got, _pillow(data))


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_grayscale_and_cmyk_jpegs_decode_as_pillow_does(mode: str) -> None:
    rgb = Image.fromarray(_image(3, 40, 56, True), "RGB")
    buf = io.BytesIO()
    rgb.convert(mode).save(buf, "JPEG", quality=85)
    data = buf.getvalue()
    assert np.array_equal(decode_image(data), _pillow(data))


def test_a_truncated_jpeg_still_raises() -> None:
    data = encode_jpeg(_image(5, 48, 64, False), 90, "4:2:0")
    with pytest.raises(OSError, match="truncated"):
        decode_image(data[: len(data) // 2])


def test_png_goes_through_pillow() -> None:
    img = _image(7, 30, 20, False)
    buf = io.BytesIO()
    Image.fromarray(img, "RGB").save(buf, "PNG")
    assert np.array_equal(decode_image(buf.getvalue()), img)


def _strict_full_decode_ok(data: bytes) -> bool:
    try:
        simplejpeg.decode_jpeg(data, colorspace="RGB")
    except ValueError:
        return False
    return True


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), smooth=st.booleans(), cut=st.booleans())
def test_the_eighth_scale_check_refuses_what_the_full_decode_refuses(seed, smooth, cut) -> None:
    """verify/camera.py checks the frames it does not compare at 1/8 scale: that check must
    refuse a damaged JPEG exactly when libjpeg-turbo's full decode does (bit flips in the
    entropy-coded data, a cut-off file), and give the full decode's shape otherwise."""
    clean = encode_jpeg(_image(seed, 48, 64, smooth), 90, "4:2:0")
    assert checked_jpeg_shape(clean) == decode_image(clean).shape
    rng = np.random.default_rng(seed)
    for _ in range(20):
        data = bytearray(clean)
        if cut:
            data = data[: int(rng.integers(len(data) // 3, len(data) - 2))]
        else:
            pos = int(rng.integers(len(data) // 2, len(data) - 2))
            data[pos] ^= 1 << int(rng.integers(8))
        data = bytes(data)
        assert (checked_jpeg_shape(data) is not None) == _strict_full_decode_ok(data)


def test_a_camera_frame_is_decoded_as_before() -> None:
    """decode_frame: a clean JPEG as a JpegFrame whose pixels are image_array's; a damaged one
    decoded (or refused) at once, as image_array does."""
    from simconform.bag import messages
    from simconform.verify.camera import JpegFrame, decode_frame

    data = encode_jpeg(_image(3, 48, 64, True), 90, "4:2:0")
    msg = messages.compressed(data, 1, "cam")
    frame = decode_frame(msg)
    assert isinstance(frame, JpegFrame) and frame.shape == (48, 64, 3)
    assert np.array_equal(frame.pixels(), messages.image_array(msg))
    cut = messages.compressed(data[: len(data) // 2], 1, "cam")
    with pytest.raises(OSError):
        messages.image_array(cut)
    with pytest.raises(OSError):
        decode_frame(cut)

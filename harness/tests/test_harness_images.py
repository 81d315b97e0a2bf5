"""Every Pillow image mode read as RGB values (rambo.harness.images): each mode a file format
stores is written, read back with ``rgb_image`` and compared with the values its definition gives
(computed here pixel by pixel), or refused with the file and the mode named."""

from __future__ import annotations

import colorsys
import hashlib
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rambo.harness.images import CONVERTED, REFUSED, SIXTEEN_BIT, UnreadableImage, as_rgb, rgb_image

RNG = np.random.default_rng(0)
SIZE = (24, 16)  # width, height


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def values(channels: int, high: int = 256, dtype=np.uint8) -> np.ndarray:
    """Random pixel values ``[height, width, channels]`` in ``0..high-1``."""
    return RNG.integers(0, high, (SIZE[1], SIZE[0], channels)).astype(dtype)


def gray(v: np.ndarray) -> np.ndarray:
    """A one-channel ``[h, w]`` array as the RGB image that repeats it."""
    return np.repeat(np.asarray(v, dtype=np.int64)[..., None], 3, axis=2)


def from_bytes(mode: str, array: np.ndarray, palette: np.ndarray | None = None) -> Image.Image:
    image = Image.frombytes(mode, SIZE, np.ascontiguousarray(array).tobytes())
    if palette is not None:
        image.putpalette(palette.astype(np.uint8).tobytes())
    return image


def written(tmp_path: Path, image: Image.Image, name: str, mode: str, **options) -> Path:
    """``image`` saved as ``tmp_path/name``; the file opens in Pillow as ``mode`` (what the case tests)."""
    path = tmp_path / name
    image.save(path, **options)
    with Image.open(path) as opened:
        assert opened.mode == mode, f"{name} opens as {opened.mode}, not {mode}"
    return path


def srgb_from_lab(lab: np.ndarray) -> np.ndarray:
    """CIE L*a*b* (ICC's D50 white) to sRGB 0..255, float: the ICC profile connection Pillow's
    LittleCMS transform computes (Lab -> XYZ D50 -> the Bradford-adapted sRGB matrix -> sRGB's curve)."""
    white = np.array([0.96422, 1.0, 0.82521])
    fy = (lab[..., 0] + 16) / 116
    f = np.stack([fy + lab[..., 1] / 500, fy, fy - lab[..., 2] / 200], axis=-1)
    xyz = np.where(f**3 > 216 / 24389, f**3, (116 * f - 16) / (24389 / 27)) * white
    to_srgb = np.array(
        [[3.1338561, -1.6168667, -0.4906146], [-0.9787684, 1.9161415, 0.0334540], [0.0719453, -0.2289914, 1.4052427]]
    )
    linear = np.clip(xyz @ to_srgb.T, 0, 1)
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055) * 255


def png16(path: Path, color_type: int, samples: np.ndarray) -> Path:
    """A PNG of 16 bits per sample (``color_type`` 0 gray, 2 RGB), written by hand: Pillow writes no 48-bit PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    height, width = samples.shape[:2]
    rows = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in samples.reshape(height, -1))
    header = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    )
    return path


# --- modes convert("RGB") reads right -------------------------------------------------------------


def test_one_bit_png(tmp_path):
    bits = values(1, 2)[..., 0].astype(bool)
    path = written(tmp_path, Image.fromarray(bits), "bits.png", "1")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), gray(np.where(bits, 255, 0)))


def test_grayscale_png(tmp_path):
    v = values(1)[..., 0]
    path = written(tmp_path, Image.fromarray(v), "gray.png", "L")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), gray(v))


def test_grayscale_with_alpha_png_drops_the_alpha(tmp_path):
    v = values(2)
    path = written(tmp_path, from_bytes("LA", v), "gray_alpha.png", "LA")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), gray(v[..., 0]))


def test_palette_png_looks_up_every_index(tmp_path):
    index, palette = values(1)[..., 0], values(3)[0].repeat(11, axis=0)[:256]
    path = written(tmp_path, from_bytes("P", index, palette), "palette.png", "P")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), palette[index].astype(np.int64))


def test_palette_with_alpha_tiff_looks_up_every_index(tmp_path):
    pixels, palette = values(2), values(3)[0].repeat(11, axis=0)[:256]
    path = written(tmp_path, from_bytes("PA", pixels, palette), "palette_alpha.tif", "PA")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), palette[pixels[..., 0]].astype(np.int64))


def test_rgb_png(tmp_path):
    v = values(3)
    path = written(tmp_path, Image.fromarray(v), "rgb.png", "RGB")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), v)


def test_rgba_png_drops_the_alpha(tmp_path):
    v = values(4)
    path = written(tmp_path, Image.fromarray(v), "rgba.png", "RGBA")
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), v[..., :3])


def test_cmyk_tiff_is_the_product_of_the_inks_complements(tmp_path):
    v = values(4).astype(np.int64)
    path = written(tmp_path, from_bytes("CMYK", v.astype(np.uint8)), "cmyk.tif", "CMYK")
    expected = np.floor((255 - v[..., :3]) * (255 - v[..., 3:]) / 255 + 0.5)  # no value lies halfway
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), expected)


def test_lab_tiff_is_the_colour_the_lab_values_name(tmp_path):
    """L* 0..100 as 0..255, a* and b* as signed bytes (TIFF's CIELab). Pillow converts through a
    LittleCMS transform, which interpolates on a grid: a few levels off the formula in places,
    never a clipped or copied channel."""
    L = RNG.integers(0, 256, (SIZE[1], SIZE[0]))
    ab = RNG.integers(-20, 21, (SIZE[1], SIZE[0], 2))
    L[0, :8], ab[0, :8] = np.arange(0, 256, 32), 0  # a gray ramp
    stored = np.concatenate([L[..., None], ab], axis=-1).astype(np.int8).view(np.uint8)
    path = written(tmp_path, from_bytes("LAB", stored), "lab.tif", "LAB")
    got = np.asarray(rgb_image(path)).astype(float)
    expected = srgb_from_lab(np.concatenate([L[..., None] * 100 / 255, ab], axis=-1).astype(float))
    difference = np.abs(got - expected)
    assert difference[0, :8].max() <= 2  # gray stays gray, at its lightness
    assert difference.mean() < 1 and difference.max() <= 10


def test_ycbcr_im_file_is_the_jpeg_conversion(tmp_path):
    """Pillow's own IM format keeps YCbCr (a JPEG's YCbCr is converted by the decoder)."""
    v = values(3)
    path = written(tmp_path, from_bytes("YCbCr", v), "ycbcr.im", "YCbCr")
    y, cb, cr = (v[..., i].astype(float) for i in range(3))
    expected = np.stack(
        [y + 1.402 * (cr - 128), y - 0.344136 * (cb - 128) - 0.714136 * (cr - 128), y + 1.772 * (cb - 128)], axis=-1
    )
    assert np.abs(np.asarray(rgb_image(path)) - np.clip(np.round(expected), 0, 255)).max() <= 1  # fixed-point tables


# Modes no Pillow plugin opens a file as (HSV, RGBa, RGBX, I;16N, La): read from images made in memory.


def test_hsv_image():
    v = values(3)
    expected = np.array([[colorsys.hsv_to_rgb(*(p / 255)) for p in row] for row in v]) * 255
    np.testing.assert_array_equal(np.asarray(as_rgb(from_bytes("HSV", v))), np.floor(expected + 0.5))


def test_premultiplied_rgba_image_is_unpremultiplied():
    v = values(4).astype(np.int64)
    v[..., :3] = np.minimum(v[..., :3], v[..., 3:])  # premultiplied: colour <= alpha
    v[0, :4, 3] = [0, 255, 1, 2]
    alpha = v[..., 3:]
    opaque_or_clear = (alpha == 0) | (alpha == 255)
    expected = np.where(opaque_or_clear, v[..., :3], np.minimum(255, (255 * v[..., :3]) // np.maximum(alpha, 1)))
    np.testing.assert_array_equal(np.asarray(as_rgb(from_bytes("RGBa", v.astype(np.uint8)))), expected)


def test_rgbx_image_drops_the_padding():
    v = values(4)
    np.testing.assert_array_equal(np.asarray(as_rgb(from_bytes("RGBX", v))), v[..., :3])


# --- 16-bit grayscale: scaled, not clipped ---------------------------------------------------------


def sixteen_bit() -> np.ndarray:
    """Every edge of the scale (0, 128, 129, 385, 65535 ...) and random values, ``[h, w]`` uint16."""
    v = values(1, 65536, np.uint16)[..., 0]
    v[0, :8] = [0, 1, 128, 129, 385, 386, 65406, 65535]
    return v


def scaled(v: np.ndarray) -> np.ndarray:
    """``round(v * 255 / maxval)`` per pixel, from the definition (no value lies halfway)."""
    return gray(np.floor(v.astype(float) * 255 / 65535 + 0.5))


@pytest.mark.parametrize(
    "name, mode",
    [("sixteen.png", "I;16"), ("sixteen_le.tif", "I;16"), ("sixteen_be.tif", "I;16B"), ("sixteen_le.im", "I;16L")],
)
def test_sixteen_bit_grayscale_is_scaled_to_eight_bits(tmp_path, name, mode):
    v = sixteen_bit()
    image = Image.frombytes(mode, SIZE, v.astype(">u2" if mode == "I;16B" else "<u2").tobytes())
    got = np.asarray(rgb_image(written(tmp_path, image, name, mode)))
    np.testing.assert_array_equal(got, scaled(v))
    assert (got == 255).mean() < 0.01  # convert("RGB") made ~99.6 % of these pixels 255


def test_native_sixteen_bit_image_is_scaled():
    v = sixteen_bit()
    np.testing.assert_array_equal(
        np.asarray(as_rgb(Image.frombytes("I;16N", SIZE, v.astype("=u2").tobytes()))), scaled(v)
    )


@pytest.mark.parametrize("maxval, kind", [(65535, "P5"), (1023, "P5"), (4095, "P2")])
def test_sixteen_bit_pgm_is_scaled_by_its_maxval(tmp_path, maxval, kind):
    """Pillow reads a PGM of maxval > 255 as mode I, 0..65535."""
    v = values(1, maxval + 1, np.int64)[..., 0]
    v[0, :2] = [0, maxval]
    head = f"{kind}\n{SIZE[0]} {SIZE[1]}\n{maxval}\n".encode()
    body = v.astype(">u2").tobytes() if kind == "P5" else " ".join(map(str, v.ravel())).encode() + b"\n"
    path = tmp_path / "deep.pgm"
    path.write_bytes(head + body)
    with Image.open(path) as opened:
        assert opened.mode == "I"
    np.testing.assert_array_equal(np.asarray(rgb_image(path)), gray(np.floor(v * 255 / maxval + 0.5)))


def test_a_48_bit_rgb_png_keeps_within_one_level_of_its_scaled_values(tmp_path):
    """Pillow reads 16-bit colour as mode RGB itself, keeping each sample's high byte (v // 256)."""
    v = values(3, 65536, np.uint16)
    with Image.open(png16(tmp_path / "deep_rgb.png", 2, v)) as opened:
        assert opened.mode == "RGB"
    got = np.asarray(rgb_image(tmp_path / "deep_rgb.png")).astype(int)
    assert np.abs(got - np.floor(v / 257 + 0.5)).max() <= 1


# --- refused: no fixed range, or no conversion -------------------------------------------------------


@pytest.mark.parametrize(
    "name, mode, array",
    [
        ("counts.tif", "I", np.arange(SIZE[0] * SIZE[1], dtype=np.int32).reshape(SIZE[1], SIZE[0]) * 1000),
        ("depth.tif", "F", np.linspace(0, 1, SIZE[0] * SIZE[1], dtype=np.float32).reshape(SIZE[1], SIZE[0])),
        ("depth.pfm", "F", np.linspace(0, 1, SIZE[0] * SIZE[1], dtype=np.float32).reshape(SIZE[1], SIZE[0])),
    ],
)
def test_integer_and_float_images_are_refused_naming_the_file_and_mode(tmp_path, name, mode, array):
    path = written(tmp_path, Image.fromarray(array), name, mode, **({"format": "PPM"} if name.endswith(".pfm") else {}))
    before = tree_digest(tmp_path)
    with pytest.raises(UnreadableImage) as refused:
        rgb_image(path)
    kind = "32-bit integer pixels" if mode == "I" else "floating-point pixels"
    reason = (
        f"Pillow mode {mode}: {kind} have no fixed range to scale to 0..255; "
        "save the image with 8 or 16 bits per channel"
    )
    assert str(refused.value) == f"{path}: {reason}" and refused.value.reason == reason
    assert refused.value.line() == f"{path}: {reason}"
    assert tree_digest(tmp_path) == before


def test_premultiplied_grayscale_alpha_is_refused():
    with pytest.raises(ValueError) as refused:
        as_rgb(Image.new("La", SIZE))
    assert str(refused.value) == (
        "Pillow mode La: grayscale with premultiplied alpha has no conversion to RGB; save the image as L or LA"
    )


def test_every_mode_pillow_knows_is_converted_scaled_or_refused():
    assert set(Image.MODES) <= CONVERTED | SIXTEEN_BIT | set(REFUSED)  # a mode a later Pillow adds fails here


def test_a_file_that_cannot_be_decoded_is_named_with_the_decoders_error(tmp_path):
    path = tmp_path / "cut.png"
    Image.fromarray(values(3)).save(path)
    path.write_bytes(path.read_bytes()[:60])
    with pytest.raises(UnreadableImage) as refused:
        rgb_image(path)
    assert str(refused.value) == f"{path}: OSError: image file is truncated"
    (tmp_path / "notes.png").write_text("not an image")
    with pytest.raises(UnreadableImage) as refused:
        rgb_image(tmp_path / "notes.png")
    assert refused.value.reason == f"UnidentifiedImageError: cannot identify image file '{tmp_path / 'notes.png'}'"

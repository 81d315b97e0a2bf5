"""Image files read as the RGB values they hold, the same for both training apps.

[`rgb_image`][rambo.harness.images.rgb_image] opens a file with Pillow, decodes it fully, and returns an `RGB` image
whose values are the file's, on the 0..255 scale. How depends on the Pillow mode the file decodes to:

* `1`, `L`, `LA`, `P`, `PA`, `RGB`, `RGBA`, `RGBa`, `RGBX`, `CMYK`, `YCbCr`,
  `LAB`, `HSV`: Pillow's `convert("RGB")` (alpha dropped, palettes looked up, the colour
  spaces converted);
* 16-bit grayscale (`I;16`, `I;16L`, `I;16B`, `I;16N`: 16-bit PNG, TIFF or JPEG 2000), and
  `I` from a PNG or a 16-bit PGM (Pillow reads those into 0..65535): scaled, `v -> round(v *
  255 / 65535)`. `convert("RGB")` would clip every value above 255 to white;
* `I` from any other format (32-bit integer TIFF, signed 16-bit TIFF) and `F` (floating point):
  refused, since their pixels have no fixed range to scale from; so is `La` (premultiplied
  grayscale alpha, which Pillow cannot convert) and any mode not listed here.

A file that cannot be opened or decoded, or is refused, is an [`UnreadableImage`][rambo.harness.images.UnreadableImage]
whose message names the file and says why in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from .config_check import InputError

# Modes whose values convert("RGB") reads right (measured with Pillow 11.3 against their definitions).
CONVERTED = frozenset({"1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"})
SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
# Formats whose mode "I" pixels are 16-bit, 0..65535: PNG's 16-bit grayscale (older Pillow reads it
# as "I"), and PGM with a maxval above 255 (Pillow scales it to 0..65535).
SIXTEEN_BIT_I_FORMATS = frozenset({"PNG", "PPM"})
REFUSED = {
    "I": "Pillow mode I: 32-bit integer pixels have no fixed range to scale to 0..255; "
    "save the image with 8 or 16 bits per channel",
    "F": "Pillow mode F: floating-point pixels have no fixed range to scale to 0..255; "
    "save the image with 8 or 16 bits per channel",
    "La": "Pillow mode La: grayscale with premultiplied alpha has no conversion to RGB; save the image as L or LA",
}


class UnreadableImage(InputError):
    """An image file that cannot be opened, decoded, or read as RGB values. The message is
    `"<file>: <reason>"`; `reason` is the part after the file (one line)."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = message if reason is None else reason


class UnsupportedMode(ValueError):
    """A decoded image whose Pillow mode has no RGB reading here (`REFUSED`); the message says
    which mode and what to do, without the file."""


def as_rgb(image: Image.Image) -> Image.Image:
    """`image` (opened by Pillow) as a new `RGB` image on the 0..255 scale (module docstring);
    raises [`UnsupportedMode`][rambo.harness.images.UnsupportedMode] for a mode that has no such reading."""
    mode = image.mode
    if mode in CONVERTED:
        return image.convert("RGB")
    if mode in SIXTEEN_BIT or (mode == "I" and image.format in SIXTEEN_BIT_I_FORMATS):
        values = np.asarray(image).astype(np.uint32)  # I;16B comes as big-endian uint16: astype reads it right
        gray = ((values + 128) // 257).astype(np.uint8)  # round(v * 255 / 65535) = round(v / 257), in integers
        return Image.fromarray(np.repeat(gray[..., None], 3, axis=2))
    raise UnsupportedMode(
        REFUSED.get(mode, f"Pillow mode {mode} has no conversion to RGB here; save the image as 8-bit RGB or grayscale")
    )


def rgb_image(path: Path | str) -> Image.Image:
    """The image file at `path` fully decoded as `RGB` values 0..255 ([`as_rgb`][rambo.harness.images.as_rgb]). Raises
    [`UnreadableImage`][rambo.harness.images.UnreadableImage] naming `path` when it cannot be opened or decoded (the
    decoder's error, in one line) or its mode is refused."""
    try:
        with Image.open(path) as image:
            return as_rgb(image)
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, DecompressionBombError...
        reason = str(error) if isinstance(error, UnsupportedMode) else f"{type(error).__name__}: {error}"
        reason = reason.splitlines()[0]
        raise UnreadableImage(f"{path}: {reason}", reason) from None

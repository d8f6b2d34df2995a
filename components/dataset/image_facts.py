"""What the dataset stage notes of each image as it decodes it: its size and format as the
source stores it, a hash of its bytes (exact duplicates) and a thumbnail of its pixels
(near duplicates: the same picture re-encoded or resized).

The thumbnail is the image shrunk to 8x8 in colour, each pixel the mean of its box;
`difference` is the mean absolute difference of two thumbnails, 0-255. Calibrated by
`benchmarks/near_duplicates.py` (figures in docs/retraining.md) on the builtin shapes at
32-128 px and the UCI handwritten digits at 8-32 px: the closest distinct image differs
by 11 or more among the shapes and by 3.6 or more among the digits (6 or less for 1 in
359), while copies of 32 px images and up resized by 0.5-2x differ from their originals
by 1.4 or less as PNG and 3.5 or less as JPEGs of 32 px or more. The 64-bit grey difference
hash used before could not tell the two apart on small, flat images: copies 8-17 bits
from their originals, distinct drawings of one class 2-4 bits apart.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

#: The stored format of an image that was drawn, not read (the builtin shapes).
DRAWN = "drawn"

#: The thumbnail's side, in pixels.
THUMB_SIDE = 8


class Facts(NamedTuple):
    """One image's facts (a tuple, so that millions stay small and travel as JSON).

    Attributes:
        width: Its width in the source, in pixels.
        height: Its height in the source.
        format: Its format in the source as Pillow names it (`JPEG`, `PNG`...), `drawn` for
            a drawn image, or `array` for decoded pixels (TFDS).
        exact: The first 16 hex digits of the SHA-256 of its bytes in the source (of its
            pixels when drawn or decoded).
        thumb: Its 8x8 RGB thumbnail (`thumbnail`), 192 bytes as hex.
    """

    width: int
    height: int
    format: str
    exact: str
    thumb: str


def thumbnail(img: Any) -> str:
    """The 8x8 RGB thumbnail of a PIL image (box filter: each pixel its box's mean), hex."""
    from PIL import Image

    small = img.convert("RGB").resize((THUMB_SIDE, THUMB_SIDE), Image.BOX)
    return small.tobytes().hex()


def difference(a: str, b: str) -> float:
    """The mean absolute difference of two thumbnails' values, 0 (the same) to 255."""
    first, second = bytes.fromhex(a), bytes.fromhex(b)
    return sum(abs(x - y) for x, y in zip(first, second, strict=True)) / len(first)


def facts_of(img: Any, data: bytes | None = None, image_format: str | None = None) -> Facts:
    """The facts of a decoded PIL image, read from `data` (its bytes in the source; None
    for a drawn image, whose pixels are hashed instead)."""
    content = data if data is not None else img.tobytes()
    return Facts(img.width, img.height,
                 image_format or (img.format if data is not None and img.format else DRAWN),
                 hashlib.sha256(content).hexdigest()[:16], thumbnail(img))
